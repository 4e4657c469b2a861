"""The validation gate: a one-sided paired sign-flip permutation test on per-example scores.

A proposal is accepted only when it beats its parent on the same validation examples by more than
chance would explain. Comparing raw means (GEPA's "new > old") accepts noise; pairing by example
removes the between-example variance, and the sign-flip test needs no distributional assumption.

Under the null hypothesis (the proposal is no better), each per-example difference d_i is as likely
to be +|d_i| as -|d_i|. The p-value is the share of the 2^m sign assignments of the m non-zero
differences whose sum is at least the observed sum — enumerated exactly for m <= ``exact_limit``,
estimated by seeded Monte Carlo beyond.

Example:
    >>> before = {"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0, "e": 0.0}
    >>> after = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0, "e": 1.0}
    >>> d = paired_test(before, after)
    >>> d.accepted, d.p_value, d.reason
    (True, 0.03125, 'validation: +1.00 mean over 5 examples, p = 0.03')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from connectors import ConfigError

EXACT_LIMIT = 16
MONTE_CARLO_SAMPLES = 20_000
_TOLERANCE = 1e-9  # sums of float scores: a permuted sum equal to the observed one counts as "at least"


@dataclass(frozen=True)
class GateDecision:
    """The outcome of the validation gate.

    ``mean_diff`` is the mean of ``after - before`` over the ``n`` paired examples; ``p_value`` the
    one-sided p-value; ``reason`` a one-line explanation for logs and ``StepResult.reason``.

    Example:
        >>> paired_test({"a": 1.0}, {"a": 0.0}).reason
        'validation regression: -1.00 mean over 1 example, p = 1.00'
    """

    accepted: bool
    mean_diff: float
    p_value: float
    n: int
    reason: str


def paired_test(
    before: Mapping[str, float],
    after: Mapping[str, float],
    *,
    alpha: float = 0.05,
    seed: int = 0,
    exact_limit: int = EXACT_LIMIT,
    samples: int = MONTE_CARLO_SAMPLES,
) -> GateDecision:
    """Decide whether ``after`` improves on ``before``, example by example.

    Args:
        before: the parent's score per validation example.
        after: the proposal's score per validation example; must have the same example ids.
        alpha: the significance level; accepted only when ``mean_diff > 0`` and ``p < alpha``.
        seed: seeds the Monte Carlo estimate (used only beyond ``exact_limit`` non-zero differences).
        exact_limit: the most non-zero differences enumerated exactly (2^m assignments).
        samples: Monte Carlo sign assignments drawn beyond ``exact_limit``.

    Raises:
        ConfigError: the two mappings cover different examples, are empty, or alpha is not in (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"paired_test: alpha must be in (0, 1), got {alpha}")
    if set(before) != set(after):
        only_before = sorted(set(before) - set(after))[:5]
        only_after = sorted(set(after) - set(before))[:5]
        raise ConfigError(
            "paired_test: before and after must score the same examples; "
            f"only in before: {only_before}, only in after: {only_after}"
        )
    if not before:
        raise ConfigError("paired_test: no examples to compare (both mappings are empty)")
    keys = sorted(before)
    diffs = np.array([float(after[k]) - float(before[k]) for k in keys], dtype=np.float64)
    mean_diff = float(diffs.mean())
    p = sign_flip_p_value(diffs, exact_limit=exact_limit, samples=samples, seed=seed)
    accepted = mean_diff > 0.0 and p < alpha
    return GateDecision(accepted, mean_diff, p, len(keys), _reason(mean_diff, p, len(keys), accepted))


def sign_flip_p_value(
    diffs: np.ndarray, *, exact_limit: int = EXACT_LIMIT, samples: int = MONTE_CARLO_SAMPLES, seed: int = 0
) -> float:
    """One-sided p-value of ``sum(diffs)`` under random sign flips of the non-zero differences.

    Zero differences carry no sign and are left out. With no non-zero difference the p-value is 1.
    The Monte Carlo estimate counts the observed assignment too, ``(1 + hits) / (1 + samples)``, so it
    is never 0.
    """
    nonzero = np.abs(diffs[diffs != 0.0])
    m = int(nonzero.size)
    if m == 0:
        return 1.0
    observed = float(diffs.sum())
    if m <= exact_limit:
        sums = all_sign_sums(nonzero)
        return float(np.count_nonzero(sums >= observed - _TOLERANCE)) / float(sums.size)
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(samples, m))
    sums = signs @ nonzero
    return (1.0 + float(np.count_nonzero(sums >= observed - _TOLERANCE))) / (1.0 + samples)


def all_sign_sums(magnitudes: np.ndarray) -> np.ndarray:
    """The sum of ``±magnitudes`` for every one of the 2^m sign assignments (vectorised)."""
    m = magnitudes.size
    codes = np.arange(2**m, dtype=np.int64)[:, None]
    bits = (codes >> np.arange(m, dtype=np.int64)[None, :]) & 1
    signs = 2.0 * bits - 1.0
    return signs @ magnitudes


def format_p(p: float) -> str:
    """Two decimals, or one significant digit below 0.01 so a tiny p-value does not print as 0.00."""
    return f"{p:.2f}" if p >= 0.01 else f"{p:.1g}"


def _reason(mean_diff: float, p: float, n: int, accepted: bool) -> str:
    examples = "example" if n == 1 else "examples"
    summary = f"{mean_diff:+.2f} mean over {n} {examples}, p = {format_p(p)}"
    if accepted:
        return f"validation: {summary}"
    if mean_diff > 0.0:
        return f"validation gain within noise: {summary}"
    if mean_diff < 0.0:
        return f"validation regression: {summary}"
    return f"validation tie: {summary}"
