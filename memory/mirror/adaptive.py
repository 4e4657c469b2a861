"""``index="adaptive"``: exact while small, an HNSW graph tuned for recall once large, switched in the background.

An ``AdaptiveIndex`` has two parts. ``fresh`` is an exact flat index of the newest vectors; ``graph``
(``memory.mirror.graph``) an HNSW graph of the rest, absent until the namespace holds ``ANN_AT``
items. A search asks both and keeps the best k, so a write is searchable the moment it is added (a
flat add costs microseconds) and the graph only ever trails. One background thread per index does
the slow work, never under the store's lock:

- **switch**: at ``ANN_AT`` items it builds the graph from a copy of ``fresh``, tunes ``efSearch`` for
  recall@10 >= 0.99 on sampled queries, then swaps it in; searches stay exact meanwhile.
- **merge**: when ``fresh`` holds ``MERGE_AT`` vectors it moves them into the graph, ``MERGE_CHUNK`` at
  a time under the index's own lock (a search waits for at most one chunk).
- **retune**: when the graph has doubled since it was last measured, its recall is measured again
  (the ``ivf`` kind's drift to 0.73 at a million items is what this prevents).
- **rebuild**: when removed ids (tombstones) reach ``REBUILD_DEAD`` of the graph, it is built again
  without them.

The graph holds each distinct vector once (copies are twins of one node, ``memory.mirror.twins``) as
8-bit codes; its similarities are approximate (``exact_scores``), so a recall scores every candidate
it returns exactly from the mirror. Saved as two FAISS files, the twins and a JSON sidecar: the graph
(rewritten only when it changed; mapped from the file on open, so a reopen reads none of it), the twins,
``fresh``, then the sidecar naming the graph's size and the twins' count. A process killed at any point
leaves files the store reconciles with SQL on open, or rebuilds from it when they do not match.

Example:
    >>> import numpy as np
    >>> ix = AdaptiveIndex(dim=2)
    >>> ix.add(np.array([7, 9]), np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32))
    >>> int(ix.search(np.array([[0.9, 0.1]], dtype=np.float32), 1)[1][0, 0]), ix.holds
    (7, 'exact')
"""

from __future__ import annotations

import json
import logging
import threading
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from connectors.errors import StoreError
from memory.mirror import backend as backends
from memory.mirror.files import (
    SAVING,
    atomic,
    file_fault,
    graph_path,
    meta_path,
    remove_stale_temps,
    twins_path,
    write_array,
    write_raw,
)
from memory.mirror.graph import CODE_TOLERANCE, Graph, Tuning
from memory.mirror.index import SearchIndex, VectorIndex, best_per_row, threads_for
from memory.mirror.twins import Twins

log = logging.getLogger(__name__)

ANN_AT = 20_000  # items from which a namespace searches through the graph (flat: about 1 ms a query here)
MERGE_AT = 2_048  # fresh vectors that start a merge into the graph
MERGE_CHUNK = 256  # vectors moved per hold of the index's lock (tens of ms at a million)
RETUNE_GROWTH = 2.0  # recall is measured again when the graph holds this many times what it held then
REBUILD_DEAD = 0.2  # share of tombstones in the graph that starts a rebuild without them
TUNE_SEED = 1234
GROUPING_EF = 32  # intent grouping asks for the one nearest key, which joins only at cosine >= 0.98: a
# neighbour that close is found by a short greedy walk; efSearch tuned for recall@10 (192 at a million
# items) cost 1 ms a write. A near key missed starts a new group, as ``memory.write.inserts`` says.


class AdaptiveIndex:
    """Exact flat search while a namespace is small, a tuned HNSW graph plus a small exact part after.

    Args:
        dim: the vectors' dimension.
        background: do the switch, merges and tuning in a thread (the default); false does them inline,
            in the call that crosses the threshold (deterministic; tests and one-off scripts).

    Example:
        >>> AdaptiveIndex(dim=4).kind
        'adaptive'
    """

    kind = "adaptive"
    backend = "faiss"
    exact_scores = False  # the graph's similarities come from 8-bit codes: a recall scores every candidate
    stored_tolerance = CODE_TOLERANCE  # how far ``reconstruct`` may be from the vector stored, per coordinate

    def __init__(self, dim: int, *, background: bool = True) -> None:
        self.dim = dim
        self.background = background
        self.fresh = VectorIndex(dim, kind="flat", backend="faiss")
        self.graph: Graph | None = None
        self.twins = Twins()  # the graph's items that share a node's vector (``memory.mirror.twins``)
        self._lock = threading.RLock()  # searches, adds and every swap of a part
        self._worker: threading.Thread | None = None
        self._closed = False
        self._left_out: list[np.ndarray] = []  # while a switch copies the vectors: the ids removed; while a
        # rebuild does: the nodes killed
        self._copying = False
        self._merging = 0  # while a merge runs: how many of fresh's first vectors it moves (they stay in
        # fresh, at fixed positions, until the merge ends; a removal meanwhile is masked, not compacted)
        self._masked = np.zeros(0, np.int64)
        self._graph_changed = False  # the graph differs from its file
        self._twins_changed = False
        self._rng = np.random.default_rng(TUNE_SEED)
        self.error: str | None = None  # the last background failure (the index stays exact or as it was)

    # -- what it holds -------------------------------------------------------------------------
    @property
    def holds(self) -> str:
        """``"exact"`` (flat only) or ``"graph"`` (a graph plus the fresh flat part)."""
        return "exact" if self.graph is None else "graph"

    @property
    def approximate(self) -> bool:
        """Whether searches may miss a neighbour (then intent grouping goes through the index too)."""
        return self.graph is not None

    def __len__(self) -> int:
        with self._lock:
            if self._merging:
                return len(self.ids())
            return len(self.fresh) + self._graph_items()

    def _graph_items(self) -> int:
        g = self.graph
        return 0 if g is None else len(g) - len(self.twins.hollow) + len(self.twins)

    def ids(self) -> np.ndarray:
        with self._lock:
            fresh = self.fresh.ids()
            if self._merging:  # moved ones are in the graph already; masked ones are gone
                fresh = fresh[self._merging :]
                fresh = fresh[~np.isin(fresh, self._masked)]
            parts = [self.twins.items(self.graph.ids())] if self.graph is not None else []
            return np.concatenate([*parts, fresh])

    def reconstruct(self, item_id: int) -> np.ndarray:
        with self._lock:
            try:
                return self.fresh.reconstruct(item_id)
            except RuntimeError:
                if self.graph is None:
                    raise
                return self.graph.reconstruct(self.twins.node_of(item_id))

    def status(self) -> dict[str, Any]:
        """What the index holds now and what its graph's recall was measured at (``MemoryStore.index_details``)."""
        with self._lock:
            g = self.graph
            busy = self._worker is not None and self._worker.is_alive()
            return {
                "kind": "adaptive", "holds": self.holds, "items": len(self), "fresh": len(self.fresh),
                "graph": self._graph_items(), "distinct_vectors": len(g) if g else 0,
                "removed_in_graph": len(g.dead) if g else 0,
                "ef_search": g.tuning.ef if g else None, "measured_recall_at_10": g.tuning.recall if g else None,
                "measured_at_items": g.tuning.at if g else None, "working": busy, "error": self.error,
            }  # fmt: skip

    # -- changes -------------------------------------------------------------------------------
    def add(self, ids: np.ndarray, vecs: np.ndarray, *, expect: int = 0) -> None:
        """Add vectors under new ids: searchable at once (they go to the exact part)."""
        if not len(ids):
            return
        with self._lock:
            self.fresh.add(ids, vecs)
        self._kick()

    def remove(self, ids: np.ndarray) -> None:
        """Drop ids: from the exact part at once; in the graph as tombstones (nodes no item uses any more)
        until a rebuild."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if not len(ids):
            return
        with self._lock:
            if self._merging:  # some may be in the graph already: all are offered to it
                self._masked = np.union1d(self._masked, ids)
                in_graph = ids
            else:
                in_graph = ids[~np.isin(ids, self.fresh.ids())]
                self.fresh.remove(ids)
            kill = np.zeros(0, np.int64)
            if self.graph is not None and len(in_graph):
                kill = self.twins.remove(in_graph)
                self.graph.kill(kill)  # the sidecar lists them: the graph's file stays as it is
                self._twins_changed = True
            if self._copying:
                self._left_out.append(ids if self.graph is None else kill)
        self._kick()

    # -- search --------------------------------------------------------------------------------
    def search(self, queries: np.ndarray, k: int, *, ef: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The k best ids per query row by inner product: the exact part's and the graph's, merged. Where
        copies of one vector are in the graph the rows are wider than k (``Twins.expand`` says why).
        ``ef``: the graph's efSearch for this search instead of the tuned one (``GROUPING_EF``)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, self.dim)
        if k == 0:
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        with self._lock, threads_for(len(queries)):
            masked, merging = len(self._masked), self._merging > 0
            if self.graph is not None and not len(self.fresh):  # all in the graph: no exact part to search
                return self.twins.expand(*self.graph.search(queries, k, ef=ef), k)
            sims, ids = self.fresh.raw.search(queries, k + masked)
            if masked:
                sims = np.where(np.isin(ids, self._masked), np.float32(-np.inf), sims)
                ids = np.where(np.isinf(sims), -1, ids)
            if self.graph is None:
                return best_per_row(sims, ids, k, merging) if masked else (sims, ids)
            gsims, gids = self.twins.expand(*self.graph.search(queries, k, ef=ef), k)  # may be wider than k
            if not len(self.fresh):  # just merged: nothing to add (a merge keeps its vectors there until done)
                return gsims, gids
            k = max(k, gids.shape[1])
        return best_per_row(np.concatenate([sims, gsims], axis=1), np.concatenate([ids, gids], axis=1), k, merging)

    # -- background work -----------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> bool:
        """Block until the background work due now is done; false when ``timeout`` seconds passed first."""
        worker = self._worker
        if worker is not None:
            worker.join(timeout)
            if worker.is_alive():
                return False
        return True

    def close(self) -> None:
        """Stop background work at its next step (a graph being built is dropped; the files stay valid)."""
        self._closed = True

    def _due(self) -> str | None:
        g = self.graph
        if g is None:
            return "switch" if len(self.fresh) >= ANN_AT else None
        if g.held and len(g.dead) >= REBUILD_DEAD * g.held:
            return "rebuild"
        if len(self.fresh) >= MERGE_AT:
            return "merge"
        if g.tuning.at and g.held >= RETUNE_GROWTH * g.tuning.at:
            return "retune"
        return None

    def _kick(self) -> None:
        """Start the worker when work is due and none runs (after a failure, none starts until reopened)."""
        with self._lock:
            if self._closed or self.error is not None or self._worker is not None or self._due() is None:
                return
            if self.background:
                self._worker = threading.Thread(target=self._work, name="evolve-adaptive-index", daemon=True)
                self._worker.start()
                return
        self._work()

    def _work(self) -> None:
        """Do what is due until nothing is (or the index is closed); a failure is logged and kept in ``error``."""
        jobs = {"switch": self._switch, "rebuild": self._rebuild, "merge": self._merge, "retune": self._retune}
        try:
            while True:
                with self._lock:  # deciding to stop and clearing the worker are one step: _kick sees either
                    job = None if self._closed else self._due()
                    if job is None:
                        self._worker = None
                        return
                jobs[job]()
        except Exception as e:  # derived data: the index keeps answering from what it has
            with self._lock:
                self.error, self._worker, self._copying = f"{type(e).__name__}: {e}", None, False
            log.warning("memory index (adaptive): background work failed (%s); searches go on as before", e)

    def _switch(self) -> None:
        with self._lock:
            ids, vecs = self.fresh.ids(), self.fresh.vectors()
            self._copying, self._left_out = True, []
        twins = Twins()
        new = twins.split(ids, vecs)  # copies of one vector (equal bits): one node
        graph = Graph.build(ids[new], vecs[new])
        recall = graph.tune(self._rng, exact=(ids[new], vecs[new]))
        self._install(graph, twins, moved=ids)
        log.info("memory index (adaptive): switched to a graph of %d items (%d distinct vectors), efSearch %d, "
                 "recall@10 %.3f", len(ids), int(new.sum()), graph.tuning.ef, recall)  # fmt: skip

    def _rebuild(self) -> None:
        assert self.graph is not None
        with self._lock:
            self._copying, self._left_out = True, []
            ids, vecs = self.graph.live()
        graph = Graph.build(ids, vecs)
        graph.tune(self._rng, exact=(ids, vecs))
        self._install(graph, self.twins, moved=np.zeros(0, np.int64))

    def _install(self, graph: Graph, twins: Twins, *, moved: np.ndarray) -> None:
        """Swap a graph built outside the lock in: ``moved`` ids leave the exact part; ids removed while it
        was built stay removed."""
        with self._lock:
            self._copying = False
            if self._closed:
                return
            self.fresh.remove(moved)
            if self._left_out:
                left_out = np.concatenate(self._left_out)
                graph.kill(twins.remove(left_out) if len(moved) else left_out)
            twins.drop_table()  # codes of a graph trained anew: hashed again on first need
            self.graph, self.twins, self._left_out = graph, twins, []
            self._graph_changed = self._twins_changed = True

    def _merge(self) -> None:
        assert self.graph is not None
        if self.graph.mapped is not None:  # read it into memory first, without blocking searches
            owned = self.graph.owned()
            with self._lock:
                owned.kill(self.graph.dead)
                self.graph = owned
        if not self.twins.has_table:  # after a reopen or a rebuild: hash the nodes' codes, outside the lock
            self._hash_nodes()
        with self._lock:
            self.fresh.own()  # positions are read below: a mapped file cannot move
            self._merging = moving = len(self.fresh)
            all_ids = self.fresh.ids()
            flat = self.fresh.raw.index
        try:
            for lo in range(0, moving, MERGE_CHUNK):
                if self._closed:
                    return
                hi = min(lo + MERGE_CHUNK, moving)
                with self._lock:  # positions below ``moving`` stay put: nothing is compacted meanwhile
                    ids, vecs = all_ids[lo:hi], flat.reconstruct_n(lo, hi - lo)
                    kept = ~np.isin(ids, self._masked)  # removed before they reached the graph
                    graph = self.graph
                    ids, vecs = ids[kept], vecs[kept]
                    new = self.twins.split(ids, graph.encode(vecs), stored=graph.codes_of)
                    graph.add(ids[new], vecs[new])
                    self._graph_changed = self._twins_changed = True
        finally:
            with self._lock:
                self.fresh.remove(np.union1d(all_ids[:moving], self._masked))
                self._merging, self._masked = 0, np.zeros(0, np.int64)

    def _hash_nodes(self) -> None:
        """Build the twins' table of node hashes from the graph (nodes killed meanwhile are left out)."""
        assert self.graph is not None
        graph = self.graph
        nodes, read = graph.nodes()
        table = Twins()
        table.build_table(nodes, read)
        with self._lock:
            if self.graph is graph:
                self.twins.adopt_table(table, graph.dead)

    def _retune(self) -> None:
        assert self.graph is not None
        self.graph.tune(self._rng)
        self._graph_changed = True

    # -- files ---------------------------------------------------------------------------------
    def save(self, path: Path, generation: int) -> bool:
        """Write the graph and its twins (each when it changed), the exact part and the sidecar, each
        atomically; the sidecar, last, names the graph's size and the twins' count it goes with."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with SAVING, self._lock:
                self._write(path, generation)
            remove_stale_temps(path)
            remove_stale_temps(graph_path(path))
            remove_stale_temps(twins_path(path))
        except (OSError, RuntimeError) as e:
            raise StoreError(
                f"{file_fault(e)}: cannot save the vector index {str(path)!r} ({e}). The memories are safe in "
                "the database and the index is rebuilt from it on open; free space or make the folder writable"
            ) from e
        return True

    def _write(self, path: Path, generation: int) -> None:
        g = self.graph
        if g is not None and (self._graph_changed or not graph_path(path).exists()):
            atomic(graph_path(path), g.write)
            self._graph_changed = False
        twins = self.twins.rows()
        if g is not None and (self._twins_changed or not twins_path(path).exists()):
            atomic(twins_path(path), partial(write_array, twins))
            self._twins_changed = False
        atomic(path, partial(write_raw, self.fresh.raw))
        t = g.tuning if g is not None else Tuning()
        meta = {
            "generation": generation, "kind": "adaptive", "dim": self.dim, "count": len(self),
            "graph": g is not None, "graph_held": g.held if g is not None else 0, "twins": len(twins),
            "dead": g.dead.tolist() if g is not None else [],
            "ef_search": t.ef, "recall": t.recall, "tuned_at": t.at, "tune_queries": t.queries,
        }  # fmt: skip
        atomic(meta_path(path), lambda tmp: tmp.write_text(json.dumps(meta), encoding="utf-8"))

    @classmethod
    def load(cls, path: Path, *, dim: int) -> tuple[AdaptiveIndex, int] | None:
        """A saved index and the generation it reflects; None when missing, unreadable or foreign. A file
        saved by the ``flat`` kind (stores from before ``adaptive``) is taken as the exact part."""
        if not path.exists() or not meta_path(path).exists():
            return None
        try:
            meta = json.loads(meta_path(path).read_text(encoding="utf-8"))
            if meta.get("dim") != dim or meta.get("kind") not in ("adaptive", "flat"):
                return None
            flat = VectorIndex.load(path, dim=dim, kind="flat", saved_as=("adaptive", "flat"))
            if flat is None:
                return None
            index = cls(dim)
            index.fresh = flat[0]
            if meta.get("graph"):
                tuning = Tuning(
                    int(meta["ef_search"]), meta.get("recall"), int(meta["tuned_at"]), int(meta["tune_queries"])
                )
                graph = Graph.read(graph_path(path), tuning=tuning, dead=np.array(meta["dead"], np.int64))
                twins = np.load(twins_path(path)) if meta.get("twins") else np.zeros((0, 2), np.int64)
                if graph.raw.d != dim or graph.held != meta.get("graph_held") or len(twins) != meta["twins"]:
                    log.warning("memory index %s: its graph or twins do not match the sidecar (a save was cut "
                                "short); it will be rebuilt", path)  # fmt: skip
                    return None
                index.graph, index.twins = graph, Twins.from_rows(twins)
        except Exception as e:  # a torn or foreign file of any kind: the caller rebuilds
            log.warning("memory index %s is unreadable (%s); it will be rebuilt", path, e)
            return None
        index._kick()  # work a killed process left undone (a switch, a merge) starts again
        return index, int(meta["generation"])


def new_index(dim: int, kind: str) -> SearchIndex:
    """An empty in-process index of ``kind``; ``"adaptive"`` without faiss is NumPy's exact search."""
    if kind == "adaptive":
        return AdaptiveIndex(dim) if backends.load_faiss() is not None else VectorIndex(dim, kind="flat")
    return VectorIndex(dim, kind=kind)


def load_index(path: Path, *, dim: int, kind: str) -> tuple[SearchIndex, int] | None:
    """``kind``'s saved index at ``path`` and the generation it reflects, or None (then it is rebuilt)."""
    if kind == "adaptive":
        return AdaptiveIndex.load(path, dim=dim) if backends.load_faiss() is not None else None
    return VectorIndex.load(path, dim=dim, kind=kind)
