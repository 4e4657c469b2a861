"""The validation gate: exact p-values computed by hand, and regressions or ties never accepted."""

from __future__ import annotations

import numpy as np
import pytest

from connectors import ConfigError
from optimizers.gate import all_sign_sums, paired_test, sign_flip_p_value


def pairs(diffs: list[float]) -> tuple[dict[str, float], dict[str, float]]:
    before = {f"e{i}": 0.5 for i in range(len(diffs))}
    after = {f"e{i}": 0.5 + d for i, d in enumerate(diffs)}
    return before, after


@pytest.mark.parametrize(
    ("diffs", "p"),
    [
        ([1, 1, 1, 1, 1], 1 / 32),  # only the observed assignment reaches +5
        ([1, 1, 1, 0], 1 / 8),  # the zero carries no sign: 3 signs, one assignment reaches +3
        ([1, 1, -1, 1], 5 / 16),  # sum >= 2 needs at most one minus sign: 1 + 4 of 16
        ([0.5, 0.25, 0.5], 1 / 8),  # the next-largest sum flips 0.25: 0.75 < 1.25
        ([0.5, -0.25, 0.25], 3 / 8),  # sums of ±.5 ±.25 ±.25 that reach .5: (+,+,+), (+,+,-), (+,-,+)
    ],
)
def test_p_values_match_hand_computed_enumeration(diffs: list[float], p: float) -> None:
    before, after = pairs(diffs)
    decision = paired_test(before, after)
    assert decision.p_value == pytest.approx(p)
    assert decision.n == len(diffs)
    assert decision.mean_diff == pytest.approx(sum(diffs) / len(diffs))


def test_a_clear_gain_is_accepted_with_a_readable_reason() -> None:
    decision = paired_test(*pairs([1, 1, 1, 1, 1]))
    assert decision.accepted
    assert decision.reason == "validation: +1.00 mean over 5 examples, p = 0.03"


def test_a_gain_within_noise_is_rejected() -> None:
    decision = paired_test(*pairs([1, 1, 1, 0]))
    assert not decision.accepted
    assert decision.reason == "validation gain within noise: +0.75 mean over 4 examples, p = 0.12"


@pytest.mark.parametrize("diffs", [[-1, -1, -1, -1, -1], [-0.2] * 20, [1, -1, -1, 0]])
def test_a_regression_is_never_accepted(diffs: list[float]) -> None:
    decision = paired_test(*pairs(diffs), alpha=0.99)
    assert not decision.accepted
    assert decision.mean_diff < 0
    assert decision.reason.startswith("validation regression: ")


@pytest.mark.parametrize("diffs", [[0, 0, 0], [1, -1], [0.5, -0.25, -0.25, 0]])
def test_a_tie_is_never_accepted(diffs: list[float]) -> None:
    decision = paired_test(*pairs(diffs), alpha=0.99)
    assert not decision.accepted
    assert decision.reason.startswith("validation tie: ")


def test_alpha_is_the_acceptance_threshold() -> None:
    before, after = pairs([1, 1, 1, 1, 1])  # p = 1/32
    assert paired_test(before, after, alpha=0.05).accepted
    assert not paired_test(before, after, alpha=0.01).accepted


def test_no_nonzero_difference_gives_p_one() -> None:
    assert sign_flip_p_value(np.zeros(4)) == 1.0


def test_monte_carlo_beyond_the_exact_limit_is_seeded_and_close_to_exact() -> None:
    rng = np.random.default_rng(7)
    diffs = rng.normal(0.15, 0.5, size=18)
    exact = sign_flip_p_value(diffs, exact_limit=18)
    mc = sign_flip_p_value(diffs, exact_limit=0, samples=40_000, seed=3)
    assert mc == sign_flip_p_value(diffs, exact_limit=0, samples=40_000, seed=3)
    assert abs(mc - exact) < 0.01


def test_monte_carlo_never_reports_zero() -> None:
    before, after = pairs([1.0] * 30)
    decision = paired_test(before, after, samples=999)
    assert decision.p_value == pytest.approx(1 / 1000)
    assert decision.accepted


def test_all_sign_sums_enumerates_every_assignment() -> None:
    sums = all_sign_sums(np.array([1.0, 2.0]))
    assert sorted(sums.tolist()) == [-3.0, -1.0, 1.0, 3.0]


def test_mismatched_examples_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match="only in before: \\['b'\\]"):
        paired_test({"a": 1.0, "b": 0.0}, {"a": 1.0})
    with pytest.raises(ConfigError, match="empty"):
        paired_test({}, {})
    with pytest.raises(ConfigError, match="alpha"):
        paired_test({"a": 1.0}, {"a": 1.0}, alpha=1.5)
