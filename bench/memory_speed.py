"""How fast is the memory store? Two-phase retrieval next to a raw FAISS search on the same index,
plus add, reinforce and reopen throughput, and bytes per item.

Run ``python -m bench.memory_speed [--sizes 10000 100000] [--queries 300]``. Items are 384-d random
unit vectors added with precomputed embeddings; queries are noisy copies of stored vectors served by
a lookup embedder, so no model runs and the numbers measure the store alone. Results go to
``bench/results/memory_speed.{json,md}`` and headline numbers are merged into
``bench/results/summary.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from bench.common import machine, merge_summary
from connectors.errors import ConfigError
from memory.config import MemoryConfig, RetrievalConfig
from memory.index import load_faiss
from memory.records import Recall
from memory.scoring import select
from memory.store import MemoryStore
from memory.sync import index_file

RESULTS = Path(__file__).parent / "results"
DIM = 384
ADD_BATCH = 1000
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


def bench_size(n: int, *, queries: int, workdir: Path, seed: int) -> dict[str, Any]:
    """Every measurement for one store size; the store lives in ``workdir``."""
    rng = np.random.default_rng(seed)
    vecs = unit(rng.standard_normal((n, DIM)))
    embedder = LookupEmbedder(DIM)
    targets = rng.integers(0, n, queries)
    query_vecs = unit(vecs[targets] + rng.normal(scale=0.03, size=(queries, DIM)))
    texts = [f"query {i}" for i in range(queries)]
    embedder.vectors.update(zip(texts, query_vecs, strict=True))
    url = f"sqlite:///{workdir / 'bench.db'}"
    cfg = MemoryConfig(retrieval=RetrievalConfig(k1=10, k2=5))
    out: dict[str, Any] = {"items": n}

    store = MemoryStore(url, embedder=embedder, config=cfg, seed=seed)
    start = time.perf_counter()
    for lo in tqdm(range(0, n, ADD_BATCH), desc=f"add {n:,}", leave=False):
        hi = min(lo + ADD_BATCH, n)
        store.add_many([(f"intent {i}", f"experience {i}") for i in range(lo, hi)], embeddings=vecs[lo:hi])
    out["add"] = {"items_per_s": n / (time.perf_counter() - start), "batch": ADD_BATCH, "grouping": True}

    numbers, logged = retrieval_numbers(store, texts, query_vecs, cfg.retrieval, n)
    out.update(numbers)
    out["recall_at_1"] = float(
        np.mean([r.items[0].intent == f"intent {t}" for r, t in zip(logged, targets, strict=True)])
    )
    out["reinforce"] = reinforce_throughput(store, logged)

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
    again.close()

    db = workdir / "bench.db"
    db_bytes = sum(p.stat().st_size for p in workdir.glob("bench.db*") if p.is_file())
    index_bytes = sum(p.stat().st_size for p in (workdir / "bench.db.faiss").glob("*"))
    out["bytes_per_item"] = {"database": db_bytes / n, "index": index_bytes / n}
    out["index_file"] = index_file(Path(str(db) + ".faiss"), "default").name
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
    out = {
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
    assert faiss is not None, "the benchmark needs faiss (pip install 'evolve[local]')"
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
    batched = [(r, 1.0, f"batch-{i}") for i, r in enumerate(recalls)]
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


def headline(results: dict[str, Any]) -> dict[str, Any]:
    """Flat numbers for summary.json, keyed by size (``_10k``, ``_100k``)."""
    flat: dict[str, Any] = {}
    for n, r in results["sizes"].items():
        tag = f"{int(n) // 1000}k"
        flat[f"retrieval_p50_ms_{tag}"] = round(r["retrieve"]["p50_ms"], 3)
        flat[f"retrieval_p95_ms_{tag}"] = round(r["retrieve"]["p95_ms"], 3)
        flat[f"retrieval_qps_{tag}"] = round(r["retrieve"]["qps"], 1)
        flat[f"faiss_p50_ms_{tag}"] = round(r["faiss_search"]["p50_ms"], 3)
        flat[f"retrieval_ratio_vs_faiss_{tag}"] = round(r["ratio_vs_faiss"], 2)
        flat[f"reopen_s_{tag}"] = round(r["reopen_s"], 3)
        flat[f"bytes_per_item_{tag}"] = round(r["bytes_per_item"]["database"] + r["bytes_per_item"]["index"])
    largest = results["sizes"][max(results["sizes"], key=int)]
    flat["add_items_per_s"] = round(largest["add"]["items_per_s"])
    flat["reinforce_updates_per_s"] = round(largest["reinforce"]["batched_updates_per_s"])
    flat["reinforce_single_updates_per_s"] = round(largest["reinforce"]["single_updates_per_s"])
    flat["phase_b_us"] = round(largest["phase_b_us"], 1)
    return flat


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# Memory store speed",
        "",
        f"Machine: {m['cpu_count']} CPUs ({m['cpu']}), Python {m['python']}, numpy {m['numpy']}, "
        f"faiss {m['faiss']}, SQLAlchemy {m['sqlalchemy']}; {m['platform']}; load average at start "
        f"{m['load_average_at_start']} (other work on the machine makes absolute numbers noisy).",
        f"Setup: {DIM}-d random unit vectors, k1 = 10, k2 = 5, flat index, SQLite file (WAL); "
        f"{results['queries']} queries (noisy copies of stored vectors). Run `python -m bench.memory_speed`.",
        "",
        "| items | retrieve p50 / p95 ms | QPS | no-log p50 ms | raw FAISS p50 ms | ratio | retrieve_many QPS "
        "| FAISS all threads p50 ms | recall@1 | add items/s | reinforce updates/s (batched / single) | reopen s "
        "| bytes/item (db + index) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, r in results["sizes"].items():
        rf, b = r["reinforce"], r["bytes_per_item"]
        lines.append(
            f"| {int(n):,} | {r['retrieve']['p50_ms']:.2f} / {r['retrieve']['p95_ms']:.2f} | {r['retrieve']['qps']:.0f} "
            f"| {r['retrieve_no_log']['p50_ms']:.2f} | {r['faiss_search']['p50_ms']:.2f} | {r['ratio_vs_faiss']:.2f} "
            f"| {r['retrieve_many_qps']:.0f} | {r['faiss_search_all_threads']['p50_ms']:.2f} "
            f"| {r['recall_at_1']:.3f} | {r['add']['items_per_s']:,.0f} "
            f"| {rf['batched_updates_per_s']:,.0f} / {rf['single_updates_per_s']:,.0f} | {r['reopen_s']:.2f} "
            f"({r['reopen_index']}) | {b['database']:,.0f} + {b['index']:,.0f} |"
        )
    lines += [
        "",
        "- *retrieve* is the whole call: embed lookup, generation check, index search, exact phase A, phase B, "
        "reading the chosen rows and logging the recall (one SQLite write). *no-log* skips the log.",
        "- *raw FAISS* is `index.search(q, k1)` on the store's own index, in the same process, single-threaded as the "
        "store runs single queries; *FAISS all threads* is the same call with FAISS's default OpenMP threads, which on "
        "a busy machine is far slower for one query (thread barriers).",
        f"- phase B alone (z-scores and ranking of a 10-item pool): {results['phase_b_us']:.1f} µs.",
        "- *add* is `add_many` in batches of 1,000 with intent grouping on (each new intent is compared with every "
        "existing key, so the cost grows with the store).",
        "- *reopen* is opening the store and answering one query: the namespace's rows are read from SQL and the saved "
        "index file is loaded.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="store sizes to measure")
    parser.add_argument("--queries", type=int, default=300, help="timed queries per size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results are written")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"machine": machine(), "queries": args.queries, "sizes": {}}
    for n in args.sizes:
        workdir = Path(tempfile.mkdtemp(prefix=f"evolve-bench-{n}-"))
        try:
            results["sizes"][str(n)] = bench_size(n, queries=args.queries, workdir=workdir, seed=args.seed)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        print(f"{n:>8,} items: retrieve p50 {results['sizes'][str(n)]['retrieve']['p50_ms']:.2f} ms")
    results["phase_b_us"] = results["sizes"][str(args.sizes[-1])]["phase_b_us"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory_speed.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (args.out / "memory_speed.md").write_text(markdown(results), encoding="utf-8")
    merge_summary(args.out / "summary.json", headline(results))
    return results


if __name__ == "__main__":
    main()
