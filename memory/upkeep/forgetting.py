"""Forgetting with a budget: which memories a namespace gives up, and how near-duplicates merge.

Pure policy over NumPy columns (docs/design/decisions.md, "Forgetting and pruning"; issue 24): the store
reads a namespace's columns, asks ``plan_eviction`` and ``near_duplicates`` what to remove, and writes a
``Removal`` for each removal.
Nothing is evicted unless ``ForgetConfig.capacity`` is set, and nothing merges unless
``merge_similarity`` is: the defaults forget nothing.

**Eviction order** (most evictable first). Each memory falls in the first tier that fits:

0. *superseded*: a newer memory contradicted it (``memory.upkeep.supersession``); oldest first.
1. *low*: Q is trusted (``visits >= min_visits``) and ``Q <= low_q``; lowest Q first.
2. *stale*: Q is not trusted and the memory was not recalled for ``stale_after`` seconds (counted
   from its creation when never recalled); longest idle first.
3. *new*: not trusted, recalled recently or younger than ``stale_after``; oldest first.
4. *proven*: Q is trusted and above ``low_q``; lowest Q first.

Ties fall to the older memory (smaller ``created_at``), then the lower index. The order is by expected
utility: a proven memory has shown it helps (Q above ``low_q`` over ``min_visits`` rewards), an untried
one is expected to help as much as a fresh memory's Q says (``Q_init``, 0 by default), a low one has
shown it does not. Every memory gets ``stale_after`` seconds to earn a trusted Q: after that it is
ranked by what it earned, or it is stale. A namespace keeps learning under a full budget: the newest
memories are the last of the untried ones to go, and a proven memory that starts failing falls to
*low*. (Proven memories used to go before new ones, "to keep room to try new ones": capped at a third
of what 20 rounds of facility codes write, that cost 0.114 of success, see ``bench/memory_size.py``.)

**Merging near-duplicates** keeps one memory of each pair with cosine ``>= merge_similarity``: the
more visited (then higher Q, then older); it takes ``visits = v_a + v_b`` and the visit-weighted mean
``Q = (v_a·Q_a + v_b·Q_b) / (v_a + v_b)`` (the plain mean when both are unvisited). Each Q
estimates the mean reward of its memory's recalls from ``v`` rewards; pooling two estimates weights
each by its evidence, and is exact when Q is the running mean of its rewards (α = 1/visits): it is
then the Q one memory would have reached having received both sets of rewards. Under a constant α it
is that pooled estimate, not a replay of the rewards (whose order is not stored).

Worked example: six memories of one namespace, capacity 3, ``now`` on day 100.

    >>> import numpy as np
    >>> DAY = 86_400.0
    >>> usage = MemoryUsage(
    ...     q=[0.0, -0.62, 0.8, 0.1, 0.0, 0.35],
    ...     visits=[2, 5, 7, 1, 0, 4],
    ...     last_recalled=[10 * DAY, 90 * DAY, 99 * DAY, 60 * DAY, np.nan, 95 * DAY],
    ...     created_at=[1 * DAY, 2 * DAY, 3 * DAY, 4 * DAY, 98 * DAY, 5 * DAY],
    ...     superseded=[True, False, False, False, False, False],
    ... )
    >>> config = ForgetConfig(capacity=3, min_visits=3, stale_after=30 * DAY)
    >>> eviction_order(usage, now=100 * DAY, config=config).tolist()
    [0, 1, 3, 4, 5, 2]
    >>> rows, reasons = plan_eviction(usage, now=100 * DAY, config=config)
    >>> rows.tolist(), reasons
    ([0, 1, 3], ['superseded', 'low Q -0.62 after 5 rewards', 'not recalled in 40 days'])
    >>> merged_values(0.5, 3, 0.9, 1)     # (3·0.5 + 1·0.9) / 4, visits 3 + 1
    (0.6, 4)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from connectors.errors import ConfigError
from memory.config import DAY, ForgetConfig, check_int, check_number, real_number
from memory.storage.records import MemoryItem
from memory.write.grouping import GROUP_TOLERANCE

TIERS = ("superseded", "low", "stale", "new", "proven")
"""The eviction tiers, most evictable first (the module docstring)."""
_UNIT_TOLERANCE = 1e-3  # float32 embeddings of unit length are within ~1e-6; anything far off is a caller bug
_CHUNK = 1024  # rows per block of the pairwise cosine matrix: memory stays O(chunk × n)


def _column(name: str, values: Any, n: int | None) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or (n is not None and arr.size != n):
        want = "1-D" if n is None else f"1-D of length {n} (like q)"
        raise ConfigError(f"MemoryUsage.{name} must be {want}, got shape {arr.shape}")
    return arr


@dataclass(frozen=True, eq=False)  # arrays: equality would be ambiguous
class MemoryUsage:
    """One namespace's memories as columns (row i is one memory; rows oldest first, like the mirror).

    Attributes:
        q: each memory's Q (finite).
        visits: how many rewards updated each Q (integers >= 0).
        last_recalled: Unix time of each memory's last recall; NaN when never recalled.
        created_at: Unix time each memory was written.
        superseded: True where a newer memory superseded it.

    Example:
        >>> MemoryUsage(q=[0.2], visits=[1], last_recalled=[float("nan")], created_at=[0.0], superseded=[False]).q
        array([0.2])
    """

    q: np.ndarray
    visits: np.ndarray
    last_recalled: np.ndarray
    created_at: np.ndarray
    superseded: np.ndarray

    def __post_init__(self) -> None:
        q = _column("q", self.q, None).astype(np.float64)
        n = q.size
        visits = _column("visits", self.visits, n)
        recalled = _column("last_recalled", self.last_recalled, n).astype(np.float64)
        created = _column("created_at", self.created_at, n).astype(np.float64)
        superseded = _column("superseded", self.superseded, n)
        if not np.all(np.isfinite(q)):
            raise ConfigError("MemoryUsage.q must be finite numbers, got NaN or infinity")
        if n and (not np.issubdtype(visits.dtype, np.integer) or visits.min() < 0):
            raise ConfigError(
                f"MemoryUsage.visits must be integers >= 0, got {visits.dtype} values {visits[:5].tolist()}"
            )
        if np.any(np.isinf(recalled)) or not np.all(np.isfinite(created)):
            raise ConfigError("MemoryUsage times must be finite Unix times (last_recalled NaN: never recalled)")
        if n and superseded.dtype != np.bool_:
            raise ConfigError(f"MemoryUsage.superseded must be booleans, got {superseded.dtype}")
        for name, arr in (("q", q), ("visits", visits.astype(np.int64)), ("last_recalled", recalled)):
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "created_at", created)
        object.__setattr__(self, "superseded", superseded.astype(bool))

    def __len__(self) -> int:
        return int(self.q.size)


def _check_now(now: object, where: str) -> float:
    value = real_number(now)
    if value is None:
        raise ConfigError(f"{where}: now must be a finite Unix time, got {now!r}")
    return value


def _tiers(usage: MemoryUsage, now: float, config: ForgetConfig) -> tuple[np.ndarray, np.ndarray]:
    """Each memory's tier (index into ``TIERS``) and idle seconds (since last recall, else creation)."""
    idle = now - np.where(np.isnan(usage.last_recalled), usage.created_at, usage.last_recalled)
    trusted = usage.visits >= config.min_visits
    stale = ~trusted & (idle >= config.stale_after) if config.stale_after is not None else np.zeros_like(trusted)
    low = trusted & (usage.q <= config.low_q)
    tier = np.select([usage.superseded, low, stale, trusted], [0, 1, 2, 4], default=3)
    return tier, idle


def eviction_order(usage: MemoryUsage, *, now: float, config: ForgetConfig) -> np.ndarray:
    """Every row, most evictable first (the module's tiers); ties: older, then lower index."""
    tier, idle = _tiers(usage, _check_now(now, "eviction_order"), config)
    # Within a tier: Q ascending for the trusted tiers, longest idle for stale, oldest for the rest.
    primary = np.select([(tier == 1) | (tier == 4), tier == 2], [usage.q, -idle], default=usage.created_at)
    return np.lexsort((np.arange(len(usage)), usage.created_at, primary, tier)).astype(np.intp)


def plan_eviction(
    usage: MemoryUsage, *, now: float, config: ForgetConfig, incoming: int = 0
) -> tuple[np.ndarray, list[str]]:
    """The rows to evict so the namespace holds ``config.capacity`` memories after ``incoming`` new ones
    arrive (which are never evicted by their own arrival), most evictable first, with a reason each.

    Exactly ``min(len(usage), len(usage) + incoming - capacity)`` rows when that is positive; none
    when ``capacity`` is None.
    """
    check_int("plan_eviction", "incoming", incoming, 0)
    order = eviction_order(usage, now=now, config=config)
    if config.capacity is None:
        return np.zeros(0, dtype=np.intp), []
    excess = min(len(usage), len(usage) + incoming - config.capacity)
    rows = order[: max(excess, 0)]
    tier, idle = _tiers(usage, float(now), config)
    age = float(now) - usage.created_at
    return rows, [_reason(usage, int(i), int(tier[i]), (float(idle[i]), float(age[i])), config) for i in rows]


def _reason(usage: MemoryUsage, i: int, tier: int, idle_age: tuple[float, float], config: ForgetConfig) -> str:
    q, visits = float(usage.q[i]), int(usage.visits[i])
    idle, age = idle_age
    rewards = f"{visits} reward{'s' if visits != 1 else ''}"
    if tier == 0:
        return "superseded"
    if tier == 1:
        return f"low Q {q:.2f} after {rewards}"
    if tier == 2:
        never = "never" if math.isnan(float(usage.last_recalled[i])) else "not"
        return f"{never} recalled in {span(idle)}"
    if tier == 3:
        return f"over capacity: new, {visits} of {config.min_visits} rewards in {span(age)}"
    return f"over capacity: lowest kept Q {q:.2f} after {rewards}"


def span(seconds: float) -> str:
    """A duration in its largest whole unit, rounded down: ``span(40.7 * DAY) == '40 days'``."""
    for unit, name in ((DAY, "day"), (3600.0, "hour"), (60.0, "minute")):
        if seconds >= unit:
            n = int(seconds // unit)
            return f"{n} {name}{'s' if n != 1 else ''}"
    n = max(int(seconds), 0)
    return f"{n} second{'s' if n != 1 else ''}"


def merged_values(q_a: float, visits_a: int, q_b: float, visits_b: int) -> tuple[float, int]:
    """The Q and visits of two merged memories: visits add; Q is the visit-weighted mean (the plain mean
    when both are unvisited), kept between the two Qs despite rounding. Symmetric in a and b.

    Example:
        >>> merged_values(0.2, 0, 0.6, 0), merged_values(-1.0, 0, 0.4, 2)
        ((0.4, 0), (0.4, 2))
    """
    qa, qb = real_number(q_a), real_number(q_b)
    if qa is None or qb is None:
        raise ConfigError(f"merged_values: Q-values must be finite numbers, got {q_a!r} and {q_b!r}")
    check_int("merged_values", "visits_a", visits_a, 0)
    check_int("merged_values", "visits_b", visits_b, 0)
    va, vb = int(visits_a), int(visits_b)
    q = (qa + qb) / 2 if va + vb == 0 else (va * qa + vb * qb) / (va + vb)
    return min(max(q, min(qa, qb)), max(qa, qb)), va + vb


def keeper(a: int, b: int, usage: MemoryUsage | None = None) -> tuple[int, int]:
    """``(keep, drop)`` of rows ``a`` and ``b``: the more visited is kept, then the higher Q, then the
    older, then the lower row (without ``usage``: the lower row, the older one). Symmetric in a and b.

    Example:
        >>> u = MemoryUsage(q=[0.9, 0.1], visits=[1, 4], last_recalled=[0.0, 0.0], created_at=[0.0, 1.0], superseded=[False] * 2)
        >>> keeper(0, 1, u), keeper(1, 0, u)
        ((1, 0), (1, 0))
    """

    def rank(i: int) -> tuple[float, ...]:
        if usage is None:
            return (float(i),)
        return (-float(usage.visits[i]), -float(usage.q[i]), float(usage.created_at[i]), float(i))

    return (a, b) if rank(a) <= rank(b) else (b, a)


def near_duplicates(
    vectors: np.ndarray, threshold: float | None, usage: MemoryUsage | None = None
) -> list[tuple[int, int]]:
    """One merge pass: ``(keep, drop)`` row pairs of near-duplicate memories, most similar pair first.

    Pairs with cosine ``>= threshold`` are taken greedily by cosine (descending; ties: lower rows first)
    and each row joins at most one pair, so a cluster of three needs a second pass after merging.
    ``keeper`` decides which of a pair stays; with ``usage``, superseded memories never merge.

    Args:
        vectors: ``(n, d)`` L2-normalised rows of ONE namespace. Embed what a memory says (intent and
            experience): every memory of an intent group shares its key's vector, so intent vectors
            alone would merge a task's success with its failure.
        threshold: the cosine, in (0, 1]; None: no merging (returns ``[]``).
        usage: the same rows' columns, for the keep rule and to skip superseded memories.
    """
    if threshold is None:
        return []
    ForgetConfig(merge_similarity=threshold)  # the same check as the config's
    x = _check_vectors(vectors, usage)
    sims, first, second = _pairs_above(x, float(threshold) - GROUP_TOLERANCE)
    if usage is not None:
        alive = ~usage.superseded[first] & ~usage.superseded[second]
        sims, first, second = sims[alive], first[alive], second[alive]
    used = np.zeros(x.shape[0], dtype=bool)
    out: list[tuple[int, int]] = []
    for p in np.lexsort((second, first, -sims)):
        a, b = int(first[p]), int(second[p])
        if not used[a] and not used[b]:
            used[a] = used[b] = True
            out.append(keeper(a, b, usage))
    return out


def _check_vectors(vectors: np.ndarray, usage: MemoryUsage | None) -> np.ndarray:
    x = np.asarray(vectors, dtype=np.float32)
    if x.ndim != 2:
        raise ConfigError(f"near_duplicates: vectors must be 2-D (memories × dim), got shape {x.shape}")
    if usage is not None and x.shape[0] != len(usage):
        raise ConfigError(f"near_duplicates: {x.shape[0]} vectors for {len(usage)} memories in usage")
    norms = np.linalg.norm(x, axis=1)
    if not np.all(np.abs(norms - 1.0) <= _UNIT_TOLERANCE):
        bad = int(np.flatnonzero(~(np.abs(norms - 1.0) <= _UNIT_TOLERANCE))[0])
        raise ConfigError(
            f"near_duplicates: vectors must be L2-normalised rows (connectors.embedders.normalise_rows), "
            f"row {bad} has norm {norms[bad]!r}"
        )
    return x


def _pairs_above(x: np.ndarray, cut: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair ``i < j`` with cosine >= ``cut``: (cosines, i, j), computed a block of rows at a time."""
    sims: list[np.ndarray] = []
    first: list[np.ndarray] = []
    second: list[np.ndarray] = []
    for start in range(0, x.shape[0], _CHUNK):
        block = x[start : start + _CHUNK] @ x.T
        i, j = np.nonzero(block >= cut)
        i = i + start
        upper = j > i
        sims.append(block[i[upper] - start, j[upper]])
        first.append(i[upper])
        second.append(j[upper])
    if not sims:
        return np.zeros(0, np.float32), np.zeros(0, np.intp), np.zeros(0, np.intp)
    return np.concatenate(sims), np.concatenate(first).astype(np.intp), np.concatenate(second).astype(np.intp)


@dataclass(frozen=True)
class Removal:
    """The record of one removed memory: enough to put it back until the retention period passes.

    Attributes:
        item: the memory as it was (every field, meta included).
        reason: why it went (``plan_eviction``'s reason, or ``"merged"``).
        removed_at: Unix time of the removal.
        vector: its embedding as float32 bytes, when the record carries it.
        intent_id: the intent key whose stored embedding it used (a reference, when ``vector`` is None).
        merged_into: the id of the memory it merged into (None: evicted).
        kept_before: that memory's ``(Q, visits)`` before the merge, so undoing it can restore them.

    Example:
        >>> item = MemoryItem("m2", "Zürich-Nordhafen", "Zollformular", "Feld 7 leer lassen", 0.1, 1, 0.0, {})
        >>> r = Removal(item, "merged", 100.0, intent_id="k1", merged_into="m1", kept_before=(0.5, 3))
        >>> restorable(r, now=100.0 + 29 * DAY, retention=30 * DAY), restorable(r, now=100.0 + 30 * DAY, retention=30 * DAY)
        (True, False)
    """

    item: MemoryItem
    reason: str
    removed_at: float
    vector: bytes | None = None
    intent_id: str | None = None
    merged_into: str | None = None
    kept_before: tuple[float, int] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.item, MemoryItem):
            raise ConfigError(f"Removal.item must be a MemoryItem, got {type(self.item).__name__}")
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise ConfigError(f"Removal.reason must be a non-empty string, got {self.reason!r}")
        _check_now(self.removed_at, "Removal.removed_at")
        if self.vector is None and self.intent_id is None:
            raise ConfigError("Removal needs the vector (float32 bytes) or the intent_id that holds it")
        if (self.merged_into is None) != (self.kept_before is None):
            raise ConfigError("Removal.merged_into and kept_before go together (a merge records both)")


def restorable(removal: Removal, now: float, retention: float | None) -> bool:
    """Whether ``removal`` can still be undone at ``now``: less than ``retention`` seconds have passed
    since it (None: forever). A record is purged once this turns False."""
    t = _check_now(now, "restorable")
    if retention is None:
        return True
    check_number("restorable", "retention (seconds)", retention, low=0.0)
    return t - removal.removed_at < float(retention)
