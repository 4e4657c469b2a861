"""Plackett–Luce orders over a team's agents, as pure NumPy functions (PMAT's AGPS, docs/concepts/teams.md).

An order σ of n agents with priorities s and temperature τ has the probability

    P(σ) = ∏ᵢ exp(s_σᵢ/τ) / Σ_{j≥i} exp(s_σⱼ/τ)

(the first agent is drawn in proportion to exp(s/τ), the next from the rest, and so on). ``sample`` draws it
by adding Gumbel noise to s/τ and sorting; ``grad_log_prob`` is the derivative of log P(σ) with respect to
the priorities, by position (the sum over positions is the whole order's gradient); ``greedy`` is the order
of the priorities, the most probable one. tests/optimizers/test_order_maths.py checks each against enumerating
every permutation for n ≤ 5.

Example:
    >>> import numpy as np
    >>> s = np.array([1.0, 0.0, -1.0])
    >>> round(float(np.exp(log_prob([0, 1, 2], s, 1.0))), 4), greedy(s).tolist()
    (0.4863, [0, 1, 2])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _checked(
    order: Sequence[int] | np.ndarray, scores: np.ndarray, temperature: float
) -> tuple[np.ndarray, np.ndarray]:
    """``order`` as an index array and the scaled priorities s/τ; a clear error for anything but a
    permutation of the priorities' positions and a positive, finite temperature."""
    s = np.asarray(scores, dtype=np.float64)
    sigma = np.asarray(order, dtype=np.int64)
    if s.ndim != 1 or not np.isfinite(s).all():
        raise ValueError(f"priorities must be a finite 1-D array, got {scores!r}")
    if sorted(sigma.tolist()) != list(range(len(s))):
        raise ValueError(f"an order must name each of the {len(s)} agents once, got {list(sigma.tolist())}")
    if not (np.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return sigma, s[sigma] / temperature


def _tail_logsumexp(x: np.ndarray) -> np.ndarray:
    """log Σ_{j≥i} exp(x_j) for every i, stably (from the end)."""
    out = np.empty_like(x)
    acc = -np.inf
    for i in range(len(x) - 1, -1, -1):
        acc = np.logaddexp(acc, x[i])
        out[i] = acc
    return out


def position_log_probs(order: Sequence[int] | np.ndarray, scores: np.ndarray, temperature: float) -> np.ndarray:
    """log of each factor of P(σ): the probability that position i's agent is drawn from those left."""
    _, x = _checked(order, scores, temperature)
    return x - _tail_logsumexp(x)


def log_prob(order: Sequence[int] | np.ndarray, scores: np.ndarray, temperature: float) -> float:
    """log P(σ) under Plackett–Luce with priorities ``scores`` and ``temperature``."""
    return float(position_log_probs(order, scores, temperature).sum())


def grad_log_prob(
    order: Sequence[int] | np.ndarray, scores: np.ndarray, temperature: float, weights: np.ndarray | None = None
) -> np.ndarray:
    """d/ds of Σᵢ wᵢ · log pᵢ(σ), pᵢ the i-th factor of P(σ) (``weights`` None: all 1, the gradient of log P(σ)).

    Position i's factor moves agent σᵢ up by 1/τ and every agent still left at i (σ_j, j ≥ i) down by its
    share of the draw there, exp(s_σⱼ/τ) / Σ_{l≥i} exp(s_σₗ/τ), over τ. With weights, each position's term is
    scaled by its own weight: a policy gradient whose return differs by position (``evolve.teams.ordered``).
    """
    sigma, x = _checked(order, scores, temperature)
    n = len(sigma)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError(f"weights must have one entry per position ({n}), got shape {w.shape}")
    tail = _tail_logsumexp(x)
    grad_by_position = np.zeros(n)  # indexed by position in σ
    for i in range(n):
        grad_by_position[i] += w[i]
        grad_by_position[i:] -= w[i] * np.exp(x[i:] - tail[i])
    out = np.zeros(n)
    out[sigma] = grad_by_position / temperature
    return out


def sample(scores: np.ndarray, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """An order drawn from Plackett–Luce: s/τ plus independent Gumbel noise, sorted best first."""
    s = np.asarray(scores, dtype=np.float64)
    _checked(np.arange(len(s)), s, temperature)
    return np.argsort(-(s / temperature + rng.gumbel(size=len(s))), kind="stable")


def greedy(scores: np.ndarray) -> np.ndarray:
    """The most probable order: priorities best first, ties in the agents' listed order."""
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
