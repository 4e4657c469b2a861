"""One question to the critic model: within budget, accounted per component, parsed, retried once.

Every optimizer talks to its critic through ``Critic.ask``: the prompt goes out with the critic's
system message through the caller's ``ChatClient`` (``caller="critic:<component>"``, so the client's
own accounting splits by component too); the answer is parsed; an unparseable answer is sent back
once with the error appended, and a second failure skips the item (``ask`` returns None). Parse
failures never escape; a failed backend becomes ``CriticFailed`` so a step can tell it apart from a
failure of the team being optimised.

Example:
    >>> from connectors import ChatClient, ScriptedChat
    >>> from optimizers.budget import Budget, Spend
    >>> from optimizers.parsing import parse_rewrite
    >>> critic = Critic(ChatClient(ScriptedChat(["oops", "<new_text>Be brief.</new_text>"])), Spend(Budget()))
    >>> critic.ask("Rewrite it.", component="solver.system", parse=parse_rewrite), critic.retried
    ('Be brief.', 1)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from connectors import ChatClient, ConnectorError, EvolveError, Message, ParseError, Usage
from optimizers.budget import Spend, estimate_tokens
from optimizers.prompts import CRITIC_SYSTEM, RETRY_PROMPT

log = logging.getLogger(__name__)

T = TypeVar("T")


DEFAULT_MAX_TOKENS = 512


class CriticFailed(EvolveError):
    """The critic's backend failed (after the client's own retries); the step stops without a proposal."""


class Critic:
    """A ``ChatClient`` used as a critic within one step's ``Spend``.

    Args:
        client: the critic model (any ``ChatClient``; an API model may critique a local one).
        spend: the step's spend, checked before and updated after every call.
        params: sampling parameters passed on every call (e.g. ``{"temperature": 0.0}``).
        system: the system message of every call.

    Attributes:
        retried: answers that failed to parse and were asked again.
        skipped: items given up after two unparseable answers.
    """

    def __init__(
        self, client: ChatClient, spend: Spend, *, params: Mapping[str, Any] | None = None, system: str = CRITIC_SYSTEM
    ) -> None:
        self.client = client
        self.spend = spend
        # Long enough for a full critique or rewrite; backends' own defaults are often far shorter
        # (a local model's 64 new tokens cut a rewrite before its closing tag). Callers override it.
        self.params = {"max_tokens": DEFAULT_MAX_TOKENS, **(params or {})}
        self.system = system
        self.retried = 0
        self.skipped = 0

    def ask(self, prompt: str, *, component: str, parse: Callable[[str], T], reserve_calls: int = 0) -> T | None:
        """Ask once, retry once on a parse failure, then give up on this item (None).

        ``parse`` may itself return None (a "nothing to change" sentinel); callers treat both alike.

        Raises:
            BudgetExhausted: the next call does not fit the budget (with ``reserve_calls`` kept free).
            CriticFailed: the backend failed.
        """
        messages = [Message("system", self.system), Message("user", prompt)]
        for attempt in (1, 2):
            self.spend.check(estimate_tokens("".join(m.content for m in messages)), reserve_calls=reserve_calls)
            try:
                completion = self.client.complete(messages, caller=f"critic:{component}", **self.params)
            except ConnectorError as e:
                raise CriticFailed(f"critic failed ({self.client.name}, on {component}): {e}") from e
            self.spend.add(component, Usage() if completion.cached else completion.usage)
            try:
                return parse(completion.text)
            except ParseError as e:
                log.warning("critic answer for %s unparseable (attempt %d): %s", component, attempt, e)
                if attempt == 2:
                    break
                self.retried += 1
                messages = [
                    *messages,
                    Message("assistant", completion.text),
                    Message("user", RETRY_PROMPT.format(error=e)),
                ]
        self.skipped += 1
        return None
