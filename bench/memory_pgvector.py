"""The memory store on PostgreSQL + pgvector: the default index's figures with phase A in the database.

Run ``python -m bench.memory_pgvector --sizes 100000 1000000 [--queries 1000] [--url URL] [--sqlite]
[--durable] [--index-after-load] [--out DIR]``. Without ``--url`` it starts the PostgreSQL + pgvector test server of
``tests/support/postgres.py`` in a temporary folder (durability off unless ``--durable``); with it, it
uses that server (the URL of any database there; the user must be allowed to create databases). Each
size gets a fresh database and a ``MemoryStore`` with the default config, so ``index="pgvector"``: the
HNSW index lives in the database and is created with the schema, before the first row, so the bulk
load inserts every row into the graph as it goes (pgvector's per-row insert, in the load's
transactions: 283 rows/s at 100k, more than an hour for a million). ``--index-after-load`` loads the rows as a
store with an in-process index does (``index="flat"``: no HNSW index in the database), then opens the default
store, which builds the HNSW index over them in one ``CREATE INDEX`` (timed, with ``maintenance_work_mem``
``BUILD_MEMORY`` and two parallel workers for that database): what an operator importing a large store
would do. The measurements are ``bench.memory_speed_adaptive``'s, on the same clustered vectors and
noisy-copy queries: bulk add, recall@10 of the whole recall against an exact search, recall p50/p95
next to the index's own search in the database, one ``reinforce``, one ``write`` (grouping on), a
grouped ``add_many``, reopen + first answer in a fresh process (imports excluded) with that process's
peak RSS, database bytes per item, and the server's memory (its processes' RSS and PSS, sampled each
second; readable when the server runs on this machine). ``--sqlite`` runs ``adaptive_store`` on the same
vectors in a SQLite file beside it (the in-process index), for a same-run comparison.

Results: ``bench/results/memory_pgvector.{json,md}``; ``pgvector_*_{100k,1m}`` keys are merged into
``bench/results/summary.json``. A size measured before and not now stays as it was (each says when), so sizes can
be run apart.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import psutil
from sqlalchemy import make_url, text

from bench.common import machine, merge_summary
from bench.memory_pgvector_report import BUILD_MEMORY, headline, markdown
from bench.memory_speed_adaptive import REOPEN, ROOT, SETTLE_TIMEOUT_S, earlier_sizes, recall_at_10, serving
from bench.memory_speed_measure import DIM, LookupEmbedder, add_throughput, clustered, unit
from connectors.errors import ConfigError
from memory.config import MemoryConfig, RetrievalConfig
from memory.mirror.pgvector import HNSW_INDEX
from memory.store import MemoryStore
from tests.support.postgres import (
    admin_engine,
    create_database,
    drop_database,
    run_outside_transactions,
    start_postgres,
    stop_postgres,
)

RESULTS = Path(__file__).parent / "results"
SAMPLE_EVERY_S = 1.0


class BatchClock:
    """Stands in for the store in ``add_throughput`` and records each ``add_many`` batch's seconds, so
    the page can show how the insert rate falls as the HNSW graph grows."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.seconds: list[float] = []

    def add_many(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.store.add_many(*args, **kwargs)
        finally:
            self.seconds.append(time.perf_counter() - start)


class ServerMemory:
    """The PostgreSQL server's memory (postmaster and every backend): RSS summed over its processes
    (counts shared buffers once per process that touched them) and PSS (shared pages split between
    processes: the server's real share), sampled every ``SAMPLE_EVERY_S`` in a thread; peaks kept."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.peak = {"rss_mb": 0.0, "pss_mb": 0.0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> dict[str, float] | None:
        if self.pid is None:
            return None
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        rss = pss = 0
        for p in procs:
            try:
                info = p.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            rss, pss = rss + info.rss, pss + getattr(info, "pss", 0)
        now = {"rss_mb": rss / 2**20, "pss_mb": pss / 2**20, "processes": float(len(procs))}
        for key in self.peak:
            self.peak[key] = max(self.peak[key], now[key])
        return now

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            self.sample()

    def __enter__(self) -> ServerMemory:
        if self.pid is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000], help="store sizes (default: 100000)")
    parser.add_argument("--queries", type=int, default=1000, help="timed queries per size (default: 1000)")
    parser.add_argument("--url", help="a PostgreSQL + pgvector server to use (default: start the test server)")
    parser.add_argument("--durable", action="store_true", help="the started server keeps fsync etc. on")
    parser.add_argument("--sqlite", action="store_true", help="also measure the same vectors in a SQLite store")
    parser.add_argument(
        "--index-after-load", action="store_true", help="load without the HNSW index, then build it in one statement"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results are written")
    args = parser.parse_args(argv)
    if min(args.sizes) < 1000 or args.queries < 1:
        raise ConfigError(f"sizes must be >= 1000 and queries >= 1, got {args.sizes} and {args.queries}")
    results: dict[str, Any] = {"machine": machine(), "sizes": earlier_sizes(args.out / "memory_pgvector.json")}
    with server(args.url, durable=args.durable) as url:
        results["server"] = server_settings(url)
        for n in args.sizes:
            workdir = Path(tempfile.mkdtemp(prefix=f"evolve-pgbench-{n}-"))
            try:
                results["sizes"][str(n)] = r = bench_size(
                    n, url, queries=args.queries, workdir=workdir, seed=args.seed, sqlite=args.sqlite,
                    index_after_load=args.index_after_load,
                )  # fmt: skip
                r["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
            print(
                f"{n:>9,} items on PostgreSQL: add {r['add']['items_per_s']:,.0f}/s, recall@10 {r['recall_at_10']:.3f}, "
                f"recall p50 {r['retrieve']['p50_ms']:.2f} ms, write p50 {r['write']['p50_ms']:.2f} ms, "
                f"reopen {r['reopen']['reopen_s']:.2f} s",
                flush=True,
            )
    results["sizes"] = dict(sorted(results["sizes"].items(), key=lambda kv: int(kv[0])))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory_pgvector.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (args.out / "memory_pgvector.md").write_text(markdown(results), encoding="utf-8")
    merge_summary(args.out / "summary.json", headline(results))
    return results


@contextmanager
def server(url: str | None, *, durable: bool) -> Iterator[str]:
    """``url`` as it is, or the test server started in a temporary folder (stopped and removed after)."""
    if url is not None:
        yield url
        return
    folder = Path(tempfile.mkdtemp(prefix="evolve-pg-"))
    try:
        yield start_postgres(folder / "data", durable=durable)
    finally:
        stop_postgres(folder / "data")
        shutil.rmtree(folder, ignore_errors=True)


def server_settings(url: str) -> dict[str, Any]:
    """The server's version, pgvector's and the settings that bear on the figures."""
    engine = admin_engine(url)
    try:
        with engine.connect() as conn:
            out: dict[str, Any] = {"version": conn.exec_driver_sql("SHOW server_version").scalar()}
            for name in ("shared_buffers", "maintenance_work_mem", "work_mem", "fsync", "synchronous_commit"):
                out[name] = conn.exec_driver_sql(f"SHOW {name}").scalar()
            out["pgvector"] = conn.exec_driver_sql(
                "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
            ).scalar()
            out["data_directory"] = conn.exec_driver_sql("SHOW data_directory").scalar()
    finally:
        engine.dispose()
    return out


def postmaster_pid(data_directory: str) -> int | None:
    """The server's main process, from ``postmaster.pid`` (None when it is not on this machine/readable)."""
    try:
        pid = int((Path(data_directory) / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if psutil.pid_exists(pid) else None


def bench_size(
    n: int, admin_url: str, *, queries: int, workdir: Path, seed: int, sqlite: bool, index_after_load: bool = False
) -> dict[str, Any]:
    """Every measurement at one size, in a fresh database ``evolve_bench_<n>`` (dropped after)."""
    rng = np.random.default_rng(seed)
    vecs = clustered(n, rng)
    targets = rng.integers(0, n, queries)
    query_vecs = unit(vecs[targets] + rng.normal(scale=0.03, size=(queries, DIM)))
    name = f"evolve_bench_{n}"
    url = create_database(admin_url, name)
    pid = postmaster_pid(server_settings(admin_url)["data_directory"])
    load = os.getloadavg()
    try:
        with ServerMemory(pid) as mem:
            out = pg_store(vecs, query_vecs, url, workdir, seed=seed, index_after_load=index_after_load)
            out["server_memory"] = {"end": mem.sample(), "peak": dict(mem.peak) if pid else None}
    finally:
        drop_database(admin_url, name)
    out["load_average"] = {"start": [round(x, 2) for x in load], "end": [round(x, 2) for x in os.getloadavg()]}
    if sqlite:
        from bench.memory_speed_adaptive import adaptive_store

        out["sqlite"] = adaptive_store(vecs, query_vecs, workdir / "auto.db", seed=seed)
    return out


def pg_store(
    vecs: np.ndarray, queries: np.ndarray, url: str, workdir: Path, *, seed: int, index_after_load: bool = False
) -> dict[str, Any]:
    """``adaptive_store``'s measurements on PostgreSQL (default config, so ``index="pgvector"``); with
    ``index_after_load`` the rows are loaded before the HNSW index exists and the index is built after."""
    n = len(vecs)
    embedder = LookupEmbedder(DIM)
    texts = [f"query {i}" for i in range(len(queries))]
    embedder.vectors.update(zip(texts, queries, strict=True))
    cfg = MemoryConfig(retrieval=RetrievalConfig(k1=10, k2=5))
    out: dict[str, Any] = {"items": n, "queries": len(queries), "index_after_load": index_after_load}
    if index_after_load:
        loader = MemoryStore(url, embedder=embedder, config=replace(cfg, index="flat"), seed=seed)
        try:
            out["hnsw_before_add"] = database_bytes(url)["hnsw_definition"]
            out["add"] = timed_load(loader, vecs)
        finally:
            loader.close()
        out["bytes_after_add"] = database_bytes(url)
        build_settings(url)
        start = time.perf_counter()
    store = MemoryStore(url, embedder=embedder, config=cfg, seed=seed)  # after a load: builds the HNSW index
    try:
        if index_after_load:
            out["index_build_s"] = time.perf_counter() - start
            out["bytes_after_index"] = database_bytes(url)
        if not index_after_load:
            out["hnsw_before_add"] = database_bytes(url)["hnsw_definition"]
            out["add"] = timed_load(store, vecs)
            out["bytes_after_add"] = database_bytes(url)
        settle = time.perf_counter()
        store.index_details()  # loads the namespace, which starts measuring its ef_search (memory.mirror.pgvector)
        store.wait_for_index(SETTLE_TIMEOUT_S)
        out["tune_s"] = time.perf_counter() - settle
        out["index"] = store.index_details()
        out["recall_at_10"] = recall_at_10(store, texts, vecs, queries)
        out.update(serving(store, embedder, queries, items=n, seed=seed, label="pgvector"))
    finally:
        start = time.perf_counter()
        store.close()
        out["close_s"] = time.perf_counter() - start
    out["bytes_at_end"] = database_bytes(url)
    out["reopen"] = reopen_in_fresh_process(url, queries, workdir, len(texts))
    return out


def timed_load(store: MemoryStore, vecs: np.ndarray) -> dict[str, Any]:
    """``add_throughput`` with each batch's rate (how it falls as an HNSW graph grows)."""
    clock = BatchClock(store)
    out = add_throughput(cast(MemoryStore, clock), vecs, len(vecs))
    out["batch_items_per_s"] = [
        round(min(out["batch"], len(vecs) - i * out["batch"]) / s) for i, s in enumerate(clock.seconds)
    ]
    return out


def build_settings(url: str) -> None:
    """The database's settings for building the HNSW index in one statement: ``BUILD_MEMORY`` of
    ``maintenance_work_mem`` (pgvector builds in memory while the graph fits) and two parallel workers."""
    name = make_url(url).database
    run_outside_transactions(
        url,
        f"ALTER DATABASE \"{name}\" SET maintenance_work_mem = '{BUILD_MEMORY}'",
        f'ALTER DATABASE "{name}" SET max_parallel_maintenance_workers = 2',
    )


def database_bytes(url: str) -> dict[str, Any]:
    """The database's size, each memory table's with its indexes and TOAST, the HNSW index's size and
    its definition as the database holds it (None when there is none)."""
    engine = admin_engine(url)
    try:
        with engine.connect() as conn:
            tables = conn.exec_driver_sql(
                "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c"
                " WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace ORDER BY 2 DESC"
            ).all()
            hnsw = conn.execute(
                text("SELECT indexdef, pg_relation_size(to_regclass(:i)) FROM pg_indexes WHERE indexname = :i"),
                {"i": HNSW_INDEX},
            ).first()
            return {
                "database": int(conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar_one()),
                "tables": {str(name): int(size) for name, size in tables},
                "hnsw_index": int(hnsw[1]) if hnsw else 0,
                "hnsw_definition": hnsw[0] if hnsw else None,
            }
    finally:
        engine.dispose()


def reopen_in_fresh_process(url: str, queries: np.ndarray, workdir: Path, calls: int) -> dict[str, Any]:
    """``bench.memory_speed_adaptive``'s reopen script against the database: seconds to the first answer
    (imports not counted), then ``calls`` recalls, and the client process's peak resident memory."""
    path = workdir / "queries.npy"
    np.save(path, queries)
    script = REOPEN.format(root=str(ROOT), queries=str(path), url=url, calls=calls, index="auto")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


if __name__ == "__main__":
    main()
