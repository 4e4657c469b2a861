"""Phase A's candidates for one query, compiled: what ``NamespaceMirror.candidates`` computes from the index's answer.

A recall asks its index for a few dozen ids and then does exact bookkeeping on them: the rows they are in the
mirror, the exact similarity of each intent key (read from the snapshot's file, ``memory.mirror.keyrows``),
the order that breaks ties, and whole intent groups where the k1-th nearest ties with members the index left
out. In NumPy that took about forty array calls per query, each a few microseconds of Python: 0.22 ms of a
0.57 ms recall at 100k items, four times the index's own search. Here it is one call to a function compiled by
numba, on the same numbers: the similarities are float64 products of the float32 vectors summed in NumPy's
own pairwise order (``pairwise_sum``), so they are bit for bit those of ``NamespaceMirror.exact_sims``, and the
selections, their order and their ties are unchanged.

numba compiles on first use and keeps the machine code in its cache (``__pycache__`` beside this file, or
``NUMBA_CACHE_DIR``): the first recall of a process loads it (about 0.3 s; compiling, once per install, takes
a few seconds).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, types

STRATEGY = 1  # ``memory.mirror.arrays.STRATEGY``
PW_BLOCK = 128  # NumPy's pairwise summation block

_pread: Any = types.ExternalFunction(  # libc's pread(2), called from compiled code
    "pread", types.int64(types.int32, types.voidptr, types.uint64, types.int64)
)


@njit(cache=True)
def _block(a: np.ndarray, lo: int, n: int) -> float:  # pragma: no cover - compiled
    """``a[lo:lo + n].sum()`` for at most ``PW_BLOCK`` values, as NumPy sums them: plainly below 8, else in eight
    running sums."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[lo + i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i, m = 8, n - n % 8
    while i < m:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(cache=True)
def pairwise_sum(a: np.ndarray, stack: np.ndarray, sums: np.ndarray) -> float:  # pragma: no cover - compiled
    """``a.sum()`` for float64 ``a`` in NumPy's pairwise order: blocks of at most ``PW_BLOCK`` (``_block``),
    halves cut at a multiple of 8 above, added as NumPy's recursion adds them (kept on a stack here: numba's
    cache cannot hold a recursive function). ``stack`` (int64, (3, 64)) and ``sums`` (64) are room to work in."""
    if len(a) <= PW_BLOCK:
        return _block(a, 0, len(a))
    los, ns, steps = stack[0], stack[1], stack[2]
    depth, held = 1, 0
    los[0], ns[0], steps[0] = 0, len(a), 0
    while depth:
        top = depth - 1
        lo, n = los[top], ns[top]
        half = n // 2 - (n // 2) % 8
        if n <= PW_BLOCK:
            sums[held], held, depth = _block(a, lo, n), held + 1, top
        elif steps[top] == 0:  # the left half first
            steps[top], los[depth], ns[depth], steps[depth], depth = 1, lo, half, 0, depth + 1
        elif steps[top] == 1:  # then the right half
            steps[top], los[depth], ns[depth], steps[depth], depth = 2, lo + half, n - half, 0, depth + 1
        else:  # both done: left + right
            sums[held - 2], held, depth = sums[held - 2] + sums[held - 1], held - 1, top
    return sums[0]


@njit(cache=True)
def _similarity(
    code: int, keys: np.ndarray, fd: int, offset: int, count: int, query: np.ndarray, work: tuple
) -> float:  # pragma: no cover - compiled
    """The exact cosine of ``query`` (float64) with key ``code``: read from the file ``fd`` when below
    ``count`` (its first key at byte ``offset``), else from ``keys``; NaN when the file ends early. ``work``:
    room for one row (float32), its products (float64) and ``pairwise_sum``'s stack and sums."""
    row, prod, stack, sums = work
    dim = query.shape[0]
    if code < count:
        if _pread(fd, row.ctypes.data, dim * 4, offset + code * dim * 4) != dim * 4:
            return np.nan
        for t in range(dim):
            prod[t] = np.float64(row[t]) * query[t]
    else:
        for t in range(dim):
            prod[t] = np.float64(keys[code, t]) * query[t]
    return pairwise_sum(prod, stack, sums)


@njit(cache=True)
def _ordered(rows: np.ndarray, size: int, kinds: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``rows`` (distinct) in the order ties are broken by: strategies first, then ascending (older first)."""
    key = np.empty(len(rows), np.int64)
    for j in range(len(rows)):
        key[j] = rows[j] + (0 if kinds[rows[j]] == STRATEGY else size)
    key.sort()
    for j in range(len(key)):
        if key[j] >= size:
            key[j] -= size
    return key


@njit(cache=True)
def nearest(
    seqs: np.ndarray,
    ids: np.ndarray,
    sims: np.ndarray,
    kinds: np.ndarray,
    codes_of: np.ndarray,
    group_sizes: np.ndarray,
    keys: np.ndarray,
    fd: int,
    offset: int,
    count: int,
    query: np.ndarray,
    k1: int,
    exact_scores: bool,
    episodes: bool,
    margin: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """One query's candidates (``NamespaceMirror.candidates`` says what they are): its kept rows in tie order,
    their exact similarities and the positions of the k1 nearest, best first.

    ``seqs``, ``kinds``, ``codes_of`` (intent codes) and ``group_sizes`` are the mirror's; ``ids`` and ``sims``
    the index's answer (seqs, -1 padding; float32); keys below ``count`` are read from the file ``fd`` (the
    snapshot's, from byte ``offset``), the others from ``keys``. ``exact_scores``: the index's similarities are
    float32 inner products (only those within ``margin`` of the k1-th kept one are scored); ``episodes``: leave
    strategies out. Raises ``ValueError`` when the snapshot's file ends early.
    """
    size, width, dim = seqs.shape[0], ids.shape[0], query.shape[0]
    if not size:
        return np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.int64)
    rows = np.empty(width, np.int64)
    kept = 0
    for j in range(width):
        pos = min(np.searchsorted(seqs, ids[j]), size - 1)
        r = pos if seqs[pos] == ids[j] else -1
        if r >= 0 and episodes and kinds[r] == STRATEGY:
            r = -1
        rows[j] = r
        kept += r >= 0
    if exact_scores and kept > k1:  # the k1-th kept similarity, less the margin, is the floor
        seen, floor = 0, np.float32(0.0)
        for j in range(width):
            seen += rows[j] >= 0
            if seen == k1:
                floor = sims[j] - np.float32(margin)
                break
        for j in range(width):
            if rows[j] >= 0 and not sims[j] >= floor:
                rows[j] = -1
    cand = _ordered(rows[rows >= 0], size, kinds)
    q = query.astype(np.float64)
    work = (np.empty(dim, np.float32), np.empty(dim), np.empty((3, 64), np.int64), np.empty(64))
    codes, values = np.empty(len(cand), np.int64), np.empty(len(cand), np.float64)
    known = 0  # an item's vector is its key's: each key is scored once
    exact = np.empty(len(cand), np.float64)
    for j in range(len(cand)):
        code, at = codes_of[cand[j]], -1
        for t in range(known):
            if codes[t] == code:
                at = t
                break
        if at < 0:
            at, codes[known] = known, code
            values[known] = _similarity(code, keys, fd, offset, count, q, work)
            if np.isnan(values[known]):
                raise ValueError("the snapshot's vectors end early")
            known += 1
        exact[j] = values[at]
    order = np.argsort(-exact, kind="mergesort")
    n = len(cand)
    if n < k1 or n >= size:
        return cand, exact, order[: min(k1, n)]
    # The k1-th nearest ties with members of an intent group the index did not return: every member joins.
    kth, short = exact[order[k1 - 1]], np.zeros(0, np.int64)
    for j in range(n):
        code = codes_of[cand[j]]
        if exact[j] == kth and group_sizes[code] > 1:
            here = 0
            for t in range(n):
                here += codes_of[cand[t]] == code
            if group_sizes[code] > here:
                short = np.append(short, code)
    if not len(short):
        return cand, exact, order[:k1]
    joins = np.zeros(size, np.bool_)
    joins[cand] = True
    for r in range(size):  # one pass over the mirror, only when a group is cut
        if not joins[r] and (not episodes or kinds[r] != STRATEGY):
            for code in short:
                if codes_of[r] == code:
                    joins[r] = True
                    break
    cand = _ordered(np.flatnonzero(joins), size, kinds)
    exact = np.empty(len(cand), np.float64)
    for j in range(len(cand)):
        for t in range(known):
            if codes[t] == codes_of[cand[j]]:
                exact[j] = values[t]
                break
    order = np.argsort(-exact, kind="mergesort")
    return cand, exact, order[:k1]


def load() -> None:
    """Load the compiled code now (from numba's cache, compiling it there the first time) rather than on the
    first recall: a process that forks workers calls it first, so that each does not pay it again."""
    zero, none, vector = np.zeros(1, np.int64), np.full(1, -1, np.int64), np.zeros(1, np.float32)
    nearest(zero, none, vector, np.zeros(1, np.int8), zero, zero, vector[None], -1, 0, 0, vector, 1, True, False, 0.0)
