"""The systems ``bench.peers`` compares, each behind one small interface (``System``).

Raw FAISS (flat and HNSW), usearch, Qdrant local mode, LanceDB, Chroma, sqlite-vec, and Evolve's full
recall (``MemoryStore.retrieve`` with Q and the recall log) with its flat, HNSW or adaptive index. Each stores
the same items (ids ``0..n-1``; where the system keeps a payload, a score ``q`` and a text), answers one
query at a time with its top ``K`` and their payload, and, where its API offers it, updates the score of
the top ``UPDATE_ITEMS`` of a result in one call, as one Evolve ``reinforce`` does for a recall. Every
peer is imported lazily: this module imports without any of them (they live in ``.venv-peers``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol

import numpy as np

DIM = 384
K = 10
UPDATE_ITEMS = 5  # a feedback event moves the k2 = 5 items Evolve's recall selects; peers update as many
EVOLVE_MODES = {"evolve-flat": "flat", "evolve-hnsw": "hnsw", "evolve-adaptive": "adaptive"}
FAISS_HNSW = {"m": 32, "ef_construction": 80, "ef_search": 64}  # Evolve's HNSW settings (memory.mirror.index)


class Unsupported(Exception):
    """The system has no API for this (FAISS and usearch keep no payload to update)."""


class System(Protocol):
    def insert(self, ids: np.ndarray, vecs: np.ndarray) -> None: ...
    def finish(self) -> None: ...
    def search(self, i: int, vec: np.ndarray) -> Any: ...
    def ids(self, hit: Any) -> list[int]: ...
    def update(self, hit: Any, j: int) -> int: ...
    def close(self) -> None: ...


class Faiss:
    """Raw FAISS: ``IndexFlatIP`` or ``IndexHNSWFlat`` (Evolve's M, efConstruction, efSearch), saved with
    ``write_index``, reopened with ``read_index``, searched with one OpenMP thread. No payload: updates
    are not offered."""

    def __init__(self, work: Path, *, create: bool, kind: str) -> None:
        import faiss

        self.faiss, self.path, self.created = faiss, work / f"{kind}.faiss", create
        self.index: Any
        if create:
            if kind == "flat":
                self.index = faiss.IndexFlatIP(DIM)
            else:
                self.index = faiss.IndexHNSWFlat(DIM, FAISS_HNSW["m"], faiss.METRIC_INNER_PRODUCT)
                self.index.hnsw.efConstruction = FAISS_HNSW["ef_construction"]
        else:
            self.index = faiss.read_index(str(self.path))
            faiss.omp_set_num_threads(1)  # as Evolve searches a few queries: OpenMP threads for one query
            # cost 20 ms on a busy 2-core machine (memory.mirror.index does the same)
        if kind == "hnsw":
            self.index.hnsw.efSearch = FAISS_HNSW["ef_search"]

    def insert(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        self.index.add(vecs)  # ids are 0..n-1 in order: FAISS's own sequential ids

    def finish(self) -> None:
        pass

    def search(self, i: int, vec: np.ndarray) -> Any:
        return self.index.search(vec[None, :], K)[1][0]

    def ids(self, hit: Any) -> list[int]:
        return [int(x) for x in hit]

    def update(self, hit: Any, j: int) -> int:
        raise Unsupported("FAISS keeps no payload: a score would live in a store of the caller's own")

    def close(self) -> None:
        if self.created:
            self.faiss.write_index(self.index, str(self.path))


class Usearch:
    """usearch ``Index(metric="ip")`` with its defaults (connectivity 16, expansion 128/64), saved to one
    file and loaded with ``Index.restore``. No payload: updates are not offered."""

    def __init__(self, work: Path, *, create: bool) -> None:
        from usearch.index import Index

        self.path, self.created = work / "index.usearch", create
        self.index = Index(ndim=DIM, metric="ip", dtype="f32") if create else Index.restore(str(self.path))

    def insert(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        self.index.add(ids, vecs)

    def finish(self) -> None:
        pass

    def search(self, i: int, vec: np.ndarray) -> Any:
        return self.index.search(vec, K).keys

    def ids(self, hit: Any) -> list[int]:
        return [int(x) for x in hit]

    def update(self, hit: Any, j: int) -> int:
        raise Unsupported("usearch stores vectors and keys only; no payload to update")

    def close(self) -> None:
        if self.created:
            self.index.save(str(self.path))


class Qdrant:
    """qdrant-client's local mode (``QdrantClient(path=...)``, in process, no server): dot product, a
    payload ``{"q", "text"}`` per point; updates through ``batch_update_points`` (one ``SetPayload`` per
    point, one call per feedback event)."""

    def __init__(self, work: Path, *, create: bool) -> None:
        from qdrant_client import QdrantClient, models

        self.m, self.client = models, QdrantClient(path=str(work / "qdrant"))
        if create:
            params = models.VectorParams(size=DIM, distance=models.Distance.DOT)
            self.client.create_collection("bench", vectors_config=params)

    def insert(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        payloads = [{"q": 0.0, "text": f"experience {i}"} for i in ids.tolist()]
        batch = self.m.Batch(ids=ids.tolist(), vectors=vecs.tolist(), payloads=payloads)
        self.client.upsert("bench", points=batch, wait=True)

    def finish(self) -> None:
        pass

    def search(self, i: int, vec: np.ndarray) -> Any:
        return self.client.query_points("bench", query=vec.tolist(), limit=K, with_payload=True).points

    def ids(self, hit: Any) -> list[int]:
        return [int(p.id) for p in hit]

    def update(self, hit: Any, j: int) -> int:
        m, points = self.m, [int(p.id) for p in hit[:UPDATE_ITEMS]]
        ops = [m.SetPayloadOperation(set_payload=m.SetPayload(payload={"q": reward(j)}, points=[p])) for p in points]
        self.client.batch_update_points("bench", update_operations=ops, wait=True)
        return len(points)

    def close(self) -> None:
        self.client.close()


class Lance:
    """LanceDB (embedded): a table ``id, vector, q, text``, an ``IVF_HNSW_SQ`` index on dot product built
    after the load; a search selects ``id, q, text`` (not the vector). Updates through
    ``merge_insert("id")`` of ``(id, q)`` rows: one call, one new table version per feedback event."""

    def __init__(self, work: Path, *, create: bool) -> None:
        import lancedb
        import pyarrow as pa

        self.pa, self.db = pa, lancedb.connect(str(work / "lance"))
        self.table: Any = None if create else self.db.open_table("bench")

    def insert(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        pa = self.pa
        rows = pa.table({
            "id": pa.array(ids, pa.int64()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1)), DIM),
            "q": pa.array(np.zeros(len(ids), np.float32)),
            "text": [f"experience {i}" for i in ids.tolist()],
        })  # fmt: skip
        if self.table is None:
            self.table = self.db.create_table("bench", rows)
        else:
            self.table.add(rows)

    def finish(self) -> None:
        from lancedb.index import IvfHnswSq

        self.table.create_index("vector", config=IvfHnswSq(distance_type="dot"))  # the column comes first here

    def search(self, i: int, vec: np.ndarray) -> Any:
        return self.table.search(vec).select(["id", "q", "text"]).limit(K).to_list()

    def ids(self, hit: Any) -> list[int]:
        return [int(r["id"]) for r in hit]

    def update(self, hit: Any, j: int) -> int:
        pa, ids = self.pa, [int(r["id"]) for r in hit[:UPDATE_ITEMS]]
        rows = pa.table({"id": pa.array(ids, pa.int64()), "q": pa.array([reward(j)] * len(ids), pa.float32())})
        self.table.merge_insert("id").when_matched_update_all().execute(rows)
        return len(ids)

    def close(self) -> None:
        pass  # LanceDB writes every call through; there is nothing to close


class Chroma:
    """Chroma's ``PersistentClient`` (embedded): an HNSW collection on inner product with its defaults,
    metadata ``{"q"}`` and a document per item; updates through ``collection.update(ids, metadatas)``."""

    def __init__(self, work: Path, *, create: bool) -> None:
        import chromadb

        self.client = chromadb.PersistentClient(path=str(work / "chroma"))
        if create:
            config: Any = {"hnsw": {"space": "ip"}}
            self.col = self.client.create_collection("bench-vectors", configuration=config, embedding_function=None)
        else:
            self.col = self.client.get_collection("bench-vectors", embedding_function=None)

    def insert(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        step = self.client.get_max_batch_size()
        for lo in range(0, len(ids), step):
            part = ids[lo : lo + step].tolist()
            self.col.add(
                ids=[str(i) for i in part], embeddings=vecs[lo : lo + step],
                metadatas=[{"q": 0.0} for _ in part], documents=[f"experience {i}" for i in part],
            )  # fmt: skip

    def finish(self) -> None:
        pass

    def search(self, i: int, vec: np.ndarray) -> Any:
        return self.col.query(query_embeddings=vec[None, :], n_results=K)

    def ids(self, hit: Any) -> list[int]:
        return [int(x) for x in hit["ids"][0]]

    def update(self, hit: Any, j: int) -> int:
        ids = hit["ids"][0][:UPDATE_ITEMS]
        self.col.update(ids=ids, metadatas=[{"q": reward(j)} for _ in ids])
        return len(ids)

    def close(self) -> None:
        pass  # Chroma has no close; its writes are durable when ``add`` returns


class SqliteVec:
    """sqlite-vec's ``vec0`` virtual table (brute force, L2: the same ranking as inner product on unit
    vectors) with a metadata column ``q`` and an auxiliary ``text``, in WAL mode with
    ``synchronous=NORMAL`` as Evolve's SQLite; updates with one ``UPDATE ... WHERE rowid`` per item, one
    commit per feedback event. Needs ``pysqlite3`` where Python's sqlite3 cannot load extensions."""

    def __init__(self, work: Path, *, create: bool) -> None:
        import sqlite_vec

        try:
            import pysqlite3 as sqlite3  # type: ignore[import-not-found]
        except ImportError:
            import sqlite3
        self.con = sqlite3.connect(str(work / "vec.db"))
        self.con.enable_load_extension(True)
        sqlite_vec.load(self.con)
        self.con.execute("PRAGMA journal_mode=WAL")
        self.con.execute("PRAGMA synchronous=NORMAL")
        if create:
            self.con.execute(f"CREATE VIRTUAL TABLE items USING vec0(embedding float[{DIM}], q float, +text text)")

    def insert(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        rows = [(int(i), v.tobytes(), 0.0, f"experience {i}") for i, v in zip(ids, vecs, strict=True)]
        self.con.executemany("INSERT INTO items(rowid, embedding, q, text) VALUES (?, ?, ?, ?)", rows)
        self.con.commit()

    def finish(self) -> None:
        pass

    def search(self, i: int, vec: np.ndarray) -> Any:
        sql = "SELECT rowid, distance, q, text FROM items WHERE embedding MATCH ? AND k = ?"
        return self.con.execute(sql, (vec.tobytes(), K)).fetchall()

    def ids(self, hit: Any) -> list[int]:
        return [int(r[0]) for r in hit]

    def update(self, hit: Any, j: int) -> int:
        rows = [(reward(j), int(r[0])) for r in hit[:UPDATE_ITEMS]]
        self.con.executemany("UPDATE items SET q = ? WHERE rowid = ?", rows)
        self.con.commit()
        return len(rows)

    def close(self) -> None:
        self.con.close()


class Evolve:
    """Evolve's full recall: ``MemoryStore.retrieve`` (phase A on the index, phase B on similarity and Q,
    the recall logged: ``record=True``) on SQLite, updates by ``reinforce`` (one call per recall, Q and
    visits of its selected items). Queries are served by ``LookupEmbedder``, so no model runs."""

    def __init__(self, work: Path, *, create: bool, kind: str, queries: np.ndarray | None) -> None:
        from bench.memory_speed_measure import LookupEmbedder
        from memory.config import MemoryConfig, RetrievalConfig
        from memory.store import MemoryStore

        embedder = LookupEmbedder(DIM)
        if queries is not None:
            embedder.vectors.update((f"query {i}", v) for i, v in enumerate(queries))
        cfg = MemoryConfig(index=kind, retrieval=RetrievalConfig(k1=K, k2=UPDATE_ITEMS))  # type: ignore[arg-type]
        self.store = MemoryStore(f"sqlite:///{work / 'evolve.db'}", embedder=embedder, config=cfg, seed=0)
        self.rows: dict[str, int] = {}

    def insert(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        rows = [(f"row {i}", f"experience {i}") for i in ids.tolist()]
        self.store.add_many(rows, embeddings=vecs, group=False)

    def finish(self) -> None:
        self.store.wait_for_index()  # index="auto" builds its graph in the background: count it as insert time

    def search(self, i: int, vec: np.ndarray) -> Any:
        return self.store.retrieve(f"query {i}")

    def ids(self, hit: Any) -> list[int]:
        """Phase A's k1 candidates, from the recall log (``explain``), mapped back to row numbers."""
        out = []
        for c in self.store.explain(hit.id)["candidates"]:
            if c["id"] not in self.rows:
                self.rows[c["id"]] = int(self.store.get(c["id"]).intent.split()[1])
            out.append(self.rows[c["id"]])
        return out

    def update(self, hit: Any, j: int) -> int:
        return self.store.reinforce(hit, reward(j), feedback_id=f"peers-feedback-{j}")

    def search_no_log(self, i: int) -> Any:
        """The same recall without logging it (``record=False``), to show what the log costs."""
        return self.store.retrieve(f"query {i}", record=False)

    def close(self) -> None:
        self.store.close()


def reward(j: int) -> float:
    return 1.0 if j % 2 else 0.0


CLASSES: dict[str, type] = {
    "faiss-flat": Faiss, "faiss-hnsw": Faiss, "usearch": Usearch, "qdrant": Qdrant, "lancedb": Lance,
    "chroma": Chroma, "sqlite-vec": SqliteVec, **dict.fromkeys(EVOLVE_MODES, Evolve),
}  # fmt: skip
KINDS = {"faiss-flat": "flat", "faiss-hnsw": "hnsw", **EVOLVE_MODES}
SYSTEMS = tuple(CLASSES)


def open_system(name: str, work: Path, *, create: bool, queries: np.ndarray | None = None) -> System:
    """``name``'s store in ``work``: made empty (``create``) or reopened; Evolve's embedder serves ``queries``."""
    if name not in CLASSES:
        raise ValueError(f"unknown system {name!r}; expected one of {sorted(CLASSES)}")
    kwargs: dict[str, Any] = {"kind": KINDS[name]} if name in KINDS else {}
    if CLASSES[name] is Evolve:
        kwargs["queries"] = queries
    system: System = CLASSES[name](work, create=create, **kwargs)
    return system


MODULES: dict[str, tuple[str, ...]] = {
    "faiss-flat": ("faiss",), "faiss-hnsw": ("faiss",), "usearch": ("usearch.index",),
    "qdrant": ("qdrant_client",), "lancedb": ("lancedb", "lancedb.index", "pyarrow"), "chroma": ("chromadb",),
    "sqlite-vec": ("sqlite_vec",),
    **{name: ("memory.store", "memory.config", "bench.memory_speed_measure") for name in EVOLVE_MODES},
}  # fmt: skip


DISTRIBUTIONS = {
    "faiss-flat": "faiss-cpu", "faiss-hnsw": "faiss-cpu", "usearch": "usearch", "qdrant": "qdrant-client",
    "lancedb": "lancedb", "chroma": "chromadb", "sqlite-vec": "sqlite-vec",
}  # fmt: skip


def version(name: str) -> str | None:
    """The installed version of the package behind ``name`` (None for Evolve, which is this project)."""
    from importlib import metadata

    dist = DISTRIBUTIONS.get(name)
    return metadata.version(dist) if dist else None


def preload(name: str) -> None:
    """Import what ``name`` needs, so that a timed reopen or insert does not count Python's imports."""
    for module in MODULES[name]:
        importlib.import_module(module)
