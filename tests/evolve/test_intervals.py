"""Learning figures over seeds: the 95% interval is Student's, and pairing finds what two overlapping
intervals hide."""

from __future__ import annotations

import math

import numpy as np
import pytest

from connectors import ConfigError
from evolve.intervals import Interval, paired_interval, seed_interval, t975


@pytest.mark.parametrize("n", [2, 3, 5, 8, 31, 61, 121])
def test_the_interval_is_the_student_t_interval(n: int) -> None:
    stats = pytest.importorskip("scipy.stats")
    xs = np.random.default_rng(n).uniform(0.0, 1.0, n)
    got = seed_interval(xs)
    low, high = stats.t.interval(0.95, n - 1, loc=xs.mean(), scale=xs.std(ddof=1) / math.sqrt(n))
    assert got.mean == pytest.approx(xs.mean())
    assert got.low == pytest.approx(low, abs=2e-3 * (high - low)) and got.high == pytest.approx(
        high, abs=2e-3 * (high - low)
    )


def test_the_t_table_matches_scipy_where_it_is_exact() -> None:
    stats = pytest.importorskip("scipy.stats")
    assert [round(t975(df), 3) for df in range(1, 31)] == [
        round(float(stats.t.ppf(0.975, df)), 3) for df in range(1, 31)
    ]


def test_pairing_finds_a_gain_that_two_overlapping_intervals_hide() -> None:
    # seeds differ a lot (task order), Q-memory is 0.05 above similarity on every one of them
    similarity = [0.10, 0.40, 0.25, 0.55, 0.30]
    q = [s + 0.05 for s in similarity]
    a, b = seed_interval(similarity), seed_interval(q)
    assert a.high > b.low  # separately, the intervals overlap
    d = paired_interval(baseline=similarity, treatment=q)
    assert d.mean == pytest.approx(0.05) and d.excludes_zero


def test_a_difference_that_changes_sign_across_seeds_is_no_difference() -> None:
    d = paired_interval(baseline=[0.20, 0.30, 0.25, 0.15, 0.30], treatment=[0.23, 0.27, 0.39, 0.12, 0.33])
    assert d.mean > 0 and not d.excludes_zero
    assert d.values == pytest.approx((0.03, -0.03, 0.14, -0.03, 0.03))


def test_one_seed_measures_no_spread_and_says_so() -> None:
    one = seed_interval([0.62])
    assert (one.mean, one.low, one.high, one.n) == (0.62, 0.62, 0.62, 1)
    assert not one.excludes_zero and one.text() == "0.620 (1 seed)"
    assert Interval.of([0.2, 0.4]).text(2) == "0.30 [-0.97, 1.57]"


@pytest.mark.parametrize("values", [[], [0.1, float("nan")], [float("inf")]])
def test_no_values_or_non_finite_ones_are_refused(values: list[float]) -> None:
    with pytest.raises(ConfigError, match="finite per-seed values"):
        seed_interval(values)


def test_paired_conditions_need_one_value_per_seed_each() -> None:
    with pytest.raises(ConfigError, match="one value per seed, got 2 and 3"):
        paired_interval(baseline=[0.1, 0.2], treatment=[0.1, 0.2, 0.3])
    with pytest.raises(ConfigError, match="degrees of freedom"):
        t975(0)
