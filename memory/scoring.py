"""The maths of Q-valued memory, as pure NumPy functions (no I/O, no state).

Retrieval is MemRL's two phases (arXiv 2601.03192; docs/design/decisions.md, "Two-phase recall" and "Learning Q"):

* phase A keeps the ``k1`` items most similar to the query among those with cosine > δ;
* phase B scores the pool by ``(1 − λ)·ẑ(sim) + λ·ẑ(Q)``, z-scores taken inside the pool and clipped;
* the update after a reward r is the temporal-difference rule ``Q ← Q + α·(r − Q)``, α constant or, with
  ``MemoryConfig.alpha_schedule="visits"``, ``max(floor, 1/(n + 2))`` after n rewards (``alpha_for``).

Ties are broken deterministically everywhere: by higher similarity, then by lower index (the store
keeps rows oldest first, so a lower index is an older item).

Example:
    >>> import numpy as np
    >>> sims, qs = np.array([0.9, 0.8, 0.7]), np.array([0.0, 1.0, 0.0])
    >>> scores, z_sim, z_q = two_phase_scores(sims, qs, lam=0.5)
    >>> int(np.argmax(scores))    # the useful memory wins over the slightly closer one
    1
    >>> float(td_update(0.0, 1.0, 0.3))
    0.3
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from connectors.errors import ConfigError
from memory.config import ALPHA_SCHEDULES, CREDIT_MODES, RetrievalConfig

# A spread below this (relative to the values' size) is rounding noise, not signal: ẑ is then 0.
_STD_EPS = 1e-12
# Cosines are computed in float32 when grouping; identical unit vectors can come out at 0.99999994.
GROUP_TOLERANCE = 1e-6


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


def assign_groups(
    vecs: np.ndarray,
    keys: np.ndarray,
    threshold: float,
    *,
    nearest: tuple[np.ndarray, np.ndarray] | None = None,
    chunk: int = 512,
) -> tuple[np.ndarray, np.ndarray]:
    """Intent grouping: which key each new vector joins, in arrival order.

    Row i joins the most similar key (existing keys first, then keys created by rows before it) when
    that cosine is >= ``threshold``; otherwise it becomes a new key. Equal cosines keep the older key.
    ``nearest`` gives, per row, the best existing key and its cosine when the caller found them
    another way (a vector index); by default every existing key is compared.

    Returns:
        ``labels`` — for each row, an index into ``keys`` followed by the new keys in creation order —
        and ``new_rows``, the rows that became new keys.
    """
    vecs = np.ascontiguousarray(vecs, dtype=np.float32)
    keys = np.asarray(keys, dtype=np.float32).reshape(-1, vecs.shape[1])
    n_old = keys.shape[0]
    best_old, best_sim = nearest if nearest is not None else nearest_keys(vecs, keys, chunk=chunk)
    labels = np.empty(vecs.shape[0], dtype=np.int64)
    new_rows: list[int] = []
    cut = threshold - GROUP_TOLERANCE
    for start in range(0, vecs.shape[0], chunk):
        block = vecs[start : start + chunk]
        label_of = best_old[start : start + chunk].astype(np.int64)
        sim_of = best_sim[start : start + chunk].astype(np.float32)
        if new_rows:  # keys created by earlier blocks; an existing key wins a tie (it is older)
            prev = block @ vecs[new_rows].T
            j = prev.argmax(axis=1)
            s = prev[np.arange(block.shape[0]), j]
            better = s > sim_of
            label_of[better], sim_of[better] = n_old + j[better], s[better]
        inner = block @ block.T
        created: list[int] = []
        for i in range(block.shape[0]):
            label, sim = int(label_of[i]), float(sim_of[i])
            if created:
                s = inner[i, created]
                j = int(s.argmax())
                if s[j] > sim:
                    label, sim = n_old + len(new_rows) + j, float(s[j])
            if sim >= cut:
                labels[start + i] = label
            else:
                labels[start + i] = n_old + len(new_rows) + len(created)
                created.append(i)
        new_rows.extend(start + i for i in created)
    return labels, np.asarray(new_rows, dtype=np.int64)


def nearest_keys(vecs: np.ndarray, keys: np.ndarray, *, chunk: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``vecs``: the most similar key (the first on ties; -1 without keys) and that
    cosine in float32 (-inf without keys). Compares every key: O(rows × keys)."""
    best = np.full(vecs.shape[0], -1, dtype=np.int64)
    sims = np.full(vecs.shape[0], -np.inf, dtype=np.float32)
    if keys.shape[0]:
        for start in range(0, vecs.shape[0], chunk):
            block = vecs[start : start + chunk] @ keys.T
            idx = block.argmax(axis=1)  # the first maximum: the older key wins a tie
            best[start : start + chunk] = idx
            sims[start : start + chunk] = block[np.arange(block.shape[0]), idx]
    return best, sims
