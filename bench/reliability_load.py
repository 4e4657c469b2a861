"""Concurrency and load: many writers on one memory store, and ``evolve serve`` under a bounded load.

The workload is ``tests/reliability/load.py``'s, the serve load ``tests/reliability/serve_load.py``'s (the
tests assert on both); here they run at size for the reliability report.

Run ``python -m bench.reliability_load``; prints the figures as JSON.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from tests.reliability.load import LOCKED, mixed_workload
from tests.reliability.serve_load import run_load


def memory_rows(label: str, url: str, processes: int, threads: int, rounds: int) -> list[list[Any]]:
    result, seconds, ops = mixed_workload(url, processes=processes, threads=threads, rounds=rounds)
    return [
        [f"{label}: processes × threads × rounds", f"{processes} × {threads} × {rounds}"],
        [f"{label}: operations (add, recall, reinforce batch)", ops],
        [f"{label}: seconds", round(seconds, 2)],
        [f"{label}: items checked", result.items],
        [f"{label}: Q/visits mismatches vs sequential", len(result.mismatches)],
        [f"{label}: feedback ids sent / rows stored", f"{result.feedback_sent} / {result.feedback_rows}"],
        [f"{label}: feedback ids missing or stored twice", abs(result.feedback_sent - result.feedback_rows)],
        [f"{label}: item updates expected / applied", f"{result.updates_expected} / {result.updates_reported}"],
        [f"{label}: item updates lost or applied twice", abs(result.updates_expected - result.updates_reported)],
        [f"{label}: '{LOCKED}' seen by callers", result.locked],
        [f"{label}: other failures seen by callers", len(result.errors) - result.locked],
    ]


def run(quick: bool = True) -> dict[str, Any]:
    """The concurrency and load figures: the mixed workload on SQLite, then ``evolve serve`` under load."""
    rounds = 12 if quick else 40
    with tempfile.TemporaryDirectory() as tmp:
        rows = memory_rows("SQLite", f"sqlite:///{Path(tmp) / 'shared.db'}", 3, 4, rounds)
        clients, requests = (8, 25) if quick else (16, 100)
        report = run_load(Path(tmp) / "serve", clients=clients, per_client=requests, servers=2)
    s = report["summary"]
    rows += [
        ["serve: processes on one SQLite file, clients × requests each", f"2, {clients} × {requests}"],
        [
            "serve: requests (chat, streamed, feedback)",
            f"{s['requests']} ({s['chat']}, {s['streamed']}, {s['feedback']})",
        ],
        ["serve: unanswered or not 200", s["errors"]],
        ["serve: feedback applied twice or never", s["feedback_not_once"]],
        ["serve: p50 / p90 / p99 / max ms", f"{s['p50_ms']} / {s['p90_ms']} / {s['p99_ms']} / {s['max_ms']}"],
        ["serve: requests per second", s["throughput_rps"]],
    ]
    notes = (
        "Mixed workload: spawned processes × threads on one SQLite file, every thread adding (own and shared "
        "namespace), recalling (logged) and reinforcing its own and any worker's recalls; Q and visits compared "
        "with the sequential TD result. Serve: two `evolve serve` subprocesses on 127.0.0.1 (feedback sent to the one that did not answer) with a scripted model "
        "and the SQLite store; latencies include the client. Reproduce: python -m bench.reliability_load."
    )
    return {"title": "Concurrency and load", "rows": rows, "notes": notes}


if __name__ == "__main__":
    print(json.dumps(run(quick=True), indent=2))
