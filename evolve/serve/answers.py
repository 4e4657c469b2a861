"""A served answer: what ``Deployment.answer`` and ``Deployment.stream`` give a caller, and the row it is
kept under (``evolve.serve.responses``), whose id is the handle for feedback.

Example:
    >>> from connectors import Usage
    >>> from evolve.episode import Step
    >>> answer = Answer("chatcmpl-1", "codes@acme", "4471", (Step("solver", (), "4471"),), Usage(), "v1", 0)
    >>> answer.finish_reason, answer.recall_ids
    ('stop', ())
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from connectors import Message, StoreError, ToolCall, Usage
from evolve.episode import Step
from evolve.run_log import steps_to_json
from evolve.serve.timing import Timed
from evolve.tools.loop import DESCRIBED

log = logging.getLogger(__name__)


class UnknownResponse(StoreError):
    """No response with this id belongs to this tenant (or it never existed: the two look the same)."""


@dataclass(frozen=True)
class Answer:
    """One served response: its id (the handle for feedback), the text and how the team got there."""

    id: str
    run: str
    text: str
    steps: tuple[Step, ...]
    usage: Usage
    prompt_version: str
    created: int
    timings: Mapping[str, float] = dataclasses.field(default_factory=dict)  # ms: "recall", "model", "answer"
    logprobs: tuple[tuple[str, float], ...] | None = None  # the answer's (token, logprob)s, when asked for
    work: tuple[Timed, ...] = ()  # each recall, model call and the recording, timed (evolve.serve.timing)

    @property
    def recall_ids(self) -> tuple[str, ...]:
        """The recalls the team made, in agent order: feedback reinforces their memories."""
        return tuple(s.recall_id for s in self.steps if s.recall_id is not None)

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The calls the answering agent made to the request's tools: the app runs them."""
        last = self.steps[-1] if self.steps else None
        return tuple(r.call for r in last.calls if r.result == DESCRIBED) if last is not None else ()

    @property
    def finish_reason(self) -> str:
        """Why the answer ended, in OpenAI's words: ``tool_calls``, ``length`` (the token budget cut it)
        or ``stop``."""
        if self.tool_calls:
            return "tool_calls"
        last = self.steps[-1].finish if self.steps else None
        return "length" if last == "length" else "stop"


class Watcher(Protocol):
    """What ``Deployment.watch`` tells of: every answer once it is recorded (a streamed one when its text ends or
    the stream is closed; one that failed its format too) and every rating taken (``applied`` False for a repeat
    of an idempotency key). ``/metrics`` and traces are watchers; a watcher that fails is logged, never the
    request's failure."""

    def answered(self, answer: Answer) -> None: ...

    def rated(self, applied: bool) -> None: ...


def tell_answered(watchers: Sequence[Watcher], answer: Answer) -> None:
    """Tell every watcher of ``answer``; one that fails is logged and the others are still told."""
    for watcher in watchers:
        try:
            watcher.answered(answer)
        except Exception:
            log.exception("a watcher of served answers failed")


def tell_rated(watchers: Sequence[Watcher], applied: bool) -> None:
    """Tell every watcher of a rating taken; one that fails is logged and the others are still told."""
    for watcher in watchers:
        try:
            watcher.rated(applied)
        except Exception:
            log.exception("a watcher of ratings failed")


def response_row(answer: Answer, query: str, messages: Sequence[Message]) -> dict[str, Any]:
    return {
        "id": answer.id,
        "run": answer.run,
        "created_at": float(answer.created),
        "query": query,
        "messages": json.dumps([m.to_dict() for m in messages]),
        "answer": answer.text,
        "steps": steps_to_json(answer.steps),
        "prompt_version": answer.prompt_version,
        "tokens": answer.usage.total_tokens,
    }


__all__ = ["Answer", "UnknownResponse", "Watcher", "response_row", "tell_answered", "tell_rated"]
