"""Plackett–Luce orders (optimizers.order) against enumerating every permutation, n ≤ 5."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizers.order import grad_log_prob, greedy, log_prob, position_log_probs, sample

priorities = st.integers(1, 5).flatmap(
    lambda n: st.lists(st.floats(-4, 4, allow_nan=False, allow_infinity=False), min_size=n, max_size=n)
)
temperatures = st.floats(0.2, 5.0)


def brute_prob(order: tuple[int, ...], s: np.ndarray, tau: float) -> float:
    """P(σ) by the product of the draws, each left agent's weight over their sum: no shared code."""
    left, p = list(range(len(s))), 1.0
    for a in order:
        p *= math.exp(s[a] / tau) / sum(math.exp(s[j] / tau) for j in left)
        left.remove(a)
    return p


@settings(max_examples=60, deadline=None)
@given(priorities, temperatures)
def test_probabilities_are_the_product_of_draws_and_sum_to_one(s: list[float], tau: float) -> None:
    s_ = np.array(s)
    perms = list(itertools.permutations(range(len(s))))
    probs = [math.exp(log_prob(p, s_, tau)) for p in perms]
    assert probs == pytest.approx([brute_prob(p, s_, tau) for p in perms], rel=1e-9, abs=1e-12)
    assert sum(probs) == pytest.approx(1.0, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(priorities, temperatures, st.data())
def test_gradient_matches_finite_differences(s: list[float], tau: float, data: st.DataObject) -> None:
    s_ = np.array(s)
    order = data.draw(st.permutations(range(len(s))))
    weights = np.array(data.draw(st.lists(st.floats(-2, 2), min_size=len(s), max_size=len(s))))
    grad = grad_log_prob(order, s_, tau, weights)
    h = 1e-6
    for k in range(len(s)):
        up, down = s_.copy(), s_.copy()
        up[k] += h
        down[k] -= h
        f = lambda v: float(weights @ position_log_probs(order, v, tau))  # noqa: E731
        assert grad[k] == pytest.approx((f(up) - f(down)) / (2 * h), rel=1e-4, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(priorities, temperatures)
def test_expected_score_function_is_zero(s: list[float], tau: float) -> None:
    """Σ_σ P(σ) ∇log P(σ) = ∇ Σ_σ P(σ) = 0: what makes a baseline leave the policy gradient unbiased."""
    s_ = np.array(s)
    total = sum(brute_prob(p, s_, tau) * grad_log_prob(p, s_, tau) for p in itertools.permutations(range(len(s))))
    assert np.abs(total).max() < 1e-9


def test_sampling_follows_the_enumerated_distribution() -> None:
    """Gumbel-top-k draws, 60,000 of them over the 24 orders of 4 agents: each order's share within 4.5
    standard errors of its probability (a false alarm about once in 10,000 runs; the seed is fixed)."""
    s, tau, n = np.array([1.2, 0.0, -0.7, 0.4]), 0.8, 60_000
    rng = np.random.default_rng(7)
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(n):
        o = tuple(sample(s, tau, rng).tolist())
        counts[o] = counts.get(o, 0) + 1
    for p in itertools.permutations(range(4)):
        expected = brute_prob(p, s, tau)
        assert abs(counts.get(p, 0) / n - expected) < 4.5 * math.sqrt(expected * (1 - expected) / n), p


@settings(max_examples=60, deadline=None)
@given(priorities)
def test_greedy_is_the_most_probable_order(s: list[float]) -> None:
    s_ = np.round(np.array(s), 1)  # ties happen: greedy keeps the listed order among them
    best = max(itertools.permutations(range(len(s))), key=lambda p: (brute_prob(p, s_, 1.0), [-a for a in p]))
    assert math.isclose(brute_prob(tuple(greedy(s_).tolist()), s_, 1.0), brute_prob(best, s_, 1.0), rel_tol=1e-12)
    assert greedy(np.zeros(len(s))).tolist() == list(range(len(s)))


@pytest.mark.parametrize(
    ("order", "scores", "tau", "message"),
    [
        ([0, 0], [1.0, 2.0], 1.0, "each of the 2 agents once"),
        ([0, 1, 2], [1.0, 2.0], 1.0, "each of the 2 agents once"),
        ([0, 1], [1.0, float("nan")], 1.0, "finite"),
        ([0, 1], [1.0, 2.0], 0.0, "temperature must be > 0"),
        ([0, 1], [1.0, 2.0], -1.0, "temperature must be > 0"),
    ],
)
def test_bad_input_is_a_clear_error(order: list[int], scores: list[float], tau: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        log_prob(order, np.array(scores), tau)
