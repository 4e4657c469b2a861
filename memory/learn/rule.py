"""The learning rule of Q-valued memory, as pure NumPy functions (no I/O, no state).

After a reward r, a memory moves by the temporal-difference rule ``Q ← Q + α·(r − Q)`` (docs/design/decisions.md,
"Learning Q"), α constant or, with ``MemoryConfig.alpha_schedule="visits"``, ``max(floor, 1/(n + 2))`` after n rewards
(``alpha_for``); ``credit_weights`` spreads one reward over the memories a recall selected.

Example:
    >>> float(td_update(0.0, 1.0, 0.3))
    0.3
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from connectors.errors import ConfigError
from memory.config import ALPHA_SCHEDULES, CREDIT_MODES


def td_update(q: np.ndarray | float, r: np.ndarray | float, alpha: np.ndarray | float) -> np.ndarray:
    """The Q update ``q + α·(r − q)``, vectorised and broadcasting (α may be per item: α·w)."""
    q = np.asarray(q, dtype=np.float64)
    return q + np.asarray(alpha, dtype=np.float64) * (np.asarray(r, dtype=np.float64) - q)


def alpha_for(
    visits: np.ndarray | Sequence[int] | float, *, alpha: float, schedule: str = "constant", floor: float = 0.0
) -> np.ndarray:
    """The step α of a memory's next reward, given the rewards ``visits`` (n) it had before this one.

    ``"constant"``: ``alpha`` whatever n. ``"visits"``: ``max(floor, 1/(n + 2))``. From a start Q₀ with
    ``floor = 0`` this is the running mean with Q₀ as one pseudo-observation: after rewards r_1..r_n,
    ``Q = (Q₀ + Σ r_i) / (n + 1)``, so one wrong rating among n moves Q by at most 2/(n + 2) (rewards in
    [−1, 1]) instead of 2α whatever the evidence; the floor keeps a fact that changes learnable
    (``MemoryConfig.alpha_schedule``). Vectorised over ``visits``.

    Example:
        >>> alpha_for([0, 1, 2, 8], alpha=0.3, schedule="visits", floor=0.2).tolist()
        [0.5, 0.3333333333333333, 0.25, 0.2]
    """
    n = np.asarray(visits, dtype=np.float64)
    if schedule == "constant":
        return np.full_like(n, alpha)
    if schedule != "visits":
        raise ConfigError(f"alpha schedule must be one of {ALPHA_SCHEDULES}, got {schedule!r}")
    return np.maximum(floor, 1.0 / (n + 2.0))


def credit_weights(scores: np.ndarray, mode: str) -> np.ndarray:
    """How a recall's reward is shared by its items: a positive weight per item, mean 1.

    ``"uniform"`` gives every item weight 1 (the paper). ``"score"`` gives ``n·softmax(scores)``, so the
    items phase B preferred learn faster; the store caps the effective rate α·w at 1.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if mode not in CREDIT_MODES:
        raise ConfigError(f"credit mode must be one of {CREDIT_MODES}, got {mode!r}")
    if mode == "uniform" or scores.size == 0:
        return np.ones_like(scores)
    e = np.exp(scores - scores.max())
    return e * (scores.size / e.sum())
