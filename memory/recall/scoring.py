"""The maths of a recall, as pure NumPy functions (no I/O, no state).

Retrieval is MemRL's two phases (arXiv 2601.03192; docs/design/decisions.md, "Two-phase recall"):

* phase A keeps the ``k1`` items most similar to the query among those with cosine > δ;
* phase B scores the pool by ``(1 − λ)·ẑ(sim) + λ·ẑ(Q)``, z-scores taken inside the pool and clipped.

The learning rule is ``memory.learn.rule``'s, intent grouping ``memory.write.grouping``'s.

Ties are broken deterministically everywhere: by higher similarity, then by lower index (the store
keeps rows oldest first, so a lower index is an older item).

Example:
    >>> import numpy as np
    >>> sims, qs = np.array([0.9, 0.8, 0.7]), np.array([0.0, 1.0, 0.0])
    >>> scores, z_sim, z_q = two_phase_scores(sims, qs, lam=0.5)
    >>> int(np.argmax(scores))    # the useful memory wins over the slightly closer one
    1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from connectors.errors import ConfigError

if TYPE_CHECKING:
    from memory.config import RetrievalConfig

# A spread below this (relative to the values' size) is rounding noise, not signal: ẑ is then 0.
_STD_EPS = 1e-12


def zscore(x: np.ndarray, clip: float = 3.0) -> np.ndarray:
    """Population z-scores of ``x`` clipped to ±clip; all zeros when the spread is 0 (or x is empty)."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return np.zeros(0, dtype=np.float64)
    # The same operations as x.mean() and x.std() (bit for bit), in fewer calls: this runs twice per recall.
    mean = x.sum() / x.size
    centred = x - mean
    std = float(np.sqrt((centred * centred).sum() / x.size))
    if not std > _STD_EPS * max(1.0, abs(float(mean))):
        return np.zeros_like(x)
    return np.clip(centred / std, -clip, clip)


def phase_a(sims: np.ndarray, k1: int, delta: float) -> np.ndarray:
    """Indices of the top-``k1`` items by similarity among those with sim > ``delta``.

    Best first; equal similarities keep the lower index first. NaN similarities never qualify.
    """
    if k1 < 1:
        raise ConfigError(f"phase_a: k1 must be >= 1, got {k1}")
    sims = np.asarray(sims)
    idx = np.flatnonzero(sims > delta)
    if idx.size > k1:
        vals = sims[idx]
        kth = np.partition(vals, vals.size - k1)[vals.size - k1]  # the k1-th largest value
        idx = idx[vals >= kth]  # ties at the boundary are all kept here and cut by index below
    order = np.lexsort((idx, -sims[idx]))[:k1]
    return idx[order].astype(np.intp)


def two_phase_scores(
    sims: np.ndarray, qs: np.ndarray, lam: float, clip: float = 3.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Phase B scores ``(1 − λ)·ẑ(sim) + λ·ẑ(Q)`` of one pool, with both z-score vectors."""
    sims = np.asarray(sims, dtype=np.float64)
    qs = np.asarray(qs, dtype=np.float64)
    if sims.shape != qs.shape or sims.ndim != 1:
        raise ConfigError(
            f"two_phase_scores: sims and qs must be 1-D and equal in length, got {sims.shape} and {qs.shape}"
        )
    z_sim = zscore(sims, clip)
    z_q = zscore(qs, clip)
    return (1.0 - lam) * z_sim + lam * z_q, z_sim, z_q


def rank(scores: np.ndarray, sims: np.ndarray) -> np.ndarray:
    """Indices ordered by score (desc), then similarity (desc), then index (asc: the older item)."""
    scores = np.asarray(scores, dtype=np.float64)
    sims = np.asarray(sims, dtype=np.float64)
    return np.lexsort((np.arange(scores.size), -sims, -scores)).astype(np.intp)


@dataclass(frozen=True)
class Selection:
    """The outcome of phase B over one pool.

    Attributes:
        order: indices into the pool of the selected items, best first (at most k2).
        scores: the phase B score of every pool item (pool order).
        z_sim: ẑ(sim) of every pool item.
        z_q: ẑ(Q) of every pool item.
        explored: True when the ε draw replaced the selection by a random k2 of the pool.

    Example:
        >>> import numpy as np
        >>> from memory.config import RetrievalConfig
        >>> s = select(np.array([0.9, 0.5]), np.array([0.0, 0.0]), RetrievalConfig(k1=2, k2=1), np.random.default_rng(0))
        >>> s.order.tolist(), s.explored
        ([0], False)
    """

    order: np.ndarray
    scores: np.ndarray
    z_sim: np.ndarray
    z_q: np.ndarray
    explored: bool


def select(sims: np.ndarray, qs: np.ndarray, cfg: RetrievalConfig, rng: np.random.Generator) -> Selection:
    """Phase B over one pool: score, then take the top-k2 (or, with probability ε, a random k2).

    The random generator is only drawn from when ε > 0 and the pool is not empty, so ε = 0 retrieval
    never consumes randomness.
    """
    scores, z_sim, z_q = two_phase_scores(sims, qs, cfg.lam, cfg.z_clip)
    n = scores.size
    k = min(cfg.k2, n)
    if n and cfg.epsilon > 0 and rng.random() < cfg.epsilon:
        order = rng.choice(n, size=k, replace=False).astype(np.intp)
        return Selection(order, scores, z_sim, z_q, explored=True)
    return Selection(rank(scores, np.asarray(sims))[:k], scores, z_sim, z_q, explored=False)


def calibrate_threshold(
    embeddings: np.ndarray, quantile: float = 0.8, *, max_items: int = 2000, seed: int = 0
) -> float:
    """δ for a task family: the ``quantile`` of pairwise cosine similarity (0.8 = the top-20% cut).

    Pairs are the upper triangle without the diagonal. Sets larger than ``max_items`` are subsampled
    with ``seed`` so the cost stays bounded and the answer reproducible.
    """
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ConfigError(f"calibrate_threshold needs a 2-D array of at least 2 embeddings, got shape {x.shape}")
    if not 0.0 <= quantile <= 1.0:
        raise ConfigError(f"calibrate_threshold: quantile must be in [0, 1], got {quantile!r}")
    if x.shape[0] > max_items:
        x = x[np.sort(np.random.default_rng(seed).choice(x.shape[0], size=max_items, replace=False))]
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    upper = np.triu_indices(x.shape[0], k=1)
    return float(np.quantile((x @ x.T)[upper], quantile))
