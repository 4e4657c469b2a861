"""The memory-speed measurements at one store size (``bench.memory_speed`` runs them for each size).

Items are ``DIM``-d unit vectors clustered by topic (``clustered``), added with precomputed embeddings;
queries are noisy copies of stored vectors served by ``LookupEmbedder``, so no model runs and the numbers
measure the store alone. ``bench_size`` times two-phase retrieval next to a raw FAISS search on the
store's own index and a brute-force Python scan (the reference recall), add, grouped add, reinforce,
close and reopen, bytes per item, an ``ivf`` store, and the flat, HNSW and IVF index kinds with their
recall@10. ``PROFILES`` says which sizes and kinds each profile measures.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from connectors.errors import ConfigError
from connectors.install import extra_hint
from memory.config import MemoryConfig, RetrievalConfig
from memory.learn.rewards import Reinforcement
from memory.mirror.backend import load_faiss
from memory.mirror.index import VectorIndex
from memory.mirror.sync import index_file
from memory.recall.scoring import select
from memory.storage.records import Recall
from memory.store import MemoryStore

DIM = 384
ADD_BATCH = 10_000
GROUPED_BATCH = 1000
REINFORCE_BATCH = 100


class LookupEmbedder:
    """Serves precomputed query vectors by text, so the benchmark times the store and not a model."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.name = f"bench-lookup-{dim}"
        self.vectors: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        try:
            return np.stack([self.vectors[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)
        except KeyError as e:
            raise ConfigError(f"LookupEmbedder has no vector for {e}") from e


@dataclass(frozen=True)
class Timings:
    """Per-call latencies in seconds."""

    values: np.ndarray

    def summary(self) -> dict[str, float]:
        v = self.values
        return {
            "p50_ms": float(np.percentile(v, 50) * 1e3),
            "p95_ms": float(np.percentile(v, 95) * 1e3),
            "mean_ms": float(v.mean() * 1e3),
            "qps": float(len(v) / v.sum()),
        }


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def timed(fn: Callable[[int], Any], n: int, label: str) -> Timings:
    out = np.empty(n)
    for i in tqdm(range(n), desc=label, leave=False):
        start = time.perf_counter()
        fn(i)
        out[i] = time.perf_counter() - start
    return Timings(out)


@dataclass(frozen=True, kw_only=True)
class Profile:
    """What one profile measures: store sizes, timed queries, brute-force queries and which sizes
    compare index kinds (HNSW takes minutes to build a million-vector graph on two cores)."""

    sizes: tuple[int, ...]
    queries: int
    brute_queries: int
    kinds: dict[str, tuple[int, ...]] = field(default_factory=dict)
    ivf_store: tuple[int, ...] = ()

    def queries_for(self, n: int) -> int:
        return self.queries if n <= 100_000 else max(50, self.queries // 4)


PROFILES = {
    "quick": Profile(
        sizes=(10_000, 100_000, 1_000_000),
        queries=200,
        brute_queries=10,
        kinds={"hnsw": (10_000, 100_000), "ivf": (100_000, 1_000_000)},
        ivf_store=(100_000,),
    ),
    "full": Profile(
        sizes=(10_000, 100_000, 1_000_000),
        queries=1000,
        brute_queries=30,
        kinds={"hnsw": (10_000, 100_000, 1_000_000), "ivf": (100_000, 1_000_000)},
        ivf_store=(100_000, 1_000_000),
    ),
}


def clustered(n: int, rng: np.random.Generator, *, chunk: int = 100_000) -> np.ndarray:
    """``n`` unit vectors around ``n // 100`` topic centres (cosine about 0.7 to their centre), built in
    chunks so a million rows never need a float64 copy. Stored memories cluster by topic as real
    task embeddings do; uniform random vectors would make every approximate index look bad."""
    centres = unit(rng.standard_normal((max(16, n // 100), DIM)))
    out = np.empty((n, DIM), dtype=np.float32)
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        noise = rng.standard_normal((hi - lo, DIM), dtype=np.float32) / np.float32(np.sqrt(DIM))
        out[lo:hi] = unit(centres[rng.integers(0, len(centres), hi - lo)] + noise)
    return out


Extra = Callable[[np.ndarray, np.ndarray, Path, int], dict[str, Any]]
"""A further measurement on a size's vectors and queries: ``(vectors, query vectors, workdir, seed)``."""


def workload(n: int, queries: int, seed: int) -> tuple[np.random.Generator, np.ndarray, np.ndarray, np.ndarray]:
    """The store's ``n`` clustered vectors and ``queries`` noisy copies of some (``targets``), from ``seed``;
    the generator goes on from there (every bench of this seed sees the same vectors and queries)."""
    rng = np.random.default_rng(seed)
    vecs = clustered(n, rng)
    targets = rng.integers(0, n, queries)
    return rng, vecs, targets, unit(vecs[targets] + rng.normal(scale=0.03, size=(queries, DIM)))


def bench_size(
    n: int, *, profile: Profile, workdir: Path, seed: int, extras: Mapping[str, Extra] | None = None
) -> dict[str, Any]:
    """Every measurement for one store size; the store lives in ``workdir``. ``extras`` run on the same
    vectors and queries and land under their names (``bench.memory_speed`` adds the default index's)."""
    rng, vecs, targets, query_vecs = workload(n, profile.queries_for(n), seed)
    queries = len(targets)
    embedder = LookupEmbedder(DIM)
    texts = [f"query {i}" for i in range(queries)]
    embedder.vectors.update(zip(texts, query_vecs, strict=True))
    url = f"sqlite:///{workdir / 'bench.db'}"
    cfg = MemoryConfig(index="flat", retrieval=RetrievalConfig(k1=10, k2=5))  # the exact baseline; "adaptive" below
    out: dict[str, Any] = {"items": n, "queries": queries}

    store = MemoryStore(url, embedder=embedder, config=cfg, seed=seed)
    out["add"] = add_throughput(store, vecs, n)

    numbers, logged = retrieval_numbers(store, texts, query_vecs, cfg.retrieval, n)
    out.update(numbers)
    out["recall_at_1"] = float(
        np.mean([r.items[0].intent == f"intent {t}" for r, t in zip(logged, targets, strict=True)])
    )
    out["brute_force"] = brute_force(vecs, store, query_vecs[: profile.brute_queries], cfg.retrieval, logged)
    out["speedup_vs_brute_force"] = out["brute_force"]["p50_ms"] / out["retrieve"]["p50_ms"]
    out["reinforce"] = reinforce_throughput(store, logged)
    out["grouped_add"] = grouped_add(store, rng, n)

    before = store.retrieve(texts[0], record=False).ids
    start = time.perf_counter()
    store.close()
    out["close_s"] = time.perf_counter() - start
    start = time.perf_counter()
    again = MemoryStore(url, embedder=embedder, config=cfg, seed=seed)
    same = again.retrieve(texts[0], record=False).ids == before
    out["reopen_s"] = time.perf_counter() - start
    out["reopen_index"] = again.index_status()
    out["reopen_same_recall"] = same
    out["stored_items"] = again.stats()["count"]  # n and the grouped add's
    again.close()

    db = workdir / "bench.db"
    out["index_file"] = index_file(Path(str(db) + ".faiss"), "default").name
    out["bytes_per_item"] = {part: size / out["stored_items"] for part, size in stored_bytes(db).items()}
    if n in profile.ivf_store:
        out["ivf_store"] = ivf_store(vecs, texts, targets, embedder, workdir / "ivf.db", seed=seed)
        out["ivf_store"]["speedup_vs_brute_force"] = out["brute_force"]["p50_ms"] / out["ivf_store"]["p50_ms"]
    for name, extra in (extras or {}).items():
        out[name] = extra(vecs, query_vecs, workdir, seed)
    kinds = ["flat"] + [k for k, sizes in profile.kinds.items() if n in sizes]
    out["index_kinds"] = index_kinds(vecs, query_vecs, kinds, k=cfg.retrieval.k1)
    return out


def stored_bytes(db: Path) -> dict[str, int]:
    """The sizes (``st_size``, as ``bench.peers`` counts) of what a closed store keeps: the SQLite file with
    any -wal and -shm beside it, the vector index files and the mirror snapshots (``memory.mirror.snapshot``,
    whose room to grow is a hole that takes no disk but counts here), each with its JSON sidecar."""
    out = {"database": 0, "index": 0, "mirror": 0}
    for p in db.parent.glob(db.name + "*"):
        if p.is_file():
            out["database"] += p.stat().st_size
    for p in Path(str(db) + ".faiss").glob("*"):
        out["mirror" if ".mirror" in p.suffixes else "index"] += p.stat().st_size
    return out


def ivf_store(
    vecs: np.ndarray, texts: list[str], targets: np.ndarray, embedder: LookupEmbedder, db: Path, *, seed: int
) -> dict[str, Any]:
    """The same items in a store with ``index="ivf"``: retrieve latency next to its own raw index
    search, recall@1, and grouped add (intents grouped through the index, not against every key)."""
    cfg = MemoryConfig(index="ivf", retrieval=RetrievalConfig(k1=10, k2=5))
    store = MemoryStore(f"sqlite:///{db}", embedder=embedder, config=cfg, seed=seed)
    try:
        add_throughput(store, vecs, len(vecs))
        for text in texts[:20]:
            store.retrieve(text, record=False)
        logged: list[Recall] = []
        t = timed(lambda i: logged.append(store.retrieve(texts[i])), len(texts), f"retrieve ivf {len(vecs):,}")
        index = store._mirrors.loaded("default").index  # type: ignore[union-attr]
        queries = embedder.embed(texts)
        raw, _ = search_each(index, queries, cfg.retrieval.k1, f"ivf search {len(vecs):,}")
        hits = [r.items[0].intent == f"intent {t}" for r, t in zip(logged, targets, strict=True)]
        grouped = grouped_add(store, np.random.default_rng(seed + 1), len(vecs))
    finally:
        store.close()
    return {
        **t.summary(),
        "index_search_p50_ms": raw.summary()["p50_ms"],
        "ratio_vs_index": t.summary()["p50_ms"] / raw.summary()["p50_ms"],
        "recall_at_1": float(np.mean(hits)),
        "lists": index.trained_lists,
        "grouped_add_items_per_s": grouped["items_per_s"],
    }


def add_throughput(store: MemoryStore, vecs: np.ndarray, n: int) -> dict[str, Any]:
    """The bulk load: ``add_many`` with precomputed embeddings in batches of ``ADD_BATCH``, each row its
    own intent (``group=False``: distinct tasks, no comparison with existing keys)."""
    start = time.perf_counter()
    for lo in tqdm(range(0, n, ADD_BATCH), desc=f"add {n:,}", leave=False):
        hi = min(lo + ADD_BATCH, n)
        store.add_many([(f"intent {i}", f"experience {i}") for i in range(lo, hi)], embeddings=vecs[lo:hi], group=False)
    return {"items_per_s": n / (time.perf_counter() - start), "batch": ADD_BATCH, "grouping": False}


def grouped_add(store: MemoryStore, rng: np.random.Generator, n: int) -> dict[str, Any]:
    """``add_many`` of new items with intent grouping on (the default): with a flat index each new
    intent is compared with every key of the namespace, so the rate falls as the store grows."""
    m = GROUPED_BATCH
    vecs = clustered(m, rng)
    start = time.perf_counter()
    store.add_many([(f"new intent {i}", "new experience") for i in range(m)], embeddings=vecs)
    return {"items_per_s": m / (time.perf_counter() - start), "batch": m, "store_items": n}


def brute_force(
    vecs: np.ndarray, store: MemoryStore, queries: np.ndarray, cfg: RetrievalConfig, logged: list[Recall]
) -> dict[str, Any]:
    """The reference recall: a Python loop over every memory computing its cosine, the k1 best above δ
    kept, then the same phase B. Checked to choose what the store chose for the same queries."""
    q_values = store._mirrors.loaded("default").q  # type: ignore[union-attr]
    memories = [(i, vecs[i], float(q_values[i])) for i in range(len(vecs))]
    rng = np.random.default_rng(0)
    chosen: list[list[int]] = []

    def recall(j: int) -> None:
        query = queries[j]
        scored = [(float(vec @ query), q, i) for i, vec, q in memories]
        pool = heapq.nlargest(cfg.k1, (s for s in scored if s[0] > cfg.delta))
        sims = np.array([s[0] for s in pool])
        pick = select(sims, np.array([s[1] for s in pool]), cfg, rng).order
        chosen.append([pool[int(p)][2] for p in pick])

    t = timed(recall, len(queries), f"brute force {len(vecs):,}")
    agree = np.mean([
        {f"intent {i}" for i in c} == {it.intent for it in r.items} for c, r in zip(chosen, logged, strict=False)
    ])  # fmt: skip
    return {**t.summary(), "queries": len(queries), "same_choice": float(agree)}


def index_kinds(vecs: np.ndarray, queries: np.ndarray, kinds: Sequence[str], *, k: int) -> dict[str, Any]:
    """Each index kind built on the same vectors: build time, one-query search latency and recall@k
    against the exact (flat) answer."""
    ids = np.arange(len(vecs), dtype=np.int64)
    out: dict[str, Any] = {}
    exact: np.ndarray | None = None
    for kind in kinds:
        index = VectorIndex(DIM, kind=kind)
        start = time.perf_counter()
        for lo in tqdm(range(0, len(vecs), 100_000), desc=f"build {kind} {len(vecs):,}", leave=False):
            index.add(ids[lo : lo + 100_000], vecs[lo : lo + 100_000], expect=len(vecs))
        build_s = time.perf_counter() - start
        t, found = search_each(index, queries, k, f"search {kind} {len(vecs):,}")
        exact = found if exact is None else exact
        hits = [len(set(f.tolist()) & set(e.tolist())) / k for f, e in zip(found, exact, strict=True)]
        out[kind] = {"build_s": build_s, **t.summary(), f"recall_at_{k}": float(np.mean(hits))}
        if kind == "ivf":
            out[kind]["lists"] = index.trained_lists
        del index
    return out


def retrieval_numbers(
    store: MemoryStore, texts: list[str], query_vecs: np.ndarray, cfg: RetrievalConfig, n: int
) -> tuple[dict[str, Any], list[Recall]]:
    """Latency of ``retrieve`` (logged and not), ``retrieve_many``, raw FAISS and phase B alone."""
    for i in range(min(20, len(texts))):  # warm-up: first-touch allocations, SQLite page cache
        store.retrieve(texts[i], record=False)
    logged: list[Recall] = []
    t_store = timed(lambda i: logged.append(store.retrieve(texts[i])), len(texts), f"retrieve {n:,}")
    t_nolog = timed(lambda i: store.retrieve(texts[i], record=False), len(texts), f"retrieve (no log) {n:,}")
    index = store._mirrors.loaded("default").index  # type: ignore[union-attr]
    t_faiss, t_faiss_omp = raw_faiss(index.raw, query_vecs, cfg.k1, f"faiss {n:,}")
    rng = np.random.default_rng(0)
    pool_sims, pool_q = np.sort(rng.uniform(0, 1, 10))[::-1], rng.normal(size=10)
    t_phase_b = timed(lambda i: select(pool_sims, pool_q, cfg, rng), 2000, "phase B")
    start = time.perf_counter()
    store.retrieve_many(texts)
    batch_s = time.perf_counter() - start
    out: dict[str, Any] = {
        "retrieve": t_store.summary(),
        "retrieve_no_log": t_nolog.summary(),
        "retrieve_many_qps": len(texts) / batch_s,
        "faiss_search": t_faiss.summary(),
        "faiss_search_all_threads": t_faiss_omp.summary(),
        "phase_b_us": float(np.percentile(t_phase_b.values, 50) * 1e6),
    }
    out["ratio_vs_faiss"] = out["retrieve"]["p50_ms"] / out["faiss_search"]["p50_ms"]
    return out, logged


def raw_faiss(raw: Any, queries: np.ndarray, k: int, label: str) -> tuple[Timings, Timings]:
    """FAISS's own ``search`` for one query at a time: single-threaded (what the store does for a few
    queries) and with every OpenMP thread (FAISS's default)."""
    faiss = load_faiss()
    assert faiss is not None, f"the benchmark needs faiss ({extra_hint('local')})"
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        single = timed(lambda i: raw.search(queries[i : i + 1], k), len(queries), label)
    finally:
        faiss.omp_set_num_threads(threads)
    return single, timed(lambda i: raw.search(queries[i : i + 1], k), len(queries), label + f" ({threads} threads)")


def reinforce_throughput(store: MemoryStore, recalls: list[Recall]) -> dict[str, float]:
    """Updates per second: one ``reinforce`` per call, and ``reinforce_many`` in batches."""
    k = sum(len(r) for r in recalls) / max(len(recalls), 1)
    single = recalls[: min(200, len(recalls))]
    start = time.perf_counter()
    for i, r in enumerate(tqdm(single, desc="reinforce", leave=False)):
        store.reinforce(r, 1.0, feedback_id=f"single-{i}")
    single_s = time.perf_counter() - start
    batched = [Reinforcement(r, 1.0, f"batch-{i}") for i, r in enumerate(recalls)]
    start = time.perf_counter()
    for lo in tqdm(range(0, len(batched), REINFORCE_BATCH), desc="reinforce_many", leave=False):
        store.reinforce_many(batched[lo : lo + REINFORCE_BATCH])
    batch_s = time.perf_counter() - start
    return {
        "single_calls_per_s": len(single) / single_s,
        "single_updates_per_s": len(single) * k / single_s,
        "batched_updates_per_s": len(batched) * k / batch_s,
        "batch_recalls": REINFORCE_BATCH,
        "items_per_recall": k,
    }


def search_each(index: VectorIndex, queries: np.ndarray, k: int, label: str) -> tuple[Timings, np.ndarray]:
    """One timed search per query; the timings and the ids found (one row per query)."""
    found: list[np.ndarray] = []
    t = timed(lambda i: found.append(index.search(queries[i : i + 1], k)[1][0]), len(queries), label)
    return t, np.stack(found)
