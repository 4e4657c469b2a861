"""``evolve serve`` under a bounded load: N concurrent clients, a fixed count of requests, every latency.

The load is ``tests/reliability/serve_load.py``'s (``tests/apps/test_serve_load.py`` asserts on it); this
records its figures with the machine they ran on.

Run: ``python -m bench.serve_load [--clients 8] [--requests 25]`` → bench/results/serve_load.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from bench.common import machine
from tests.reliability.serve_load import run_load

RESULTS = Path(__file__).resolve().parent / "results"


def markdown(report: dict[str, Any]) -> str:
    s, c = report["summary"], report["config"]
    lines = [
        "# evolve serve under load",
        "",
        f"{c['clients']} concurrent clients × {c['requests_per_client']} chat requests each (every 4th streamed, "
        f"a feedback and its repeat after every 3rd), {c['servers']} `evolve serve` process(es) on 127.0.0.1 with "
        "a scripted model and one SQLite store (with several, feedback goes to another process than the answer); "
        f"client-side latency. Reproduce: `python -m bench.serve_load --clients {c['clients']} "
        f"--requests {c['requests_per_client']} --servers {c['servers']}`.",
        "",
        "| figure | value |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v} |" for k, v in s.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=25, help="chat requests per client")
    parser.add_argument("--servers", type=int, default=1, help="evolve serve processes sharing the store")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = run_load(Path(tmp), clients=args.clients, per_client=args.requests, servers=args.servers)
    report["machine"] = machine()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "serve_load.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (RESULTS / "serve_load.md").write_text(markdown(report), encoding="utf-8")
    print(markdown(report))


if __name__ == "__main__":
    main()
