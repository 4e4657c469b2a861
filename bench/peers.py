"""Evolve's full recall beside the vector stores people reach for, on the same vectors and queries.

Run ``python -m bench.peers [--sizes 100000 1000000] [--peers ...] [--quick]`` after ``make .venv-peers``
(the peers live in their own environment, never in ``.venv``). The data are ``clustered`` 384-d unit
vectors (``bench.memory_speed_measure``) and noisy copies of stored vectors as queries, generated once per
size and seed with their exact top-10 (chunked NumPy, never a second copy of the vectors) and cached under
``--cache`` (default ``$EVOLVE_BENCH_CACHE`` or ``~/.cache/evolve-bench``). Each system then runs in two
fresh processes of its own (``bench.peers_run``): ``build`` (insert, bytes on disk) and ``serve`` (reopen
and first query, one query at a time, recall@10, score updates, peak RSS), so every RSS is that system's
own. Evolve runs in this interpreter's environment, the peers in ``.venv-peers`` (``--peer-python``).
Results go to ``bench/results/peers.{json,md}``, with Evolve's advantage over each system (``--reference``,
default ``evolve-adaptive``, the default index) and ``peers_*`` keys merged into ``bench/results/summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import machine, merge_summary
from bench.peers_report import advantages, headline, markdown
from bench.peers_systems import DIM, EVOLVE_MODES, SYSTEMS, K
from connectors.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PEER_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
DEFAULT_PEERS = ("evolve-adaptive", "evolve-flat", "faiss-flat", "faiss-hnsw", "usearch", "chroma", "lancedb",
                 "sqlite-vec", "qdrant")  # fmt: skip
LIMITS = {  # system: the largest size it runs at unless --no-limits, and why
    "qdrant": (100_000, "local mode loads every point into Python objects when it opens: 2.3 GB at 100k, and at "
                        "a million (built in 31 min, 533 items/s) it ran out of 20 GiB while reopening (2026-11-30); "
                        "Qdrant says local mode is for up to 20,000 points"),
}  # fmt: skip
DATA_VERSION = 1  # bump when the generator changes, so a stale cache is not reused


def cache_root(given: Path | None) -> Path:
    if given is not None:
        return given
    env = os.environ.get("EVOLVE_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "evolve-bench"


def dataset(n: int, queries: int, seed: int, cache: Path) -> Path:
    """The folder holding ``base.npy`` (n × DIM), ``queries.npy`` and ``truth.npy`` (exact top-K ids),
    made once: an existing complete folder is reused as it is."""
    folder = cache / f"peers-v{DATA_VERSION}-clustered-n{n}-d{DIM}-q{queries}-s{seed}"
    if (folder / "truth.npy").exists():
        return folder
    from bench.memory_speed_measure import clustered, unit

    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    base = clustered(n, rng)
    targets = rng.integers(0, n, queries)
    query_vecs = unit(base[targets] + rng.normal(scale=0.03, size=(queries, DIM)))
    np.save(tmp / "base.npy", base)
    np.save(tmp / "queries.npy", query_vecs)
    del base  # the exact search below reads the file, so the vectors are never held twice
    truth = exact_top_k(np.load(tmp / "base.npy", mmap_mode="r"), query_vecs, K)
    np.save(tmp / "truth.npy", truth)
    (tmp / "meta.json").write_text(json.dumps({"items": n, "queries": queries, "seed": seed, "dim": DIM}) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def exact_top_k(base: np.ndarray, queries: np.ndarray, k: int, *, chunk: int = 20_000) -> np.ndarray:
    """Ids of each query's ``k`` largest inner products, best first, scanning ``base`` in chunks (each
    chunk's own top ``k`` merged into the best so far, so no step holds more than one chunk's scores)."""
    best_s = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), k), dtype=np.int64)
    for lo in range(0, len(base), chunk):
        scores = queries @ np.asarray(base[lo : lo + chunk]).T
        part = np.argpartition(-scores, min(k, scores.shape[1]) - 1, axis=1)[:, :k]
        cand_s = np.concatenate([best_s, np.take_along_axis(scores, part, 1)], axis=1)
        cand_i = np.concatenate([best_i, part + lo], axis=1)
        top = np.argpartition(-cand_s, k - 1, axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(cand_s, top, 1), np.take_along_axis(cand_i, top, 1)
    order = np.argsort(-best_s, axis=1, kind="stable")
    return np.take_along_axis(best_i, order, 1)


def run_phase(
    python: Path, system: str, phase: str, data: Path, work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """One fresh process for one phase; its JSON line, or ``{"error": ...}`` saying why there is none."""
    cmd = [str(python), "-m", "bench.peers_run", system, phase, "--data", str(data), "--work", str(work),
           "--updates", str(args.updates), "--budget-s", str(args.budget_s)]  # fmt: skip
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False", "TOKENIZERS_PARALLELISM": "false"}  # Chroma: no posthog
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"{phase} ran past --timeout {args.timeout} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": f"{phase} exited {done.returncode}: " + " | ".join(tail)[-600:]}
    out: dict[str, Any] = json.loads(lines[-1])
    return out


def measure(system: str, data: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Build then serve ``system`` in a folder of its own, removed afterwards."""
    python = Path(sys.executable) if system in EVOLVE_MODES else args.peer_python
    limit, why = LIMITS.get(system, (None, ""))
    if limit is not None and not args.no_limits and npy_items(data) > limit:
        return {"error": f"not run above {limit:,} items (--no-limits runs it): {why}"}
    if not python.exists():
        return {"error": f"no interpreter at {python}: run `make .venv-peers` (or pass --peer-python)"}
    work = Path(tempfile.mkdtemp(prefix=f"evolve-peers-{system}-", dir=args.workdir))
    try:
        built = run_phase(python, system, "build", data, work, args)
        if "error" in built:
            return built
        served = run_phase(python, system, "serve", data, work, args)
        return {**built, **served, "python": str(python)} if "error" not in served else {**built, **served}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def npy_items(data: Path) -> int:
    return int(json.loads((data / "meta.json").read_text())["items"])


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", help="store sizes (default 100000 1000000; --quick: 10000)")
    parser.add_argument("--peers", nargs="+", choices=SYSTEMS, default=list(DEFAULT_PEERS), help="systems to run")
    parser.add_argument("--quick", action="store_true", help="10k items, 200 queries, 100 updates: a smoke run")
    parser.add_argument("--queries", type=int, help="queries per size (default 1000; --quick: 200)")
    parser.add_argument("--updates", type=int, help="score-update calls timed per system (default 200)")
    parser.add_argument("--budget-s", type=float, default=300.0, help="stop timing queries after this (>= 100 run)")
    parser.add_argument(
        "--reference",
        choices=[s for s in SYSTEMS if s.startswith("evolve-")],
        default="evolve-adaptive",
        help="the Evolve system the advantage table compares every other system with",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, help="dataset cache (default $EVOLVE_BENCH_CACHE or ~/.cache/...)")
    parser.add_argument("--workdir", type=Path, help="where each system's folder is made (default: the temp dir)")
    parser.add_argument("--peer-python", type=Path, default=PEER_PYTHON, help="the peers' interpreter")
    parser.add_argument("--no-limits", action="store_true", help="run every system at every size (see LIMITS)")
    parser.add_argument("--timeout", type=int, default=5400, help="seconds one phase of one system may take")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results are written")
    parser.add_argument("--fresh", action="store_true", help="drop the sizes an earlier run left in peers.json")
    parser.add_argument(
        "--resume", action="store_true", help="skip the systems an earlier run measured at a size (same settings)"
    )
    args = parser.parse_args(argv)
    args.sizes = args.sizes or ([10_000] if args.quick else [100_000, 1_000_000])
    args.queries = args.queries or (200 if args.quick else 1000)
    args.updates = args.updates or (100 if args.quick else 200)
    if min(args.sizes) < 1000 or not 1 <= args.queries <= min(args.sizes) or args.updates < 1:
        raise ConfigError(
            f"sizes must be >= 1000, queries in [1, smallest size] and updates >= 1; "
            f"got sizes {args.sizes}, queries {args.queries}, updates {args.updates}"
        )
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Each size, each system in a step of its own: the results are written after every step, so a run stopped
    anywhere keeps what it measured, and ``--resume`` goes on from there (a step is one system's build and
    serve: under an hour at a million items for every system but Qdrant's local mode, ``LIMITS``). A system
    measured now replaces its earlier row; the other systems of the size (same queries and updates) are kept,
    each with when it was measured (``--fresh`` drops them)."""
    args = parse(argv)
    cache = cache_root(args.cache)
    results: dict[str, Any] = {"machine": machine(), "sizes": earlier_sizes(args.out / "peers.json", args.fresh)}
    for n in args.sizes:
        data = dataset(n, args.queries, args.seed, cache)
        size: dict[str, Any] = {"items": n, "queries": args.queries, "updates": args.updates,
                                "reference": args.reference, "data": str(data), "systems": {}}  # fmt: skip
        earlier = results["sizes"].get(str(n), {})
        if (earlier.get("queries"), earlier.get("updates")) == (args.queries, args.updates):
            size["systems"] = dict(earlier.get("systems", {}))  # measured before with the same settings: kept
        for system in args.peers:
            if args.resume and "p50_ms" in size["systems"].get(system, {}):
                print(f"{n:>9,} {system:<12} kept from {size['systems'][system].get('measured_at', 'an earlier run')}")
                continue
            started = {
                "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "load_average": load_average(),
            }
            size["systems"][system] = r = {**measure(system, data, args), **started}
            print(f"{n:>9,} {system:<12} " + line(r), flush=True)
            size["advantage"] = advantages(size["systems"], args.reference)
            results["sizes"][str(n)] = size
            write_results(results, args.out)
        size["advantage"] = advantages(size["systems"], args.reference)
        results["sizes"][str(n)] = size
    write_results(results, args.out)
    return results


def write_results(results: dict[str, Any], out: Path) -> None:
    """peers.json, peers.md and the summary keys, as the run stands."""
    results["sizes"] = dict(sorted(results["sizes"].items(), key=lambda kv: int(kv[0])))
    out.mkdir(parents=True, exist_ok=True)
    (out / "peers.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (out / "peers.md").write_text(markdown(results), encoding="utf-8")
    merge_summary(out / "summary.json", headline(results))


def earlier_sizes(path: Path, fresh: bool) -> dict[str, Any]:
    """The sizes an earlier run wrote to ``path`` (each measured in one run of its own), so that 100k and
    1M can be run apart; a size measured now replaces its earlier entry."""
    if fresh or not path.exists():  # a size written by a run before steps were kept has what it had
        return {}
    try:
        sizes: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))["sizes"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return {}
    return {n: size for n, size in sizes.items() if "reference" in size}


def load_average() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def line(r: dict[str, Any]) -> str:
    if "error" in r:
        return "error: " + r["error"]
    return (
        f"insert {r['insert_items_per_s']:,.0f}/s, p50 {r['p50_ms']:.2f} ms, p95 {r['p95_ms']:.2f} ms, "
        f"recall@10 {r['recall_at_10']:.3f}, reopen {r['reopen_s']:.2f} s, RSS {r['rss_mb']:,.0f} MB"
    )


if __name__ == "__main__":
    main()
