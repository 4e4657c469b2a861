"""One system, one phase, one fresh process: the code ``bench.peers`` runs for each peer.

Run ``python -m bench.peers_run SYSTEM build|serve --data DIR --work DIR``; it prints one JSON line.
``build`` inserts the cached vectors (``base.npy``, read in chunks with plain file reads, so the input
never sits in the process twice and never counts as the system's memory), finishes the index, closes and
measures the bytes left on disk. ``serve`` is a fresh process on that folder: reopen and first query,
a warm-up, one query at a time for every cached query (p50/p95), recall@10 against ``truth.npy``, the
score update throughput, and the process's peak RSS. The peers (FAISS, usearch, Qdrant local mode,
LanceDB, Chroma, sqlite-vec) are imported lazily, so this module imports without them (they live in
``.venv-peers``: ``make .venv-peers``); Evolve's stores run in the project's own environment.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.peers_systems import SYSTEMS, K, System, Unsupported, open_system, preload, version

WARMUP = 20
CHUNK = 10_000


def npy_rows(path: Path, lo: int, hi: int) -> np.ndarray:
    """Rows ``lo:hi`` of a 2-d float32 ``.npy`` file, read with ``readinto`` (no memory map: mapped pages
    would count in this process's RSS as if the system held them)."""
    with path.open("rb") as f:
        shape, start = npy_header(f, path)
        out = np.empty((hi - lo, shape[1]), dtype=np.float32)
        f.seek(start + lo * shape[1] * 4)
        if f.readinto(out.data) != out.nbytes:
            raise ValueError(f"{path} ends before row {hi}: the cached data set is truncated, delete it")
        return out


def npy_header(f: Any, path: Path) -> tuple[tuple[int, ...], int]:
    """The array's shape and where its data starts; refuses anything but C-ordered 2-d float32."""
    fmt = np.lib.format
    version = fmt.read_magic(f)
    shape, fortran, dtype = fmt.read_array_header_1_0(f) if version == (1, 0) else fmt.read_array_header_2_0(f)
    if fortran or dtype != np.float32 or len(shape) != 2:
        raise ValueError(f"{path} must hold a C-ordered 2-d float32 array, got {shape} {dtype}")
    return shape, f.tell()


def npy_len(path: Path) -> int:
    with path.open("rb") as f:
        return int(npy_header(f, path)[0][0])


def disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def peak_rss_mb() -> float:
    """``VmHWM`` in MB (``bench.common.peak_rss_mb`` says why not ``ru_maxrss``; that module needs the
    project's environment, and the peers run in their own)."""
    line = next(li for li in Path("/proc/self/status").read_text().splitlines() if li.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


# -- the phases ----------------------------------------------------------------------------------
def timed(call: Callable[[int], Any], n: int, *, budget_s: float = float("inf"), least: int = 100) -> np.ndarray:
    """Seconds of ``call(i)`` for i < n, stopping early once ``budget_s`` is spent and ``least`` calls ran
    (a brute-force peer at a million items would otherwise take most of an hour)."""
    out: list[float] = []
    began = time.perf_counter()
    for i in range(n):
        if i >= least and time.perf_counter() - began > budget_s:
            break
        start = time.perf_counter()
        call(i)
        out.append(time.perf_counter() - start)
    return np.array(out)


def log_cost(logged: Callable[[int], Any], unlogged: Callable[[int], Any], n: int) -> dict[str, float]:
    """The first ``n`` queries again, each recalled once logged and once not, the order alternating by query:
    both warm from the timed pass, so the difference is the log's, not the caches' (a second pass of its own,
    unlogged, read 0.49 ms against the first pass's 0.90 at 100k: mostly the caches the first pass filled)."""
    warm: list[float] = []
    bare: list[float] = []
    for i in range(n):
        for call, out in ((logged, warm), (unlogged, bare))[:: 1 if i % 2 else -1]:
            start = time.perf_counter()
            call(i)
            out.append(time.perf_counter() - start)
    w, b = np.array(warm), np.array(bare)
    return {
        "p50_warm_ms": pct(w, 50),
        "p95_warm_ms": pct(w, 95),
        "p50_no_log_ms": pct(b, 50),
        "p95_no_log_ms": pct(b, 95),
    }


def pct(seconds: np.ndarray, q: float) -> float:
    return float(np.percentile(seconds, q) * 1e3)


def build(name: str, data: Path, work: Path) -> dict[str, Any]:
    """Insert every vector in chunks of ``CHUNK``, finish the index, close; time and bytes on disk."""
    n = npy_len(data / "base.npy")
    preload(name)
    start = time.perf_counter()
    system = open_system(name, work, create=True)
    for lo in range(0, n, CHUNK):
        hi = min(lo + CHUNK, n)
        system.insert(np.arange(lo, hi, dtype=np.int64), npy_rows(data / "base.npy", lo, hi))
    system.finish()
    loaded = time.perf_counter()
    system.close()
    done = time.perf_counter()
    size = disk_bytes(work)
    return {
        "items": n, "insert_s": loaded - start, "close_s": done - loaded,
        "insert_items_per_s": n / (done - start), "disk_bytes": size, "bytes_per_item": size / n,
        "build_rss_mb": peak_rss_mb(),
    }  # fmt: skip


def serve(name: str, data: Path, work: Path, *, updates: int, budget_s: float) -> dict[str, Any]:
    """Reopen and first query (imports done before), a warm-up, the queries timed one at a time (within
    ``budget_s``), recall@10 over the timed ones, the update calls, peak RSS."""
    queries, truth = np.load(data / "queries.npy"), np.load(data / "truth.npy")
    preload(name)
    start = time.perf_counter()
    system = open_system(name, work, create=False, queries=queries)
    system.search(0, queries[0])
    out: dict[str, Any] = {"reopen_s": time.perf_counter() - start, "version": version(name)}
    for i in range(1, min(WARMUP, len(queries))):
        system.search(i, queries[i])
    hits: list[Any] = []
    t = timed(lambda i: hits.append(system.search(i, queries[i])), len(queries), budget_s=budget_s)
    n = out["queries"] = len(t)
    out.update(p50_ms=pct(t, 50), p95_ms=pct(t, 95), mean_ms=float(t.mean() * 1e3), qps=float(n / t.sum()))
    out["recall_at_10"] = recall_at_k([system.ids(h) for h in hits], truth[:n])
    no_log = getattr(system, "search_no_log", None)
    if no_log is not None:  # Evolve: what the recall log costs, the same queries again logged and not, alternating
        out.update(log_cost(lambda i: system.search(i, queries[i]), no_log, n))
    out.update(update_rate(system, hits[: min(updates, n)]))
    system.close()
    out["rss_mb"], out["disk_bytes_after_serve"] = peak_rss_mb(), disk_bytes(work)  # with recall log, versions
    return out


def recall_at_k(found: Sequence[Sequence[int]], truth: np.ndarray) -> float:
    """The share of the exact top ``K`` that each answer holds, averaged over the queries."""
    return float(np.mean([len(set(f[:K]) & set(e[:K].tolist())) / K for f, e in zip(found, truth, strict=True)]))


def update_rate(system: System, hits: Sequence[Any]) -> dict[str, Any]:
    """One update call per search result (its top ``UPDATE_ITEMS`` items get a new score)."""
    items = 0
    start = time.perf_counter()
    try:
        for j, hit in enumerate(hits):
            items += system.update(hit, j)
    except Unsupported as e:
        return {"update_calls_per_s": None, "update_items_per_s": None, "update_note": str(e)}
    seconds = time.perf_counter() - start
    return {"update_calls_per_s": len(hits) / seconds, "update_items_per_s": items / seconds, "updates": len(hits)}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("system", choices=SYSTEMS)
    parser.add_argument("phase", choices=("build", "serve"))
    parser.add_argument("--data", type=Path, required=True, help="folder with base.npy, queries.npy, truth.npy")
    parser.add_argument("--work", type=Path, required=True, help="the system's own folder")
    parser.add_argument("--updates", type=int, default=200, help="update calls timed in the serve phase")
    parser.add_argument("--budget-s", type=float, default=300.0, help="query timing stops after this (>= 100 run)")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.phase == "build":
        result = build(args.system, args.data, args.work)
    else:
        result = serve(args.system, args.data, args.work, updates=args.updates, budget_s=args.budget_s)
    print(json.dumps({"system": args.system, "phase": args.phase, **result}), flush=True)
    return result


if __name__ == "__main__":
    main()
