"""Learning figures over seeds: a mean with its 95% interval, and paired differences between conditions.

One seed's success rate is one draw: task order, sampling and paraphrase choice move it by more than
many of the effects worth reporting. So a learning figure is the mean over seeds with a Student-t 95%
interval, the per-seed values kept beside it; and a difference between two conditions is computed per
seed (both ran on the same tasks, order and paraphrases) and called a difference only when its interval
excludes zero — pairing removes the between-seed variance the two conditions share.

Example:
    >>> q = seed_interval([0.62, 0.58, 0.71, 0.50, 0.66])
    >>> round(q.mean, 3), round(q.low, 3), round(q.high, 3)
    (0.614, 0.515, 0.713)
    >>> d = paired_interval(baseline=[0.38, 0.42, 0.50, 0.33, 0.41], treatment=[0.62, 0.58, 0.71, 0.50, 0.66])
    >>> round(d.mean, 3), d.excludes_zero
    (0.206, True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from connectors import ConfigError

# Two-sided 95% quantiles of Student's t (t_{0.975, df}) for df = 1..30; beyond, 1.96 + 2.5/df is within
# 0.002 of the exact value (df = 60: 2.0003 vs 2.0017; df = 120: 1.9799 vs 1.9808), and numpy has no t.
T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


@dataclass(frozen=True)
class Interval:
    """A mean over seeds with its 95% interval; ``values`` are the per-seed figures it summarises.

    With one seed the interval is the point itself and ``n == 1`` says so: no spread was measured.

    Example:
        >>> Interval.of([0.5]).text()
        '0.500 (1 seed)'
    """

    mean: float
    low: float
    high: float
    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Interval:
        return seed_interval(values)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def excludes_zero(self) -> bool:
        """True when the whole interval lies on one side of zero (for a difference: a real one)."""
        return self.n > 1 and (self.low > 0.0 or self.high < 0.0)

    def text(self, digits: int = 3) -> str:
        """``mean [low, high]`` for a table cell, or the single value and ``(1 seed)``."""
        if self.n == 1:
            return f"{self.mean:.{digits}f} (1 seed)"
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def t975(df: int) -> float:
    """The two-sided 95% Student-t quantile for ``df`` degrees of freedom."""
    if df < 1:
        raise ConfigError(f"t975: degrees of freedom must be >= 1, got {df}")
    return T975[df - 1] if df <= len(T975) else 1.96 + 2.5 / df


def seed_interval(values: Sequence[float]) -> Interval:
    """Mean and Student-t 95% interval of per-seed figures: ``mean ± t_{0.975, n-1} · s / √n``."""
    xs = tuple(float(v) for v in values)
    if not xs or not all(math.isfinite(x) for x in xs):
        raise ConfigError(f"seed_interval: expected one or more finite per-seed values, got {list(values)!r}")
    n = len(xs)
    mean = sum(xs) / n
    if n == 1:
        return Interval(mean, mean, mean, xs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, xs)


def paired_interval(*, baseline: Sequence[float], treatment: Sequence[float]) -> Interval:
    """The interval of ``treatment - baseline``, seed by seed (e.g. Q-memory minus similarity-only).

    Keyword-only so the direction is never in doubt; both lists hold one value per seed, in seed order.
    """
    if len(baseline) != len(treatment):
        raise ConfigError(
            f"paired_interval: both conditions need one value per seed, got {len(baseline)} and {len(treatment)}"
        )
    return seed_interval([b - a for a, b in zip(baseline, treatment, strict=True)])


__all__ = ["T975", "Interval", "paired_interval", "seed_interval", "t975"]
