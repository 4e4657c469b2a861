"""Phase A's candidates from an index's answer (``NamespaceMirror.candidates``): the rows it names, their exact
similarities, the order that breaks ties, and whole intent groups where the k1-th nearest ties with members the
index left out.

A recall asks for one query (``one``); a batch of them (``batch``) is vectorised across its queries, the two
giving the same numbers bit for bit. ``one`` is the recall's path: the same steps on flat arrays, without the
padding, pair codes and blocks that let a batch share its array calls: about 100 µs a query against 167 µs
through ``batch`` (one run, 100k store), of which 78 µs read the 36 candidates' key rows from the snapshot's file.

Tried and not kept: these steps compiled with numba, bit for bit the same (72 µs, the reads in C). A recall
took 0.58 ms instead of 0.72 (same run, 100k), but importing numba and loading its compiled code made a fresh
process's first recall 0.45 s slower (reopen 0.54 s at 100k, against a 0.2 s target) and every process 118 MB
larger, for 28 µs a recall more than ``one``.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from memory.mirror.keyrows import pair_sims

STRATEGY = 1  # the mirror's kind code of a strategy (``memory.mirror.arrays`` takes it from here)
Candidates = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Rows in tie order, their exact similarities, the positions of the k1 nearest (best first)."""


class Mirror(Protocol):
    """What these functions read of ``memory.mirror.arrays.NamespaceMirror``."""

    index: Any

    @property
    def seqs(self) -> np.ndarray: ...
    @property
    def kinds(self) -> np.ndarray: ...
    @property
    def intent_codes(self) -> np.ndarray: ...
    @property
    def group_sizes(self) -> np.ndarray: ...
    def __len__(self) -> int: ...
    def key_rows(self, codes: np.ndarray) -> np.ndarray: ...
    def rows_of_seqs(self, seqs: np.ndarray) -> np.ndarray: ...


def one(
    mirror: Mirror,
    query: np.ndarray,
    ids: np.ndarray,
    sims: np.ndarray,
    k1: int,
    margin: float,
    episodes: bool,
) -> Candidates:
    """One query's candidates from the index's answer (``ids``: seqs, -1 pads; ``sims``: float32), as ``batch``
    gives them. ``margin``: how far below the k1-th kept similarity an exactly scoring index's answers are
    re-scored; ``episodes``: strategies left out."""
    size, kinds = len(mirror), mirror.kinds
    if not size:
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.intp)
    rows = mirror.rows_of_seqs(ids)
    keep = rows >= 0
    if episodes:
        keep &= kinds[np.maximum(rows, 0)] != STRATEGY
    rows, sims = rows[keep], sims[keep]
    if len(rows) > k1 and getattr(mirror.index, "exact_scores", True):  # float32 products: those near the k1-th
        rows = rows[sims >= sims[k1 - 1 : k1] - margin]  # array arithmetic, as ``batch`` does it
    rows = tie_order(rows, size, kinds)
    codes = mirror.intent_codes[rows]
    exact = sims_of(mirror, codes, query)
    order = np.argsort(-exact, kind="stable")
    if len(rows) < k1 or len(rows) >= size:
        return rows, exact, order[:k1]
    tied = codes[exact == exact[order[k1 - 1]]]
    sizes = mirror.group_sizes
    if (sizes[tied] == 1).all():  # each tied item alone in its group: nothing to join
        return rows, exact, order[:k1]
    groups, present = np.unique(tied, return_counts=True)
    if not (sizes[groups] > present).any():
        return rows, exact, order[:k1]
    members = np.isin(mirror.intent_codes, groups)  # the k1-th ties with a group not all here: every member joins
    if episodes:
        members &= kinds != STRATEGY
    rows = tie_order(np.union1d(rows, np.flatnonzero(members)), size, kinds)
    exact = sims_of(mirror, mirror.intent_codes[rows], query)
    return rows, exact, np.argsort(-exact, kind="stable")[:k1]


def sims_of(mirror: Mirror, codes: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The exact cosine of ``query`` with each of the keys ``codes`` (repeats read again: cheaper than finding
    them), as ``NamespaceMirror.exact_sims`` computes it."""
    return (mirror.key_rows(codes).astype(np.float64) * np.asarray(query, dtype=np.float64)).sum(axis=1)


def tie_order(rows: np.ndarray, size: int, kinds: np.ndarray) -> np.ndarray:
    """Distinct ``rows`` in the order ties are broken by: strategies first, then ascending (older first)."""
    key = np.sort(rows + size * (kinds[rows] != STRATEGY))
    return np.where(key >= size, key - size, key)


def batch(
    mirror: Mirror,
    queries: np.ndarray,
    ids: np.ndarray,
    sims: np.ndarray,
    k1: int,
    margin: float,
    episodes: bool,
) -> list[Candidates]:
    """``one`` for a few queries, vectorised across them: every number is the one the query alone would get
    (``scored``)."""
    n = len(queries)
    if not n or not len(mirror):
        return [(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.intp))] * n
    rows = mirror.rows_of_seqs(np.asarray(ids).ravel()).reshape(n, -1)
    keep = rows >= 0
    if episodes:
        keep &= mirror.kinds[np.maximum(rows, 0)] != STRATEGY
    wide = keep.sum(axis=1) > k1
    if not getattr(mirror.index, "exact_scores", True):  # approximate similarities: every candidate is scored
        wide[:] = False
    if wide.any():  # the k1-th kept similarity of each query, less the margin, is its floor
        kth = np.argmax(np.cumsum(keep, axis=1) >= k1, axis=1)
        floor = sims[np.arange(n), kth] - margin
        keep &= ~wide[:, None] | (sims >= floor[:, None])
    every = np.arange(n)
    rows, exact, order, counts, known = scored(mirror, queries, every, rows, keep)
    out = [(rows[i, :c], exact[i, :c], order[i, : min(k1, c)]) for i, c in enumerate(counts.tolist())]
    short, pairs = tied_groups(mirror, rows, exact, order, counts, k1)
    if len(short):  # the k1-th nearest ties with group members not all here: the whole groups join
        joined = with_groups(mirror, short, rows[short], counts[short], pairs, episodes)
        rows, exact, order, counts, _ = scored(mirror, queries, short, *joined, known=known)
        for j, (i, c) in enumerate(zip(short.tolist(), counts.tolist(), strict=True)):
            out[i] = (rows[j, :c], exact[j, :c], order[j, : min(k1, c)])
    return out


def scored(
    mirror: Mirror,
    queries: np.ndarray,
    which: np.ndarray,
    rows: np.ndarray,
    keep: np.ndarray,
    known: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """For the queries ``which`` (one per row of ``rows``): their kept rows in tie order (``tie_order``),
    exact similarities and the order ``phase_a`` ranks them in (best first, ties by position), padded
    to one width (-inf past each one's count); the counts; and the similarities by ``query * groups +
    intent code`` (an item's vector is its key's, so each is computed once; ``known``: taken from there).
    """
    n, size, groups = len(which), len(mirror), len(mirror.group_sizes)
    counts = keep.sum(axis=1)
    width = int(counts.max())
    episode = mirror.kinds[np.maximum(rows, 0)] != STRATEGY
    key = np.sort(np.where(keep, rows + size * episode, 2 * size), axis=1)[:, :width]  # left out: last
    rows = np.where(key >= size, key - size, key)
    valid = np.arange(width) < counts[:, None]
    pair = which[np.nonzero(valid)[0]] * groups + mirror.intent_codes[rows[valid]]
    if known is None:
        uniq, inverse = np.unique(pair, return_inverse=True)
        known = (uniq, pair_sims(mirror.key_rows, uniq % groups, queries, uniq // groups))
    else:
        inverse = np.searchsorted(known[0], pair)
    exact = np.full((n, width), -np.inf)
    exact[valid] = known[1][inverse]
    return rows, exact, np.argsort(-exact, axis=1, kind="stable"), counts, known


def tied_groups(
    mirror: Mirror, rows: np.ndarray, exact: np.ndarray, order: np.ndarray, counts: np.ndarray, k1: int
) -> tuple[np.ndarray, np.ndarray]:
    """The queries whose k1-th nearest ties with members of a group not all among their candidates, and
    every group tied there, as ``query * groups + intent code`` (sorted)."""
    n, width = rows.shape
    if not width:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    kth = exact[np.arange(n), order[:, min(k1, width) - 1]]
    checked = (counts < len(mirror)) & (counts >= k1)
    tq, tp = np.nonzero((exact == kth[:, None]) & checked[:, None])
    sizes, codes = mirror.group_sizes, mirror.intent_codes
    if (sizes[codes[rows[tq, tp]]] == 1).all():  # each tied item alone in its group: none short
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pairs, present = np.unique(tq * len(sizes) + codes[rows[tq, tp]], return_counts=True)
    short = np.unique(pairs[sizes[pairs % len(sizes)] > present] // len(sizes))
    return short, pairs[np.isin(pairs // len(sizes), short)]


def with_groups(
    mirror: Mirror, short: np.ndarray, rows: np.ndarray, counts: np.ndarray, pairs: np.ndarray, episodes: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The ``short`` queries' candidates (``rows``, ``counts``) joined by every member of their tied
    groups (``pairs``), as ``scored`` takes them: one O(n) pass over the mirror for the batch."""
    groups, size = len(mirror.group_sizes), len(mirror)
    which, codes = np.searchsorted(short, pairs // groups), pairs % groups
    members = np.flatnonzero(np.isin(mirror.intent_codes, codes))
    if episodes:
        members = members[mirror.kinds[members] != STRATEGY]
    members = members[np.argsort(mirror.intent_codes[members], kind="stable")]
    lo, hi = (np.searchsorted(mirror.intent_codes[members], codes, side) for side in ("left", "right"))
    per = hi - lo  # each (query, group) pair gets its group's members lo..hi
    at = np.arange(per.sum()) - np.repeat(np.cumsum(per) - per, per) + np.repeat(lo, per)
    had = np.arange(rows.shape[1]) < counts[:, None]
    old, new = np.nonzero(had)[0] * size + rows[had], np.repeat(which, per) * size + members[at]
    joined = np.unique(np.concatenate([old, new]))
    count = np.bincount(joined // size, minlength=len(short))
    pos = np.arange(len(joined)) - np.repeat(np.cumsum(count) - count, count)
    out = np.zeros((len(short), int(count.max())), dtype=np.int64)
    out[joined // size, pos] = joined % size
    return out, np.arange(out.shape[1]) < count[:, None]
