"""How fast is the memory store? Two-phase retrieval next to a raw FAISS search on the same index,
plus add, reinforce and reopen throughput, and bytes per item.

Run ``python -m bench.memory_speed [--profile quick|full] [--sizes 10000 100000] [--queries 300]``.
Items are 384-d unit vectors clustered by topic, added with precomputed embeddings; queries are noisy
copies of stored vectors served by a lookup embedder, so no model runs and the numbers measure the
store alone. Beside the store: a raw FAISS search on its own index, a brute-force Python scan (the
reference recall), and the flat, HNSW and IVF index kinds with their recall@10. Results go to
``bench/results/memory_speed.{json,md}`` and ``memory_latency.png``; headline numbers are merged into
``bench/results/summary.json`` (the quick profile takes about five minutes on two cores). The
measurements are ``bench/memory_speed_measure.py``'s, the pages ``bench/memory_speed_report.py``'s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.common import machine, merge_summary
from bench.memory_speed_adaptive import adaptive_store
from bench.memory_speed_measure import PROFILES, bench_size
from bench.memory_speed_report import headline, markdown, plot
from connectors.errors import ConfigError

RESULTS = Path(__file__).parent / "results"
EXTRAS = {
    "adaptive_store": lambda vecs, queries, work, seed: adaptive_store(vecs, queries, work / "adaptive.db", seed=seed)
}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    parser.add_argument("--sizes", type=int, nargs="+", help="store sizes to measure (default: the profile's)")
    parser.add_argument("--queries", type=int, help="timed queries per size up to 100k (default: the profile's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results are written")
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    profile = replace(profile, sizes=tuple(args.sizes or profile.sizes), queries=args.queries or profile.queries)
    if min(profile.sizes) < 1000 or profile.queries < 1:
        raise ConfigError(f"sizes must be >= 1000 and queries >= 1, got {profile.sizes} and {profile.queries}")
    results: dict[str, Any] = {"machine": machine(), "profile": args.profile, "sizes": {}}
    for n in profile.sizes:
        workdir = Path(tempfile.mkdtemp(prefix=f"evolve-bench-{n}-"))
        try:
            results["sizes"][str(n)] = r = bench_size(
                n, profile=profile, workdir=workdir, seed=args.seed, extras=EXTRAS
            )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        print(
            f"{n:>9,} items: retrieve p50 {r['retrieve']['p50_ms']:.2f} ms, FAISS {r['faiss_search']['p50_ms']:.2f} ms "
            f"(x{r['ratio_vs_faiss']:.2f}), brute force {r['brute_force']['p50_ms']:.0f} ms, "
            f"add {r['add']['items_per_s']:,.0f}/s, reinforce {r['reinforce']['batched_updates_per_s']:,.0f}/s",
            flush=True,
        )
    results["phase_b_us"] = results["sizes"][str(profile.sizes[-1])]["phase_b_us"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory_speed.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (args.out / "memory_speed.md").write_text(markdown(results), encoding="utf-8")
    plot(results, args.out / "memory_latency.png")
    merge_summary(args.out / "summary.json", headline(results))
    return results


if __name__ == "__main__":
    main()
