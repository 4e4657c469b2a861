"""A long bulk load with other processes recalling, reading and reinforcing: the reliability report's figures.

The load is ``tests/reliability/bulk.py``'s (``tests/memory/write/test_memory_bulk_load.py`` asserts on it).

``python -m bench.reliability_bulk`` prints the figures (``--rows`` to change the load).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from tests.reliability.bulk import contended_load


def run(quick: bool = True) -> dict[str, Any]:
    """The figures for RELIABILITY.md: a 300,000-row load (2,500,000 with ``quick=False``)."""
    rows = 300_000 if quick else 2_500_000
    with tempfile.TemporaryDirectory(prefix="evolve-bulk-") as folder:
        r = contended_load(f"sqlite:///{Path(folder) / 'bulk.db'}", rows=rows, workers=2)
    by_op = ", ".join(f"{op} {s:.2f} s" for op, s in r["max_wait_by_op"].items())
    return {
        "title": "Long bulk load with concurrent readers and reinforcers",
        "rows": [
            ["rows loaded by add_many in one call", r["rows"]],
            ["load seconds", r["load_seconds"]],
            ["other processes (retrieve + get + stats + reinforce in a loop)", r["workers"]],
            ["their calls during the load", r["calls"]],
            ["'database is locked' seen by callers", r["locked"]],
            ["other failures seen by callers", len(r["errors"]) - r["locked"]],
            ["longest wait of one call, s", r["max_wait"]],
            ["99th percentile wait, s", r["p99_wait"]],
            ["longest wait by call", by_op],
        ],
        "notes": (
            "tests/reliability/bulk.py: one SQLite file; the load commits in chunks of about 0.8 s (BULK_SECONDS) and "
            "leaves the write lock free for BULK_PAUSE between them, while waiting writers poll for it every few ms; "
            "reads (get, stats) are DEFERRED transactions and never wait; retrieve (it logs the recall) and "
            "reinforce take their turn between chunks. `python -m bench.reliability_bulk --rows 2500000` for the "
            "2.5M-row load."
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000, help="memories the bulk load writes in one add_many")
    parser.add_argument("--workers", type=int, default=2, help="processes recalling and reinforcing meanwhile")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="evolve-bulk-") as folder:
        out = contended_load(f"sqlite:///{Path(folder) / 'bulk.db'}", rows=args.rows, workers=args.workers)
    print(json.dumps({**out, "errors": out["errors"][:5]}, indent=1))


if __name__ == "__main__":
    main()
