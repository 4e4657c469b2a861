"""Budgets: presets with overrides, and a Spend that refuses a call before it overspends."""

from __future__ import annotations

import pytest

from connectors import ConfigError, Usage
from optimizers.budget import PRESETS, Budget, BudgetExhausted, Spend, as_budget, estimate_tokens


def test_presets_grow_from_light_to_heavy() -> None:
    light, medium, heavy = (Budget.preset(n) for n in ("light", "medium", "heavy"))
    for field in ("max_calls", "max_tokens", "minibatch_size", "max_components"):
        assert getattr(light, field) < getattr(medium, field) < getattr(heavy, field)
    assert set(PRESETS) == {"light", "medium", "heavy"}


def test_preset_overrides_replace_single_fields() -> None:
    b = Budget.preset("light", max_calls=3, max_cost=0.5)
    assert (b.max_calls, b.max_cost) == (3, 0.5)
    assert b.max_tokens == PRESETS["light"].max_tokens


def test_bad_budgets_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown budget preset 'huge'"):
        Budget.preset("huge")
    with pytest.raises(ConfigError, match="unknown Budget fields \\['calls'\\]"):
        Budget.preset("light", calls=3)
    with pytest.raises(ConfigError, match="max_calls must be >= 0"):
        Budget(max_calls=-1)
    with pytest.raises(ConfigError, match="minibatch_size"):
        Budget(minibatch_size=0)
    with pytest.raises(ConfigError, match="preset name"):
        as_budget(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Budget(5)  # type: ignore[misc]  # keyword-only


def test_spend_is_accounted_per_component() -> None:
    spend = Spend(Budget())
    spend.add("solver.system", Usage(100, 20, 0.01))
    spend.add("solver.system", Usage(50, 10, 0.01))
    spend.add("planner.system", Usage(10, 5))
    assert spend.calls == 3
    system = spend.by_component["solver.system"]
    assert (system.prompt_tokens, system.completion_tokens, system.cost) == (150, 30, pytest.approx(0.02))
    assert spend.total.total_tokens == 195
    assert spend.calls_left() is None


def test_check_refuses_the_call_that_would_pass_max_calls() -> None:
    spend = Spend(Budget(max_calls=2))
    spend.check()
    spend.add("a", Usage(1, 1))
    with pytest.raises(BudgetExhausted, match="reserved"):
        spend.check(reserve_calls=1)
    spend.check()
    spend.add("a", Usage(1, 1))
    assert spend.exhausted()
    with pytest.raises(BudgetExhausted, match="max_calls=2"):
        spend.check()


def test_check_refuses_a_prompt_that_would_pass_max_tokens() -> None:
    spend = Spend(Budget(max_tokens=100))
    spend.add("a", Usage(60, 10))
    spend.check(prompt_tokens=30)
    with pytest.raises(BudgetExhausted, match="max_tokens=100"):
        spend.check(prompt_tokens=31)


def test_cost_limit() -> None:
    spend = Spend(Budget(max_cost=0.05))
    spend.add("a", Usage(1, 1, 0.05))
    assert spend.exhausted()
    with pytest.raises(BudgetExhausted, match="max_cost"):
        spend.check()


def test_token_estimate_is_about_four_characters_per_token() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("x" * 400) == 100
