"""Faults from models: the loop over a model server that rate-limits, crashes, stalls and sends junk.

The scenarios are ``tests/reliability/faults.py``'s (the fault tests assert on them); here they run over
more seeds and tasks for the reliability report.

Run alone: ``python -m bench.reliability_faults`` prints the figures as JSON.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from tests.reliability.faults import (
    CAP,
    RATE,
    RETRIES,
    TIMEOUT,
    critic_gives_junk,
    evolver_under_faults,
    fault_classes,
)
from tests.support.fake_openai import FAULT_KINDS


def run(quick: bool = True) -> dict[str, Any]:
    """The figures: faults injected per kind, retries, failed episodes, escapes, prompts changed by junk."""
    with tempfile.TemporaryDirectory() as tmp:
        classes = fault_classes()
        rounds = [
            evolver_under_faults(Path(tmp), seed=s, n_tasks=12 if quick else 40) for s in range(2 if quick else 5)
        ]
        junk = critic_gives_junk(Path(tmp))
    kinds = sum((r.kinds for r in rounds), Counter())
    episodes = [e for r in rounds for e in r.episodes]
    failed = [e for e in episodes if e.error is not None]
    rows: list[list[Any]] = [[f"{k}: one fault, one retry", v["outcome"]] for k, v in classes.items()]
    rows += [[f"faults injected: {k}", kinds[k]] for k in FAULT_KINDS]
    rows += [
        ["requests the model server saw", sum(r.requests for r in rounds)],
        ["requests allowed by the retry budget", sum(r.calls_bound for r in rounds)],
        ["episodes", len(episodes)],
        ["episodes failed with a reason", sum(1 for e in failed if e.error)],
        ["episodes failed without a reason", sum(1 for e in failed if not e.error)],
        [
            "success rate, last round (mean over seeds)",
            round(sum(r.success_rates[-1] for r in rounds) / len(rounds), 3),
        ],
        ["exceptions escaping the loop", sum(1 for r in rounds if r.escaped)],
        ["prompts changed by an unparseable critique", int(junk.head_after != junk.head_before)],
        ["critic calls on junk (then skipped)", junk.critic_requests],
    ]
    notes = (
        f"Real openai SDK against a fault server on 127.0.0.1; client retries={RETRIES}, timeout={TIMEOUT}s, "
        f"max_response_bytes={CAP}. Seeded fault mix at {RATE:.0%} per kind over "
        f"{len(rounds)} seeds x 2 rounds. The junk critic's step: {junk.note!r}."
    )
    return {"title": "Faults from models", "rows": rows, "notes": notes}


if __name__ == "__main__":
    print(json.dumps(run(quick=True), indent=2))
