"""Phase A's candidates for a batch of queries (``NamespaceMirror.candidates``, vectorised across the batch) and
for one query alone (a recall's path, ``memory.mirror.nearest.one``) are exactly what a reference loop gives: the
same rows in the same tie order, bit-identical similarities, the same k1 nearest, the same groups completed, on
mirrors full of exact ties (intent groups sharing one key vector, different keys at equal similarity), with
strategies among the episodes and rows the index holds but the mirror dropped."""

from __future__ import annotations

import doctest
import os
from pathlib import Path

import numpy as np
import pytest

import memory.mirror.arrays
import memory.mirror.keyrows
from memory.mirror.arrays import EPISODE, SIM_MARGIN, STRATEGY, NamespaceMirror, Rows
from memory.mirror.index import VectorIndex
from memory.mirror.keyrows import FileRows, pair_sims
from memory.recall.planning import search
from memory.recall.scoring import phase_a

NAMESPACE = "Zürich-Nordhafen-Logistik-Team-07/solver"
DIM = 16


def reference(
    mirror: NamespaceMirror, query: np.ndarray, ids: np.ndarray, sims: np.ndarray, k1: int, draw_from: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One query's candidates as the store computed them before they were batched (kept as the spec)."""
    if draw_from == "strategies":
        rows = np.flatnonzero(mirror.kinds == STRATEGY)
        exact = mirror.exact_sims(rows, query)
        return rows, exact, phase_a(exact, k1, -np.inf)
    rows = mirror.rows_of_seqs(ids)
    keep = rows >= 0
    if draw_from == "episodes":
        keep &= mirror.kinds[np.maximum(rows, 0)] != STRATEGY
    rows, sims = rows[keep], sims[keep]
    if len(rows) > k1:
        rows = rows[sims >= sims[k1 - 1] - SIM_MARGIN]
    rows = tie_order(mirror, rows)
    exact = mirror.exact_sims(rows, query)
    nearest = phase_a(exact, k1, -np.inf)
    if len(rows) < len(mirror) and len(nearest) == k1:
        tied = mirror.intent_codes[rows[exact == exact[nearest[-1]]]]
        groups, present = np.unique(tied, return_counts=True)
        if np.any(mirror.group_sizes[groups] > present):
            members = np.isin(mirror.intent_codes, groups)
            if draw_from == "episodes":
                members &= mirror.kinds != STRATEGY
            rows = tie_order(mirror, np.union1d(rows, np.flatnonzero(members)))
            exact = mirror.exact_sims(rows, query)
            nearest = phase_a(exact, k1, -np.inf)
    return rows, exact, nearest


def tie_order(mirror: NamespaceMirror, rows: np.ndarray) -> np.ndarray:
    """Rows in the order ``phase_a`` breaks ties by: strategies first, then ascending (older first)."""
    rows = np.sort(rows)
    return rows[np.argsort(mirror.kinds[rows] != STRATEGY, kind="stable")]


def tied_mirror(seed: int, items: int, keys: int, dim: int = DIM) -> NamespaceMirror:
    """A mirror whose keys take few distinct directions (many exact ties) and whose items share keys."""
    rng = np.random.default_rng(seed)
    base = rng.integers(-1, 2, size=(max(2, keys // 3), dim)).astype(np.float32) + 0.01
    vecs = base[rng.integers(0, len(base), size=keys)]
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    mirror = NamespaceMirror(NAMESPACE, dim, VectorIndex(dim, kind="flat", backend="numpy"))
    mirror.add_keys(np.array([f"Schlüssel-{i}" for i in range(keys)], dtype=object), np.arange(keys), vecs)
    codes = np.sort(rng.integers(0, keys, size=items))
    seqs = np.arange(1, items + 1, dtype=np.int64) * 3
    kinds = np.where(rng.random(items) < 0.15, STRATEGY, EPISODE).astype(np.int8)
    rows = Rows(
        seqs, np.array([f"Erinnerung-Kühlcontainer-{s}" for s in seqs], dtype=object), rng.random(items),
        rng.integers(0, 5, size=items), np.zeros(items), codes, vecs[codes], kinds,
    )  # fmt: skip
    mirror.append(rows)
    return mirror


@pytest.mark.parametrize("narrow", [False, True], ids=["searched", "narrow"])
@pytest.mark.parametrize("draw_from", ["both", "episodes", "strategies"])
@pytest.mark.parametrize(
    ("seed", "items", "keys", "k1", "dim"),
    [(1, 400, 40, 10, DIM), (2, 300, 30, 5, DIM), (3, 40, 40, 10, DIM), (4, 300, 60, 10, 384), (5, 50, 50, 5, 7)],
)  # 384: MiniLM's width, summed in NumPy's pairwise halves; 7: below its first block
def test_a_batch_gets_exactly_what_each_query_gets_alone(
    seed: int, items: int, keys: int, k1: int, dim: int, draw_from: str, narrow: bool
) -> None:
    mirror = tied_mirror(seed, items, keys, dim)
    rng = np.random.default_rng(seed + 100)
    queries = np.concatenate([mirror.keys[rng.integers(0, keys, size=70)], rng.normal(size=(30, dim))])
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    sims, ids = search(mirror, queries, k1, draw_from)
    if narrow:  # an answer cut right after the k1-th: tied groups are completed in every mode
        sims, ids = sims[:, : k1 + 2], ids[:, : k1 + 2]
    ids = ids.copy()
    if ids.shape[1]:
        ids[::7, -1] = 10**9  # a row the index still holds but the mirror dropped: left out like a pad
    batched = mirror.candidates(queries, ids, sims, k1, draw_from)
    completed = 0
    for i, got in enumerate(batched):
        want = reference(mirror, queries[i], ids[i], sims[i], k1, draw_from)
        alone = mirror.candidates(queries[i : i + 1], ids[i : i + 1], sims[i : i + 1], k1, draw_from)[
            0
        ]  # a recall's path
        for rows, exact, nearest in (got, alone):
            assert rows.tolist() == want[0].tolist(), i
            assert exact.tobytes() == want[1].tobytes(), i  # bit for bit
            assert nearest.tolist() == want[2].tolist(), i
        completed += bool(set(got[0].tolist()) - set(mirror.rows_of_seqs(ids[i]).tolist()))
    if draw_from != "strategies" and (narrow or (draw_from == "both" and items >= 5 * keys)):
        assert completed > 0  # the fixture does reach the group completion


def test_keys_read_from_a_snapshot_file_give_the_same_candidates_and_a_short_file_is_an_error(tmp_path: Path) -> None:
    """A reopened store reads its saved keys from the snapshot's file (``FileRows``), the keys added since from
    memory: the candidates are those of keys held in memory, and a file cut short is an error, never zeros."""
    mirror = tied_mirror(6, 300, 60, 384)
    rng = np.random.default_rng(7)
    queries = mirror.keys[rng.integers(0, 60, size=20)] + rng.normal(scale=0.05, size=(20, 384)).astype(np.float32)
    sims, ids = search(mirror, queries, 10)
    in_memory = mirror.candidates(queries, ids, sims, 10)
    path = tmp_path / "Schlüssel der Kühlcontainer – Zürich.keys"
    path.write_bytes(b"head" + mirror.keys[:50].tobytes())
    mirror._saved_keys = FileRows(os.open(path, os.O_RDONLY), offset=4, count=50, dim=384)  # the last 10 in memory
    from_file = mirror.candidates(queries, ids, sims, 10)
    for a, b in zip(in_memory, from_file, strict=True):
        assert all(x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))
    path.write_bytes(b"head" + mirror.keys[:20].tobytes())  # a snapshot cut short under the open file
    with pytest.raises(ValueError, match="end early"):
        mirror.candidates(queries, ids, sims, 10)


def test_pair_sims_are_the_rowwise_exact_sims_bit_for_bit() -> None:
    mirror = tied_mirror(4, 200, 150)
    query = np.random.default_rng(9).normal(size=DIM).astype(np.float32)
    rows = np.arange(len(mirror))
    got = pair_sims(mirror.key_rows, mirror.intent_codes, query[None, :], np.zeros(len(rows), dtype=np.int64))
    assert got.tobytes() == mirror.exact_sims(rows, query).tobytes()


def test_an_empty_batch_and_an_empty_mirror_have_no_candidates() -> None:
    mirror = NamespaceMirror(NAMESPACE, DIM, VectorIndex(DIM, kind="flat", backend="numpy"))
    queries = np.ones((3, DIM), dtype=np.float32) / 4
    assert mirror.candidates(queries[:0], np.zeros((0, 4), np.int64), np.zeros((0, 4), np.float32), 5) == []
    out = mirror.candidates(queries, np.full((3, 4), -1), np.zeros((3, 4), np.float32), 5)
    assert [tuple(len(a) for a in c) for c in out] == [(0, 0, 0)] * 3


def test_the_module_examples_run() -> None:
    assert doctest.testmod(memory.mirror.arrays).failed == 0
    assert doctest.testmod(memory.mirror.keyrows).failed == 0
