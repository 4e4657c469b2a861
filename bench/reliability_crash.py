"""SIGKILL during memory writes, reinforcements and index saves: the crash figures of the reliability report.

The trials are ``tests/reliability/crash.py``'s (``tests/memory/test_memory_crash.py`` asserts on them);
here they run at size on SQLite, and on PostgreSQL when the report gives a server.

Run ``python -m bench.reliability_crash [--full] [--url URL]``; prints the figures as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.reliability.crash import FAILURES, run_trials


def figures(result: dict[str, Any], label: str) -> list[list[Any]]:
    """The rows of one backend's result, failures last."""
    t, landed = result["totals"], result["landed"]
    inside = sum(v for k, v in landed.items() if k.startswith("inside") and k not in ("inside open", "inside save"))
    rows: list[list[Any]] = [
        [f"{label}: SIGKILL trials (processes killed)", result["trials"]],
        [f"{label}: kills inside a write or reinforce call", inside],
        [f"{label}: kills inside save_index", landed.get("inside save", 0)],
        [f"{label}: kills while the index worked in the background", landed.get("index busy", 0)],
        [f"{label}: kills while opening the store", landed.get("inside open", 0) + landed.get("before open", 0)],
        [f"{label}: acknowledged writes checked", t.get("acknowledged_writes", 0)],
        [f"{label}: acknowledged feedback ids checked", t.get("acknowledged_feedback", 0)],
        [f"{label}: feedback ids sent again after a kill", t.get("resent_feedback", 0)],
        [f"{label}: index states on reopen", ", ".join(f"{k} {v}" for k, v in sorted(result["index_states"].items()))],
    ]
    rows += [[f"{label}: {name}", t.get(key, 0)] for name, key in FAILURES.items()]
    return rows


def run(quick: bool = True, *, pg_url: str | None = None) -> dict[str, Any]:
    """The crash figures: 50 SQLite trials (200 with ``quick=False``), plus PostgreSQL when given a URL."""
    rows: list[list[Any]] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="evolve-crash-") as tmp:
        folder = Path(tmp)
        rows += figures(run_trials(f"sqlite:///{folder / 'memory.db'}", folder, trials=50 if quick else 200), "SQLite")
        switching = run_trials(f"sqlite:///{folder / 'auto' / 'memory.db'}", folder / "auto", trials=30 if quick else 120,
                               seed=2, switch_at=150)  # fmt: skip
        rows += figures(switching, "SQLite, the default index switching at 150 items")
        if pg_url is not None:
            pg = run_trials(pg_url, folder / "pg", trials=10 if quick else 40, seed=1, delays=(0.2, 2.0))
            rows += figures(pg, "PostgreSQL")
    return {
        "title": "Crashes: SIGKILL during memory writes, reinforcements and index saves",
        "rows": rows,
        "notes": (
            "tests/reliability/crash.py: one database through every trial; each worker is killed after a seeded "
            "random delay (SQLite 0.02-0.6 s, PostgreSQL 0.2-2 s; from the open store in 3 trials of 4, from the start in 1), then integrity, acknowledged ids, visits against the feedback log and the "
            f"reopened index are checked; {time.perf_counter() - start:.0f} s on {os.cpu_count()} cores."
        ),
    }


if __name__ == "__main__":
    url = sys.argv[sys.argv.index("--url") + 1] if "--url" in sys.argv else None
    print(json.dumps(run(quick="--full" not in sys.argv, pg_url=url), indent=2))
