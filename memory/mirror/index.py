"""The vector index: inner-product search over unit vectors keyed by int64 ids (the items' ``seq``).

FAISS when it is installed, else a NumPy matrix search that returns the same neighbours. Kinds:
``flat`` (``IndexFlatIP``, exact), ``hnsw`` (``IndexHNSWFlat``: a graph, approximate) and ``ivf``
(``IndexIVFFlat``: k-means lists, approximate; exact until it holds ``IVF_TRAIN_AT`` vectors, then
trained on a sample with about √n lists, and trained again when it has grown ``IVF_REGROW`` times).
The index is derived data: the store rebuilds it from SQL whenever the saved copy is missing,
corrupt or does not match. A saved flat index is loaded with its vectors mapped from the file (shared
page cache, 0.006 s instead of 0.1 s at 100k items) and copied into memory on its first change.

Example:
    >>> import numpy as np
    >>> ix = VectorIndex(dim=2)
    >>> ix.add(np.array([7, 9]), np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32))
    >>> sims, ids = ix.search(np.array([[0.9, 0.1]], dtype=np.float32), 1)
    >>> int(ids[0, 0])
    7
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, Protocol

import numpy as np

from connectors.errors import ConfigError, StoreError
from memory.config import INDEX_KINDS
from memory.mirror import backend as backends
from memory.mirror.files import SAVING, file_fault, meta_path, remove_stale_temps

log = logging.getLogger(__name__)

Backend = Literal["faiss", "numpy"]
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80
HNSW_EF_SEARCH = 64
IVF_TRAIN_AT = 20_000  # below this an "ivf" index stays flat: exact, and k-means needs data
IVF_REGROW = 4  # train again (more lists) when the index holds this many times its training size
IVF_NPROBE = 16  # lists searched per query, at least; a sixteenth of them on big indexes
IVF_SAMPLE_PER_LIST = 64  # k-means training points per list (FAISS wants at least 39)
IVF_SEED = 1234
PARALLEL_QUERIES = 20  # batches at least this large use FAISS's BLAS path and all OpenMP threads


class SearchIndex(Protocol):
    """What a namespace mirror needs from its index: ``VectorIndex`` in the process, or an index the
    database serves (``memory.mirror.pgvector.PgVectorIndex``), which holds nothing and ignores add/remove."""

    kind: str

    @property
    def approximate(self) -> bool: ...

    def add(self, ids: np.ndarray, vecs: np.ndarray, *, expect: int = 0) -> None: ...

    def remove(self, ids: np.ndarray) -> None: ...

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...

    def save(self, path: Path, generation: int) -> bool: ...


class _Matrix:
    """The NumPy fallback: a growable (n, d) matrix and its ids; search is one matrix-vector product."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._vecs = np.empty((64, dim), dtype=np.float32)
        self._ids = np.empty(64, dtype=np.int64)
        self.ntotal = 0

    def add_with_ids(self, vecs: np.ndarray, ids: np.ndarray) -> None:
        need = self.ntotal + len(ids)
        if need > len(self._ids):
            size = max(need, 2 * len(self._ids))
            self._vecs = np.concatenate(
                [self._vecs[: self.ntotal], np.empty((size - self.ntotal, self.dim), np.float32)]
            )
            self._ids = np.concatenate([self._ids[: self.ntotal], np.empty(size - self.ntotal, np.int64)])
        self._vecs[self.ntotal : need] = vecs
        self._ids[self.ntotal : need] = ids
        self.ntotal = need

    def remove(self, ids: np.ndarray) -> None:
        keep = ~np.isin(self._ids[: self.ntotal], ids)
        n = int(keep.sum())
        self._vecs[:n] = self._vecs[: self.ntotal][keep]
        self._ids[:n] = self._ids[: self.ntotal][keep]
        self.ntotal = n

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        m = queries.shape[0]
        sims = np.full((m, k), -np.inf, dtype=np.float32)
        ids = np.full((m, k), -1, dtype=np.int64)
        n = self.ntotal
        if n == 0 or k == 0:
            return sims, ids
        all_sims = queries @ self._vecs[:n].T
        kk = min(k, n)
        top = np.argpartition(-all_sims, kk - 1, axis=1)[:, :kk] if kk < n else np.tile(np.arange(n), (m, 1))
        top_sims = np.take_along_axis(all_sims, top, axis=1)
        order = np.argsort(-top_sims, axis=1, kind="stable")
        sims[:, :kk] = np.take_along_axis(top_sims, order, axis=1)
        ids[:, :kk] = self._ids[: self.ntotal][np.take_along_axis(top, order, axis=1)]
        return sims, ids

    def vector(self, item_id: int) -> np.ndarray:
        pos = np.flatnonzero(self._ids[: self.ntotal] == item_id)
        if not len(pos):
            raise KeyError(item_id)
        return self._vecs[int(pos[0])].copy()

    def all_ids(self) -> np.ndarray:
        return self._ids[: self.ntotal].copy()


class VectorIndex:
    """Inner-product search over unit vectors with int64 ids.

    Args:
        dim: the vectors' dimension.
        kind: ``"flat"`` (exact), ``"hnsw"`` or ``"ivf"`` (approximate; need faiss).
        backend: ``"faiss"`` or ``"numpy"``; by default faiss when installed.

    Example:
        >>> VectorIndex(dim=4, backend="numpy").backend
        'numpy'
    """

    def __init__(self, dim: int, *, kind: str = "flat", backend: Backend | None = None) -> None:
        if kind not in INDEX_KINDS:
            raise ConfigError(f"index kind must be one of {INDEX_KINDS}, got {kind!r}")
        self.dim = dim
        self.kind = kind
        faiss = backends.load_faiss() if backend != "numpy" else None
        if backend == "faiss" and faiss is None or kind != "flat" and faiss is None:
            faiss = backends.require_faiss(f"the {kind!r} index")
        self.backend: Backend = "faiss" if faiss is not None else "numpy"
        self._faiss = faiss
        self.raw: Any = self._new_raw()
        self._mapped = False  # a flat index read with its vectors mapped from the file (``load``)

    def _new_raw(self) -> Any:
        if self._faiss is None:
            return _Matrix(self.dim)
        faiss = self._faiss
        if self.kind == "hnsw":
            inner = faiss.IndexHNSWFlat(self.dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
            return faiss.IndexIDMap2(inner)
        return faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))

    def __len__(self) -> int:
        return int(self.raw.ntotal)

    @property
    def approximate(self) -> bool:
        """Whether a search may miss a neighbour (``hnsw``, ``ivf``): intent grouping then goes through the index."""
        return self.kind != "flat"

    def own(self) -> None:
        """Copy a mapped index (``load``) into memory before its first change: FAISS cannot grow or
        shrink vectors it maps from a file (it aborts the process), and the file must never change."""
        if self._mapped:
            owned = self._new_raw()
            if len(self):
                owned.add_with_ids(self.vectors(), self.ids())
            self.raw, self._mapped = owned, False

    @property
    def trained_lists(self) -> int:
        """How many k-means lists an ``ivf`` index searches (0 while it is still flat)."""
        return int(self.raw.nlist) if self._faiss is not None and isinstance(self.raw, self._faiss.IndexIVF) else 0

    def add(self, ids: np.ndarray, vecs: np.ndarray, *, expect: int = 0) -> None:
        """Add vectors under the given ids (the caller keeps ids unique).

        ``expect`` is how many vectors the index will soon hold (a build adds them in chunks), so an
        ``ivf`` index is trained once, with lists sized for all of them.
        """
        if not len(ids):
            return
        self.own()
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if self.kind == "ivf" and self._faiss is not None:
            total = max(len(self) + len(ids), expect)
            lists = self.trained_lists
            if (not lists and total >= IVF_TRAIN_AT) or (lists and total >= IVF_REGROW * lists * lists):
                self._train_ivf(ids, vecs, total)
                return
        self.raw.add_with_ids(vecs, ids)

    def _train_ivf(self, ids: np.ndarray, vecs: np.ndarray, total: int) -> None:
        """Replace the index by an IVF index trained on a sample of what it holds plus ``vecs``."""
        faiss = self._faiss
        assert faiss is not None
        all_ids = np.concatenate([self.ids(), ids])
        all_vecs = np.concatenate([self.vectors(), vecs])
        lists = int(min(65536, max(16, np.sqrt(total))))
        rng = np.random.default_rng(IVF_SEED)
        sample = all_vecs[rng.choice(len(all_vecs), min(len(all_vecs), IVF_SAMPLE_PER_LIST * lists), replace=False)]
        ivf = faiss.index_factory(self.dim, f"IVF{lists},Flat", faiss.METRIC_INNER_PRODUCT)
        ivf.train(np.ascontiguousarray(sample))
        ivf.set_direct_map_type(faiss.DirectMap.Hashtable)  # reconstruct and remove by id
        ivf.nprobe = ivf_nprobe(lists)
        ivf.add_with_ids(all_vecs, all_ids)
        self.raw = ivf
        log.info("memory index: IVF trained with %d lists on %d of %d vectors", lists, len(sample), len(all_ids))

    def vectors(self) -> np.ndarray:
        """Every stored vector, in ``ids()`` order (faiss backends)."""
        faiss = self._faiss
        assert faiss is not None
        if isinstance(self.raw, faiss.IndexIVF):
            return np.concatenate([_ivf_list(self.raw, lst)[1] for lst in range(self.raw.nlist)] + [
                np.zeros((0, self.dim), np.float32)
            ])  # fmt: skip
        return faiss.downcast_index(self.raw.index).reconstruct_n(0, len(self))  # type: ignore[no-any-return]

    def remove(self, ids: np.ndarray) -> None:
        """Drop the given ids (HNSW cannot delete in place, so it is rebuilt without them)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if not len(ids) or not len(self):
            return
        self.own()
        if self._faiss is None:
            self.raw.remove(ids)
        elif self.kind == "hnsw":
            all_ids = self.ids()
            keep = ~np.isin(all_ids, ids)
            vecs = self.vectors()
            self.raw = self._new_raw()
            self.add(all_ids[keep], vecs[keep])
        elif isinstance(self.raw, self._faiss.IndexIVF):
            ids = ids[np.isin(ids, self.ids())]  # the hashtable refuses unknown ids
            self.raw.remove_ids(self._faiss.IDSelectorArray(len(ids), self._faiss.swig_ptr(ids)))
        else:
            self.raw.remove_ids(self._faiss.IDSelectorBatch(ids))

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k best ids per query row by inner product (id -1 where fewer than k exist)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, self.dim)
        if self._faiss is None or k == 0:
            return self.raw.search(queries, k)  # type: ignore[no-any-return]
        if self.kind == "hnsw":
            self._faiss.downcast_index(self.raw.index).hnsw.efSearch = max(HNSW_EF_SEARCH, 2 * k)
        with threads_for(queries.shape[0]):
            return self.raw.search(queries, k)  # type: ignore[no-any-return]

    def reconstruct(self, item_id: int) -> np.ndarray:
        """The stored vector of one id (used to check a loaded index against SQL)."""
        if self._faiss is None:
            return self.raw.vector(item_id)  # type: ignore[no-any-return]
        return np.asarray(self.raw.reconstruct(int(item_id)), dtype=np.float32)

    def ids(self) -> np.ndarray:
        """Every id held, in insertion order."""
        if self._faiss is None:
            return self.raw.all_ids()  # type: ignore[no-any-return]
        if isinstance(self.raw, self._faiss.IndexIVF):
            return np.concatenate([_ivf_list(self.raw, lst)[0] for lst in range(self.raw.nlist)] + [
                np.zeros(0, np.int64)
            ])  # fmt: skip
        return self._faiss.vector_to_array(self.raw.id_map).astype(np.int64)

    def save(self, path: Path, generation: int) -> bool:
        """Write the index and a JSON sidecar with the generation it reflects; atomic per file.

        The NumPy fallback is not saved (rebuilding it from the mirror is a copy). Returns whether
        anything was written. A failed write (faiss raises ``RuntimeError``, the file system
        ``OSError``) is a ``StoreError`` naming its cause; no temporary file is left behind.
        """
        if self._faiss is None:
            return False
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with SAVING:  # the temporary names are per process: two stores of one process take turns
                self._write(path, generation)
            remove_stale_temps(path)
        except (OSError, RuntimeError) as e:
            raise StoreError(
                f"{file_fault(e)}: cannot save the vector index {str(path)!r} ({e}). The memories are safe in "
                "the database and the index is rebuilt from it on open; free space or make the folder "
                "writable, or pass index_path= to save it elsewhere"
            ) from e
        return True

    def _write(self, path: Path, generation: int) -> None:
        assert self._faiss is not None
        sidecar = meta_path(path)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp_meta = sidecar.with_name(sidecar.name + f".{os.getpid()}.tmp")
        try:
            self._faiss.write_index(self.raw, str(tmp))
            os.replace(tmp, path)
            meta = {"generation": generation, "kind": self.kind, "dim": self.dim, "count": len(self)}
            tmp_meta.write_text(json.dumps(meta), encoding="utf-8")
            os.replace(tmp_meta, sidecar)
        finally:  # a write cut short (a full disk) leaves a torn temporary file: remove it
            for leftover in (tmp, tmp_meta):
                with contextlib.suppress(OSError):
                    leftover.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: Path, *, dim: int, kind: str, saved_as: tuple[str, ...] = ()) -> tuple[VectorIndex, int] | None:
        """A saved index and the generation it reflects, or None when missing, unreadable or foreign.
        ``saved_as``: the sidecar kinds accepted (default: ``kind``; ``"auto"`` saves its exact part as flat)."""
        faiss = backends.load_faiss()
        if faiss is None or not path.exists() or not meta_path(path).exists():
            return None
        try:
            meta = json.loads(meta_path(path).read_text(encoding="utf-8"))
            # A flat index's vectors stay in the file, mapped: read in no time, in the page cache once for
            # every process, never written (a change copies them first: own).
            raw = faiss.read_index(str(path), _mapping_flag(faiss) if kind == "flat" else 0)
        except Exception as e:  # a torn or corrupt file of any kind: the caller rebuilds
            log.warning("memory index %s is unreadable (%s); it will be rebuilt", path, e)
            return None
        # No check of the sidecar's count: a process killed between the two renames of ``save`` leaves
        # a newer index beside an older sidecar; the caller reconciles the ids with SQL anyway (and
        # catches this one up) instead of rebuilding the whole index.
        if meta.get("dim") != dim or meta.get("kind") not in (saved_as or (kind,)) or raw.d != dim:
            log.warning("memory index %s does not match its sidecar or this store; it will be rebuilt", path)
            return None
        if isinstance(raw, faiss.IndexIVF):
            raw.set_direct_map_type(faiss.DirectMap.Hashtable)
            raw.nprobe = ivf_nprobe(int(raw.nlist))
        index = cls(dim, kind=kind, backend="faiss")
        index.raw, index._mapped = raw, kind == "flat" and _mapping_flag(faiss) != 0
        return index, int(meta["generation"])


def _mapping_flag(faiss: ModuleType) -> int:
    """FAISS's flag to map a flat index's vectors from its file (0 where this FAISS lacks it)."""
    return int(getattr(faiss, "IO_FLAG_MMAP_IFC", 0))


def ivf_nprobe(lists: int) -> int:
    """Lists an IVF search visits: ``IVF_NPROBE``, or a sixteenth of them when there are more than 256
    (with ~√n lists a fixed 16 lets recall@10 fall below 0.8 at a million clustered vectors)."""
    return min(lists, max(IVF_NPROBE, lists // 16))


def _ivf_list(ivf: Any, lst: int) -> tuple[np.ndarray, np.ndarray]:
    """The ids and vectors of one inverted list of an ``IndexIVFFlat`` (copies)."""
    import faiss

    size = ivf.invlists.list_size(lst)
    if not size:
        return np.zeros(0, np.int64), np.zeros((0, ivf.d), np.float32)
    ids = faiss.rev_swig_ptr(ivf.invlists.get_ids(lst), size).copy()
    codes = faiss.rev_swig_ptr(ivf.invlists.get_codes(lst), size * ivf.code_size).copy()
    return ids.astype(np.int64), codes.view(np.float32).reshape(size, ivf.d)


def best_per_row(sims: np.ndarray, ids: np.ndarray, k: int, dedupe: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the k best (sim, id) pairs, the older (smaller) id first among equal similarities;
    ``dedupe``: each id once (a merge holds an id in both parts for a while)."""
    if dedupe:
        by_id = np.argsort(ids, axis=1, kind="stable")
        sorted_ids = np.take_along_axis(ids, by_id, axis=1)
        repeat = np.zeros_like(sorted_ids, dtype=bool)
        repeat[:, 1:] = (sorted_ids[:, 1:] == sorted_ids[:, :-1]) & (sorted_ids[:, 1:] >= 0)
        sims = sims.copy()
        np.put_along_axis(sims, by_id, np.where(repeat, -np.inf, np.take_along_axis(sims, by_id, axis=1)), axis=1)
    order = np.lexsort((np.where(ids < 0, np.iinfo(np.int64).max, ids), -sims), axis=-1)[:, :k]
    best_sims, best_ids = np.take_along_axis(sims, order, axis=1), np.take_along_axis(ids, order, axis=1)
    return best_sims, np.where(np.isinf(best_sims), -1, best_ids)


@contextlib.contextmanager
def threads_for(queries: int) -> Iterator[None]:
    """One OpenMP thread while searching a few queries: they gain nothing from OpenMP, and on a busy machine
    its thread barriers cost 100x (0.24 ms -> 36 ms measured for 10k x 384 on 2 loaded cores). The setting
    is per calling thread in OpenMP, so other threads' searches are unaffected."""
    import faiss

    if queries >= PARALLEL_QUERIES:
        yield
        return
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(threads)
