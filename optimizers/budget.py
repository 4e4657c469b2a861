"""What one optimizer step may spend on its critic, and what it did spend, component by component.

A ``Budget`` caps the critic's calls, tokens and cost *per step* (the caller decides how many steps
to run) and sizes the step: how many training examples it looks at and how many components it may
rewrite. Presets name sensible sizes; explicit fields override them.

A ``Spend`` accumulates the critic's ``Completion.usage`` per component and refuses a call that
would go past the budget by raising ``BudgetExhausted`` *before* the call is made, so the optimizer
stops cleanly instead of overspending. Token counts of a call are known only afterwards, so the
check uses an estimate of the prompt (about four characters per token); the completion's tokens can
still take the last call slightly past ``max_tokens``.

Example:
    >>> budget = Budget.preset("light", max_calls=3)
    >>> spend = Spend(budget)
    >>> spend.add("solver.system", Usage(120, 30))
    >>> spend.calls, spend.total.total_tokens, spend.exhausted()
    (1, 150, False)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from connectors import ConfigError, EvolveError, Usage


class BudgetExhausted(EvolveError):
    """The next critic call would go past the step's budget; nothing was spent on it."""


@dataclass(frozen=True, kw_only=True)
class Budget:
    """Limits on one optimizer step's critic spend, and the step's size.

    Args:
        max_calls: critic calls per step (retries count); None for no limit.
        max_tokens: critic tokens (prompt + completion) per step; None for no limit.
        max_cost: critic cost in US dollars per step, as the backend reports it; None for no limit.
        minibatch_size: training examples run per textual-gradient step.
        max_components: components rewritten per textual-gradient step (the most criticised first).

    Example:
        >>> Budget.preset("medium").minibatch_size
        8
        >>> Budget(max_calls=5).max_tokens is None
        True
    """

    max_calls: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    minibatch_size: int = 4
    max_components: int = 1

    def __post_init__(self) -> None:
        for name in ("max_calls", "max_tokens", "max_cost"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"Budget.{name} must be >= 0 or None, got {value}")
        for name in ("minibatch_size", "max_components"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"Budget.{name} must be an int >= 1, got {value!r}")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> Budget:
        """A named preset (``light``, ``medium``, ``heavy``) with some fields overridden.

        Raises:
            ConfigError: the name is unknown or an override is not a Budget field.
        """
        base = PRESETS.get(name)
        if base is None:
            raise ConfigError(f"unknown budget preset {name!r}; expected one of {sorted(PRESETS)}")
        unknown = sorted(set(overrides) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"unknown Budget fields {unknown}; expected some of {sorted(cls.__dataclass_fields__)}")
        return replace(base, **overrides)


PRESETS: dict[str, Budget] = {
    # a textual-gradient step: a few critiques and one rewrite; a TF-GRPO step: about one batch of groups
    "light": Budget(max_calls=40, max_tokens=200_000, minibatch_size=4, max_components=1),
    "medium": Budget(max_calls=120, max_tokens=600_000, minibatch_size=8, max_components=2),
    "heavy": Budget(max_calls=400, max_tokens=2_000_000, minibatch_size=16, max_components=4),
}


def as_budget(budget: str | Budget) -> Budget:
    """Accept a preset name or a ``Budget``."""
    if isinstance(budget, Budget):
        return budget
    if isinstance(budget, str):
        return Budget.preset(budget)
    raise ConfigError(f"budget must be a preset name {sorted(PRESETS)} or a Budget, got {type(budget).__name__}")


def estimate_tokens(text: str) -> int:
    """A rough token count for a prompt (about four characters per token), used only to stay in budget."""
    return math.ceil(len(text) / 4)


class Spend:
    """The critic's spend in one step, per component, checked against a ``Budget``.

    Example:
        >>> spend = Spend(Budget(max_calls=1))
        >>> spend.add("solver.system", Usage(10, 5))
        >>> spend.exhausted()
        True
    """

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.calls = 0
        self.by_component: dict[str, Usage] = {}

    @property
    def total(self) -> Usage:
        """Everything spent so far, all components together."""
        total = Usage()
        for usage in self.by_component.values():
            total = total + usage
        return total

    def add(self, component: str, usage: Usage) -> None:
        """Record one finished critic call about ``component``."""
        self.calls += 1
        self.by_component[component] = self.by_component.get(component, Usage()) + usage

    def calls_left(self) -> int | None:
        """Calls still allowed (None without a call limit)."""
        if self.budget.max_calls is None:
            return None
        return max(0, self.budget.max_calls - self.calls)

    def exhausted(self) -> bool:
        """True when any limit has been reached."""
        b, total = self.budget, self.total
        return (
            (b.max_calls is not None and self.calls >= b.max_calls)
            or (b.max_tokens is not None and total.total_tokens >= b.max_tokens)
            or (b.max_cost is not None and total.cost >= b.max_cost)
        )

    def check(self, prompt_tokens: int = 0, *, reserve_calls: int = 0) -> None:
        """Raise ``BudgetExhausted`` unless one more call (plus ``reserve_calls`` kept for later) fits.

        Args:
            prompt_tokens: the estimated prompt size of the next call.
            reserve_calls: calls that must stay available after this one (e.g. the rewrites that
                follow the critiques).
        """
        b, total = self.budget, self.total
        if b.max_calls is not None and self.calls + 1 + reserve_calls > b.max_calls:
            raise BudgetExhausted(
                f"critic call {self.calls + 1} (+{reserve_calls} reserved) would pass max_calls={b.max_calls}"
            )
        if b.max_tokens is not None and total.total_tokens + prompt_tokens > b.max_tokens:
            raise BudgetExhausted(
                f"{total.total_tokens} tokens spent + ~{prompt_tokens} for the next prompt would pass "
                f"max_tokens={b.max_tokens}"
            )
        if b.max_cost is not None and total.cost >= b.max_cost:
            raise BudgetExhausted(f"${total.cost:.4f} spent reaches max_cost=${b.max_cost}")
