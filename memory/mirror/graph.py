"""The HNSW graph behind ``index="adaptive"``: build, search past removed ids, measure and tune its recall.

A graph is FAISS's ``IndexHNSWSQ`` (inner product over 8-bit codes, each coordinate of a unit vector in
256 steps over [-1, 1]: the codes depend on the vector alone, never on what was stored before; ranges
trained on the first vectors turned later, different ones into the same codes) under an ``IndexIDMap2``
that maps its positions to the items' seqs. The graph only finds candidates: a recall scores the
``CANDIDATES`` it returns exactly from the mirror's float vectors, so the one float copy of each vector
is the mirror's and the graph holds a quarter of it (537 MB instead of 1.7 GB, links included, at a
million 384-d vectors; recall within the candidates 0.997 at efSearch 64 on 100k, the float graph's 1.0).
HNSW cannot delete, so a removed id is a tombstone: searches skip it through an ID selector until the
graph is rebuilt without it. Its recall is measured, not assumed: ``tune`` searches sampled queries
with rising ``efSearch`` and keeps the first whose candidates hold ``TUNE_RECALL`` of the exact ten nearest.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> vecs = rng.standard_normal((300, 8)).astype(np.float32)
    >>> vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    >>> g = Graph.build(np.arange(300), vecs)
    >>> g.tune(rng) >= 0.97
    True
    >>> int(g.search(vecs[:1], 1)[1][0, 0])
    0
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memory.mirror.backend import require_faiss

GRAPH_M = 16  # links per node: recall 1.0 at efSearch 64 on 100k clustered 384-d vectors, 13 s to build (M = 32: 16 s, and 128 more bytes per item)
GRAPH_EF_CONSTRUCTION = 80
TUNE_RECALL = 0.99  # recall@10 a tuned graph reaches on its sampled queries, unless it saturates first
SATURATED = 0.002  # a step that adds less recall than this (from at least FLOOR) is not worth its time
FLOOR = 0.97  # the promise: tuned for 0.98 on 256 queries, a 1M graph gave 0.954 on the benchmark's queries
TUNE_QUERIES = 512
TUNE_K = 10
EF_STEPS = (32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
CANDIDATES = 36  # what a recall of k1 = 10 asks the index for, scored exactly (``recall.planning.search_width``)
CODE_TOLERANCE = 0.02  # a vector read back from its codes is within this of the vector stored, per coordinate
# (half a step, 1/255, when read back; a step more for an item that shares a node's codes: Twins)
QUERY_NOISE = 0.6  # norm of the noise added to a sampled vector: cosine about 0.85 to it, like a paraphrase


@dataclass
class Tuning:
    """What the last measurement found: ``ef`` (efSearch used from then on), the recall@10 it reached on
    ``queries`` sampled queries, and how many vectors the graph held then (``at``)."""

    ef: int = EF_STEPS[2]
    recall: float | None = None
    at: int = 0
    queries: int = 0


class Graph:
    """An HNSW graph over unit vectors keyed by int64 ids, with tombstones for removed ids.

    ``mapped`` is the file of a graph read with its vectors mapped from it (``read``): it is searched as
    it is and read into memory (``owned``) before anything is added to it.
    """

    def __init__(self, raw: Any, *, tuning: Tuning | None = None, dead: np.ndarray | None = None) -> None:
        self._faiss = require_faiss('index="adaptive"')
        self.raw = raw
        self.tuning = tuning or Tuning()
        self.mapped: Path | None = None  # the file the vectors are mapped from (``read``)
        self._dead = np.zeros(0, np.int64) if dead is None else np.unique(np.asarray(dead, np.int64))
        self._selector: tuple[Any, ...] | None = None

    @classmethod
    def empty(cls, dim: int) -> Graph:
        """A graph holding nothing, its codes set to [-1, 1] in every coordinate."""
        faiss = require_faiss('index="adaptive"')
        inner = faiss.IndexHNSWSQ(dim, faiss.ScalarQuantizer.QT_8bit_uniform, GRAPH_M, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction = GRAPH_EF_CONSTRUCTION
        inner.train(np.stack([np.ones(dim, np.float32), -np.ones(dim, np.float32)]))  # the range, not the data
        return cls(faiss.IndexIDMap2(inner))

    @classmethod
    def build(cls, ids: np.ndarray, vecs: np.ndarray) -> Graph:
        """A graph holding ``vecs`` under ``ids`` (minutes at a million vectors on two cores)."""
        graph = cls.empty(vecs.shape[1])
        graph.add(ids, vecs)
        return graph

    # -- contents ------------------------------------------------------------------------------
    @property
    def held(self) -> int:
        """Vectors in the graph, removed ones included."""
        return int(self.raw.ntotal)

    @property
    def dead(self) -> np.ndarray:
        """The removed ids the graph still holds (ascending)."""
        return self._dead

    def __len__(self) -> int:
        return self.held - len(self._dead)

    def add(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        vecs = np.ascontiguousarray(vecs, np.float32)
        if not len(vecs):
            return
        self.raw.add_with_ids(vecs, np.ascontiguousarray(ids, np.int64))

    def kill(self, ids: np.ndarray) -> None:
        """Mark ``ids`` removed (ids the graph does not hold are harmless: nothing matches them)."""
        self._dead = np.union1d(self._dead, np.asarray(ids, np.int64))
        self._selector = None

    def ids(self) -> np.ndarray:
        """The live ids, in insertion order."""
        ids = self._faiss.vector_to_array(self.raw.id_map).astype(np.int64)
        return ids[~np.isin(ids, self._dead)] if len(self._dead) else ids

    def live(self) -> tuple[np.ndarray, np.ndarray]:
        """The live ids and their vectors as read back from their codes: what a rebuild starts from."""
        ids = self._faiss.vector_to_array(self.raw.id_map).astype(np.int64)
        vecs = self._faiss.downcast_index(self.raw.index).storage.reconstruct_n(0, len(ids))
        keep = ~np.isin(ids, self._dead)
        return ids[keep], vecs[keep]

    def nodes(self) -> tuple[np.ndarray, Any]:
        """Every id the graph holds (removed ones included), and ``read(lo, hi)``: the 8-bit codes of ids
        ``lo..hi`` in that order (copies, a part at a time)."""
        ids = self._faiss.vector_to_array(self.raw.id_map).astype(np.int64)
        storage = self._faiss.downcast_index(self.raw.index).storage
        return ids, lambda lo, hi: self.encode(storage.reconstruct_n(lo, hi - lo))

    def encode(self, vecs: np.ndarray) -> np.ndarray:
        """The 8-bit codes the graph gives these vectors (equal vectors, equal codes)."""
        storage = self._faiss.downcast_index(self.raw.index).storage
        return np.asarray(storage.sa_encode(np.ascontiguousarray(vecs, np.float32)))

    def codes_of(self, item_id: int) -> np.ndarray:
        """One id's codes as stored (read back and encoded again: the round trip gives the same codes)."""
        return self.encode(self.reconstruct(item_id)[None])[0]

    def reconstruct(self, item_id: int) -> np.ndarray:
        """An id's vector read back from its codes (within ``CODE_TOLERANCE`` of the stored one)."""
        return np.asarray(self.raw.reconstruct(int(item_id)), dtype=np.float32)

    def owned(self) -> Graph:
        """This graph in memory: itself, or read again from its file without mapping when it is mapped
        (FAISS cannot grow mapped vectors: it aborts the process)."""
        if self.mapped is None:
            return self
        raw = self._faiss.read_index(str(self.mapped))
        if raw.ntotal != self.raw.ntotal:  # the file changed under the mapping: copy through memory
            raw = self._faiss.deserialize_index(self._faiss.serialize_index(self.raw))
        return Graph(raw, tuning=self.tuning, dead=self._dead)

    # -- search --------------------------------------------------------------------------------
    def search(self, queries: np.ndarray, k: int, *, ef: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The k best live ids per query (id -1 where fewer exist), at the tuned ``efSearch``."""
        faiss = self._faiss
        params = faiss.SearchParametersHNSW()
        params.efSearch = max(ef or self.tuning.ef, k)
        dead, selector = self._dead, self._selector  # read once: a removal elsewhere replaces both
        if len(dead):
            if selector is None:
                self._selector = selector = _exclude(faiss, dead)
            params.sel = selector[0]
        return self.raw.search(np.ascontiguousarray(queries, np.float32), k, params=params)  # type: ignore[no-any-return]

    def tune(self, rng: np.random.Generator, *, exact: tuple[np.ndarray, np.ndarray] | None = None) -> float:
        """Measure recall@10 on ``TUNE_QUERIES`` sampled queries and set ``efSearch`` to the smallest
        step reaching ``TUNE_RECALL`` (the largest step when none does); returns the recall reached.

        Queries are live vectors plus noise of norm ``QUERY_NOISE``; the exact answer is a brute-force
        search of the vectors (``exact``: the float vectors, when the caller has them; else the graph's own,
        read back from their codes). A neighbour counts as found when it is among the ``CANDIDATES`` a
        recall scores exactly.
        """
        if len(self) <= TUNE_K:
            self.tuning = Tuning(EF_STEPS[0], 1.0, len(self), 0)
            return 1.0
        queries, truth = self._exact(rng) if exact is None else _exact_of(self._faiss, *exact, rng)
        ef, recall = tuned_ef(lambda step: recall_at(self.search(queries, CANDIDATES, ef=step)[1], truth))
        self.tuning = Tuning(ef, recall, len(self), len(queries))
        return recall

    def _exact(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Sampled queries and their exact ten nearest live ids, searched in the graph's own vector
        storage (no copy of the vectors)."""
        faiss = self._faiss
        all_ids = faiss.vector_to_array(self.raw.id_map).astype(np.int64)
        alive = np.flatnonzero(~np.isin(all_ids, self._dead))
        storage = faiss.downcast_index(faiss.downcast_index(self.raw.index).storage)
        rows = rng.choice(alive, size=min(TUNE_QUERIES, len(alive)), replace=False)
        queries = near(np.stack([storage.reconstruct(int(r)) for r in rows]), rng)
        params = faiss.SearchParameters()
        dead_rows = np.flatnonzero(np.isin(all_ids, self._dead)).astype(np.int64)
        if len(dead_rows):
            keep = _exclude(faiss, dead_rows)
            params.sel = keep[0]
        _, pos = storage.search(queries, TUNE_K, params=params)
        return queries, all_ids[pos]

    # -- files ---------------------------------------------------------------------------------
    def write(self, path: Path) -> None:
        self._faiss.write_index(self.raw, str(path))

    @classmethod
    def read(cls, path: Path, *, tuning: Tuning, dead: np.ndarray) -> Graph:
        """A saved graph with its vectors mapped from the file (read in no time, copied on first change)."""
        faiss = require_faiss('index="adaptive"')
        flag = int(getattr(faiss, "IO_FLAG_MMAP_IFC", 0))
        graph = cls(faiss.read_index(str(path), flag), tuning=tuning, dead=dead)
        graph.mapped = path if flag != 0 else None
        return graph


def tuned_ef(recall_of: Any) -> tuple[int, float]:
    """The efSearch to use and the recall@10 it reached: the first of ``EF_STEPS`` reaching ``TUNE_RECALL``;
    or, once recall is at least ``FLOOR``, the step before one that adds less than ``SATURATED`` (a graph
    of a million items with M = 16 levels off near 0.988: efSearch 1024 bought 0.003 over 256 at 5× the
    time); else the largest step.

    Example:
        >>> curve = {32: 0.9, 48: 0.95, 64: 0.975, 96: 0.985, 128: 0.986, 192: 0.99}
        >>> tuned_ef(curve.get)
        (96, 0.985)
    """
    previous: tuple[int, float] | None = None
    for step in EF_STEPS:
        recall = float(recall_of(step))
        if recall >= TUNE_RECALL:
            return step, recall
        if previous is not None and previous[1] >= FLOOR and recall - previous[1] < SATURATED:
            return previous
        previous = (step, recall)
    assert previous is not None
    return previous


def near(vecs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors near each row of ``vecs`` (noise of norm ``QUERY_NOISE`` added): tuning queries."""
    noise = rng.standard_normal(vecs.shape).astype(np.float32)
    noise *= np.float32(QUERY_NOISE) / np.linalg.norm(noise, axis=1, keepdims=True)
    queries = vecs + noise
    return np.ascontiguousarray(queries / np.linalg.norm(queries, axis=1, keepdims=True), dtype=np.float32)


def _exact_of(faiss: Any, ids: np.ndarray, vecs: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Sampled queries near ``vecs`` and the ids of their exact ten nearest among ``vecs``."""
    queries = near(vecs[rng.choice(len(vecs), size=min(TUNE_QUERIES, len(vecs)), replace=False)], rng)
    _, pos = faiss.knn(queries, np.ascontiguousarray(vecs, np.float32), TUNE_K, faiss.METRIC_INNER_PRODUCT)
    return queries, ids[pos]


def _exclude(faiss: Any, ids: np.ndarray) -> tuple[Any, ...]:
    """An ID selector that refuses ``ids``, then what it points at (SWIG does not keep them alive)."""
    ids = np.ascontiguousarray(ids, np.int64)
    batch = faiss.IDSelectorBatch(len(ids), faiss.swig_ptr(ids))
    return faiss.IDSelectorNot(batch), batch, ids


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean fraction of each row of ``truth`` that the same row of ``found`` contains.

    Example:
        >>> recall_at(np.array([[1, 2], [3, 9]]), np.array([[2, 1], [3, 4]]))
        0.75
    """
    hits = [len(set(f.tolist()) & set(t.tolist())) / len(t) for f, t in zip(found, truth, strict=True)]
    return float(np.mean(hits)) if hits else 1.0
