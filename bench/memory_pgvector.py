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
from bench.memory_speed_adaptive import REOPEN, ROOT, earlier_sizes, recall_at_10, serving
from bench.memory_speed_measure import DIM, LookupEmbedder, add_throughput, clustered, unit
from bench.memory_speed_report import size_tag
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
BUILD_MEMORY = "4GB"  # maintenance_work_mem while --index-after-load builds the graph: a million 384-d rows fit


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
        out["index"] = store.index_details()
        if not index_after_load:
            out["hnsw_before_add"] = database_bytes(url)["hnsw_definition"]
            out["add"] = timed_load(store, vecs)
            out["bytes_after_add"] = database_bytes(url)
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


def add_estimate_s(batch_rates: Sequence[float], batch: int, target: int) -> float | None:
    """Seconds a bulk load to ``target`` items would take if each item's insert cost kept growing as
    it did here, ``a + b·ln(items in the graph)`` (an HNSW insert visits about log n layers and
    neighbours) fitted to the batches. A lower bound: it ignores the graph outgrowing memory."""
    if len(batch_rates) < 3:
        return None
    mid = (np.arange(len(batch_rates)) + 0.5) * batch
    b, a = np.polyfit(np.log(mid), 1.0 / np.asarray(batch_rates, dtype=float), 1)
    ends = (np.arange(target // batch) + 0.5) * batch
    return float(np.sum(batch * (a + b * np.log(ends))))


def headline(results: dict[str, Any]) -> dict[str, Any]:
    """``pgvector_*`` keys for summary.json, per size (``_100k``, ``_1m``)."""
    flat: dict[str, Any] = {}
    for size, r in results["sizes"].items():
        tag = size_tag(int(size))
        peak = (r["server_memory"] or {}).get("peak") or {}
        flat.update({
            f"pgvector_add_items_per_s_{tag}": round(r["add"]["items_per_s"]),
            f"pgvector_recall_at_10_{tag}": round(r["recall_at_10"], 4),
            f"pgvector_retrieve_p50_ms_{tag}": round(r["retrieve"]["p50_ms"], 3),
            f"pgvector_retrieve_p95_ms_{tag}": round(r["retrieve"]["p95_ms"], 3),
            f"pgvector_index_search_p50_ms_{tag}": round(r["index_search"]["p50_ms"], 3),
            f"pgvector_retrieval_ratio_vs_index_{tag}": round(r["ratio_vs_index"], 2),
            f"pgvector_reinforce_call_p50_ms_{tag}": round(r["reinforce"]["p50_ms"], 3),
            f"pgvector_write_call_p50_ms_{tag}": round(r["write"]["p50_ms"], 3),
            f"pgvector_write_call_p95_ms_{tag}": round(r["write"]["p95_ms"], 3),
            f"pgvector_grouped_add_items_per_s_{tag}": round(r["grouped_add"]["items_per_s"]),
            f"pgvector_reopen_s_{tag}": round(r["reopen"]["reopen_s"], 3),
            f"pgvector_client_rss_mb_{tag}": round(r["reopen"]["peak_rss_mb"]),
            f"pgvector_bytes_per_item_{tag}": round(loaded(r)["database"] / r["items"]),
        })  # fmt: skip
        if peak:
            flat[f"pgvector_server_rss_mb_{tag}"] = round(peak["rss_mb"])
            flat[f"pgvector_server_pss_mb_{tag}"] = round(peak["pss_mb"])
    return flat


def markdown(results: dict[str, Any]) -> str:
    s, m = results["server"], results["machine"]
    sizes = results["sizes"]
    lines = [
        "# The memory store on PostgreSQL + pgvector",
        "",
        "`python -m bench.memory_pgvector` (see its docstring). The default `MemoryConfig()` on PostgreSQL is "
        '`index="pgvector"`: phase A is one SQL statement walking the HNSW index in the database, then the mirror '
        "re-scores the candidates exactly and phase B reads Q from it. 384-d clustered unit vectors, queries are "
        "noisy copies of stored ones served by a lookup embedder (no model runs).",
        "",
        f"Machine: {m['cpu_count']} cores ({m['cpu']}), shared with other jobs. PostgreSQL {s['version']}, pgvector "
        f"{s['pgvector']}, shared_buffers {s['shared_buffers']}, maintenance_work_mem {s['maintenance_work_mem']}, "
        f"fsync {s['fsync']}, synchronous_commit {s['synchronous_commit']}"
        + (" (the throwaway test server: commits do not wait for the disk)." if s["fsync"] == "off" else "."),
        "",
        "| measure | " + " | ".join(f"{int(n):,} items" for n in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for label, get in ROWS:
        lines.append(f"| {label} | " + " | ".join(get(r) for r in sizes.values()) + " |")
    lines += comparison(sizes)
    lines += notes(sizes)
    return "\n".join(lines) + "\n"


def loaded(r: dict[str, Any]) -> dict[str, Any]:
    """The database's bytes once loaded and indexed: after the load, or after the index built after it."""
    return r.get("bytes_after_index") or r["bytes_after_add"]  # type: ignore[no-any-return]


def _mb(x: float | None) -> str:
    return "not readable" if x is None else f"{x:,.0f} MB"


def _peak(r: dict[str, Any], key: str) -> str:
    return _mb(((r.get("server_memory") or {}).get("peak") or {}).get(key))


ROWS: list[tuple[str, Any]] = [
    ("bulk add (`add_many`, batches of 10,000; HNSW kept up row by row unless built after)", lambda r: f"{r['add']['items_per_s']:,.0f} items/s"),
    ("HNSW index built after the load (`--index-after-load`)", lambda r: f"{r['index_build_s']:,.0f} s" if r.get("index_after_load") else "—"),
    ("recall@10 of the whole recall vs exact search", lambda r: f"{r['recall_at_10']:.4f}"),
    ("recall (`retrieve`, logged) p50 / p95", lambda r: f"{r['retrieve']['p50_ms']:.2f} / {r['retrieve']['p95_ms']:.2f} ms"),
    ("its index search in the database p50 / p95", lambda r: f"{r['index_search']['p50_ms']:.2f} / {r['index_search']['p95_ms']:.2f} ms"),
    ("recall p50 / index search p50", lambda r: f"{r['ratio_vs_index']:.2f}"),
    ("one `reinforce` call p50", lambda r: f"{r['reinforce']['p50_ms']:.2f} ms"),
    ("one `write` call (grouping on) p50 / p95", lambda r: f"{r['write']['p50_ms']:.2f} / {r['write']['p95_ms']:.2f} ms"),
    ("grouped `add_many` (1,000 new items)", lambda r: f"{r['grouped_add']['items_per_s']:,.0f} items/s"),
    ("reopen + first answer, fresh process (imports excluded)", lambda r: f"{r['reopen']['reopen_s']:.2f} s"),
    ("client peak RSS (the reopening process)", lambda r: _mb(r["reopen"]["peak_rss_mb"])),
    ("server peak RSS summed over its processes", lambda r: _peak(r, "rss_mb")),
    ("server peak PSS (shared pages counted once)", lambda r: _peak(r, "pss_mb")),
    ("database bytes per item after the load (and the index built after it)", lambda r: f"{loaded(r)['database'] / r['items']:,.0f}"),
    ("of which the HNSW index", lambda r: f"{loaded(r)['hnsw_index'] / r['items']:,.0f}"),
    ("database bytes per item at the end (with the recall log)", lambda r: f"{r['bytes_at_end']['database'] / r['items']:,.0f}"),
    ("load average (1 min) at start / end", lambda r: f"{r['load_average']['start'][0]:.2f} / {r['load_average']['end'][0]:.2f}"),
]  # fmt: skip


def comparison(sizes: dict[str, Any]) -> list[str]:
    """PostgreSQL next to the in-process index (SQLite, ``index="auto"``) on the same vectors, same run."""
    both = {n: r for n, r in sizes.items() if "sqlite" in r}
    if not both:
        return []
    lines = [
        "",
        '## Next to the in-process index (SQLite, `index="auto"`), same vectors and queries, same run',
        "",
        "| size | measure | PostgreSQL + pgvector | SQLite + in-process index | PostgreSQL / SQLite |",
        "|---:|---|---:|---:|---:|",
    ]
    pairs = [
        ("recall p50 (ms)", lambda r: r["retrieve"]["p50_ms"], ".2f"),
        ("recall p95 (ms)", lambda r: r["retrieve"]["p95_ms"], ".2f"),
        ("recall@10", lambda r: r["recall_at_10"], ".4f"),
        ("one `reinforce` p50 (ms)", lambda r: r["reinforce"]["p50_ms"], ".2f"),
        ("one `write` p50 (ms)", lambda r: r["write"]["p50_ms"], ".2f"),
        ("grouped `add_many` (items/s)", lambda r: r["grouped_add"]["items_per_s"], ",.0f"),
        ("reopen + first answer (s)", lambda r: r["reopen"]["reopen_s"], ".2f"),
        ("client peak RSS (MB)", lambda r: r["reopen"]["peak_rss_mb"], ",.0f"),
    ]
    for n, r in both.items():
        for label, get, spec in pairs:
            pg, lite = float(get(r)), float(get(r["sqlite"]))
            ratio = f"{pg / lite:.2f}" if lite else "—"
            lines.append(f"| {int(n):,} | {label} | {pg:{spec}} | {lite:{spec}} | {ratio} |")
    return lines


def notes(sizes: dict[str, Any]) -> list[str]:
    lines = ["", "## Notes", ""]
    for n, r in sizes.items():
        rates = r["add"]["batch_items_per_s"]
        reopen = (
            f"Reopen: index `{r['reopen']['index']}`, mirror `{r['reopen']['mirror']}` (the process still reads "
            "every key vector, Q and visit count from SQL into its mirror on open)."
        )
        if r.get("index_after_load"):
            lines.append(
                f"- {int(n):,} items: loaded with no HNSW index in the database (`--index-after-load`): "
                f"{rates[0]:,} items/s for the first batch, {rates[-1]:,} for the last; then the default store's open "
                f"built the index over them in {r['index_build_s']:,.0f} s (maintenance_work_mem {BUILD_MEMORY} and two "
                f"parallel workers for that database; {r['bytes_after_index']['hnsw_index'] / r['items']:,.0f} "
                f"bytes an item). {reopen}"
            )
            continue
        lines.append(
            f"- {int(n):,} items: the HNSW index existed before the first row (`{r['hnsw_before_add']}`), so "
            f"each insert went into the graph: {rates[0]:,} items/s for the first batch, {rates[-1]:,} for the last. "
            + reopen
        )
        est = add_estimate_s(rates, r["add"]["batch"], 1_000_000) if int(n) < 1_000_000 else None
        if est is not None:
            lines.append(
                f"- Extrapolated from these batches (insert cost a + b·ln n), a bulk load to 1,000,000 items would "
                f"take at least {est / 60:,.0f} minutes on this machine; more once the graph outgrows shared_buffers "
                "and the page cache."
            )
    lines.append(
        "- The recall's ef_search is max(40, 2·k1 + 16) with pgvector's iterative scan (strict order), so the "
        "namespace filter cannot starve phase A; recall@10 is measured against an exact scan of the same vectors."
    )
    return lines


if __name__ == "__main__":
    main()
