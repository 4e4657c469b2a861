"""Killed ``evolve run`` / ``evolve job`` resume without applying feedback twice: the report's figures.

The trials are ``tests/reliability/crash_cli.py``'s (``tests/apps/test_cli_crash.py`` asserts on them).

Run ``python -m bench.reliability_crash_cli [--full]``; prints the figures as JSON.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.reliability.crash_cli import kill_and_resume


def run(quick: bool = True) -> dict[str, Any]:
    """The CLI crash figures: ``evolve run`` and ``evolve job`` each killed 3 times (6 with ``quick=False``)."""
    rows: list[list[Any]] = []
    with tempfile.TemporaryDirectory(prefix="evolve-crash-cli-") as tmp:
        for command in ("run", "job"):
            r = kill_and_resume(command, Path(tmp) / command, kills=3 if quick else 6, seed=0)
            label = f"evolve {command}"
            rows += [
                [f"{label}: SIGKILLs (mid-run)", f"{r['kills']} ({r['kills_mid_run']})"],
                [f"{label}: memories after resume", r["memories"]],
                [f"{label}: memories differing from an uninterrupted run", r["memories_differing_from_reference"]],
                [f"{label}: visit counts disagreeing with the feedback log", r["visit_mismatches"]],
                [f"{label}: integrity check failures", r["integrity_failures"]],
            ]
    return {
        "title": "Crashes: killed evolve run / evolve job resume",
        "rows": rows,
        "notes": "tests/reliability/crash_cli.py: seeded kill moments 0.5-3 s after start; fake model, 0.25 s per answer.",
    }


if __name__ == "__main__":
    print(json.dumps(run(quick="--full" not in sys.argv), indent=2))
