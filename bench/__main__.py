"""`python -m bench [--profile quick|full] [--only NAME ...]`: every benchmark, one after another.

The quick profile (what `make bench` runs) keeps to about 31 minutes on a 2-core CPU machine: the memory
engine at 10k/100k/1M items, the loop's overhead, the learning conditions on the bundled families and
TextWorld with the local model, learning on BFCL (two categories, one seed: 15 minutes), learning
under wrong ratings with the rule reader (``bench.noise``, about 3 minutes), the tiny MARFT relay, ``evolve serve``'s concurrency and added latency (about 2 minutes each), and what the MCP and A2A
layers add over a library call (about 1 minute). The full
profile (`make bench FULL=1`) adds more queries and index types, HumanEval and CHAMP, more epochs, prompt
evolution, the closed loop of an app through ``evolve serve`` on BFCL (about 25 minutes), poisoned memory
(``bench.poison``, about 15 minutes), MARFT on
SmolLM2 and, when a CUDA GPU is present, the GPU measurements.

Each benchmark runs in its own process (a model or a 1M-item index is freed when it ends) and writes
its own files to bench/results/; this runner adds ``bench/results/run.json`` with how long each took.
A benchmark that fails does not stop the others, but the runner exits non-zero and names it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import machine

RESULTS = Path(__file__).parent / "results"


@dataclass(frozen=True)
class Bench:
    """One benchmark module, the profiles it runs in, and whether it takes ``--profile``."""

    name: str
    profiles: tuple[str, ...]
    takes_profile: bool = False


BENCHES = (
    Bench("memory_speed", ("quick", "full"), takes_profile=True),
    Bench("loop_overhead", ("quick", "full"), takes_profile=True),
    Bench("context_q_recall", ("quick", "full")),
    Bench("learning", ("quick", "full"), takes_profile=True),
    Bench("bfcl_learning", ("quick", "full"), takes_profile=True),
    Bench("marft_relay", ("quick", "full")),
    Bench("serve_concurrency", ("quick", "full")),
    Bench("serve_overhead", ("quick", "full")),
    Bench("serve_closed_loop", ("full",)),
    Bench("protocol_overhead", ("quick", "full")),
    Bench("changing_facts", ("quick", "full")),
    Bench("multistep_credit", ("quick", "full")),
    Bench("team_order", ("quick", "full")),
    Bench("noise", ("quick", "full")),
    Bench("poison", ("full",)),
    Bench("memory_size", ("full",)),
    Bench("prompt_evolution", ("full",)),
    Bench("marft_smollm2", ("full",)),
    Bench("marft_gpu", ("full",)),
)


def command(bench: Bench, profile: str) -> list[str]:
    cmd = [sys.executable, "-m", f"bench.{bench.name}"]
    return cmd + ["--profile", profile] if bench.takes_profile else cmd


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--profile", choices=("quick", "full"), default="quick")
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=[b.name for b in BENCHES], help="run only these")
    args = parser.parse_args(argv)
    chosen = [b for b in BENCHES if args.profile in b.profiles and (not args.only or b.name in args.only)]
    runs: dict[str, dict[str, object]] = {}
    start = time.perf_counter()
    for bench in chosen:
        print(f"\n=== bench.{bench.name} ({args.profile}) ===", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call(command(bench, args.profile))
        runs[bench.name] = {"seconds": round(time.perf_counter() - t0, 1), "exit_code": rc}
    total = time.perf_counter() - start
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {"profile": args.profile, "total_seconds": round(total, 1), "benchmarks": runs, "machine": machine()}
    (RESULTS / "run.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"\n{'benchmark':<18} {'seconds':>8}  status")
    for name, r in runs.items():
        status = "ok" if r["exit_code"] == 0 else f"FAILED (exit {r['exit_code']})"
        print(f"{name:<18} {r['seconds']:>8}  {status}")
    print(f"{'total':<18} {total:>8.1f}  ({args.profile} profile; results in {RESULTS})")
    failed = [n for n, r in runs.items() if r["exit_code"] != 0]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
