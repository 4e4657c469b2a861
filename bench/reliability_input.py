"""Bad input and hostile SQL: generated calls, spec files and server bodies, counted for the reliability report.

The properties are ``tests/reliability/hostile_input.py``'s and ``tests/reliability/spec_and_server.py``'s,
the SQL scan ``tests/reliability/sql_scan.py``'s (the property tests assert on them with fewer examples).

Run alone: ``python -m bench.reliability_input`` prints the figures as JSON.
"""

from __future__ import annotations

import json
import time
from typing import Any

from memory.write.checks import MAX_TEXT
from tests.reliability.hostile_input import HOSTILE, Tally, hostile_roundtrip, memory_property, seeded_store
from tests.reliability.spec_and_server import server_tally, spec_tally
from tests.reliability.sql_scan import sql_from_values


def run(quick: bool = True) -> dict[str, Any]:
    """The bad-input and hostile-SQL figures: generated calls and their outcomes (SQLite, spec files,
    server bodies), hostile strings round-tripped, SQL built from values."""
    n = 60 if quick else 400
    tally = Tally()
    start = time.perf_counter()
    memory_property("sqlite://", n, tally)
    specs, server = spec_tally(n), server_tally(n)
    with seeded_store("sqlite://") as store:
        hostile = [hostile_roundtrip(store, text) for text in HOSTILE]
    rows = [
        ["memory API calls generated (SQLite)", tally.calls],
        ["memory API calls refused with an EvolveError", tally.refused],
        ["errors that were not EvolveError", len(tally.foreign) + len(specs.foreign)],
        ["errors whose message names no argument", len(tally.unnamed)],
        ["store changed by a rejected call", len(tally.changed) + len(server.changed)],
        ["spec documents generated", specs.calls],
        ["server bodies generated", server.calls],
        ["5xx answers", len(server.foreign)],
        ["4xx answers not in OpenAI's error shape", len(server.unnamed)],
        ["hostile strings round-tripped", hostile.count("round-tripped")],
        ["hostile strings refused (NUL)", hostile.count("refused")],
        ["SQL built from values", len(sql_from_values())],
    ]
    notes = (
        f"Hypothesis (derandomized) with {n} examples per property; {time.perf_counter() - start:.1f} s. "
        "NUL and lone surrogates are refused as ConfigError on every backend (PostgreSQL cannot store NUL; "
        f"a lone surrogate has no UTF-8 form); texts over {MAX_TEXT:,} characters are refused."
    )
    problems = tally.problems() + specs.problems() + server.problems()
    if problems:
        notes += " Problems: " + " | ".join(problems[:5])
    return {"title": "Bad input and hostile SQL", "rows": rows, "notes": notes}


if __name__ == "__main__":
    print(json.dumps(run(quick=True), indent=2))
