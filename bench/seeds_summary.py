"""Every learning figure over seeds, in one place: the families × conditions of all the runs kept in
``bench/results/seeds/`` (each a ``python -m bench.learning --seeds 5 --paraphrases …`` report), with the
paired differences that decide whether one condition is above another.

Runs are merged cell by cell; a (family, condition) cell found in two runs, or runs made with different
epochs, seeds or paraphrase settings, is an error: pairing seeds across runs is only fair when every run
asked the same tasks in the same orders and phrasings. Runs made before failure memories stopped keeping
the wrong answer (2026-11-26: their settings name no ``failure_keeps``) have their conditions renamed to
what they measured (``FORMER_NAMES``).

Run: python -m bench.seeds_summary   (writes bench/results/seeds/README.md and the learning_* keys of
bench/results/summary.json)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.common import merge_summary
from bench.learning_report import COMPARED, _verdict, interval_of, summary_keys
from connectors import ConfigError

RESULTS = Path(__file__).resolve().parent / "results"
SEEDS = RESULTS / "seeds"
CONDITIONS = (
    "no_memory", "similarity", "q_memory", "similarity_keeps_answer", "q_memory_keeps_answer",
    "q_context", "q_context_keeps_answer", "q_memory_writer",
)  # fmt: skip
FORMER_NAMES = {
    "similarity": "similarity_keeps_answer",
    "q_memory": "q_memory_keeps_answer",
    "q_context": "q_context_keeps_answer",
    "q_memory_feedback_only": "q_memory",  # the same store and text as today's default (memory.write.writer.NOT_KEPT)
}
"""A condition's name in a run made before ``MemoryConfig.failure_keeps`` → what it measured, by today's names.
(``q_memory_writer`` stores a failure as the lesson and the feedback either way; ``no_memory`` stores none.)"""
PROTOCOL = ("model", "embedder", "epochs", "seeds", "paraphrases")


def merge(paths: Sequence[Path]) -> dict[str, Any]:
    """One result with every cell of ``paths``; ConfigError on a cell twice or a different protocol."""
    merged: dict[str, Any] = {"envs": {}, "runs": []}
    protocol: dict[str, Any] | None = None
    for path in paths:
        run = json.loads(path.read_text(encoding="utf-8"))
        mine = {k: run["settings"].get(k) for k in PROTOCOL}
        if protocol is not None and mine != protocol:
            raise ConfigError(f"{path.name} was run with {mine}, the others with {protocol}: seeds cannot be paired")
        protocol = mine
        merged["runs"].append({"file": path.name, "seconds": run["seconds"], "machine": run["machine"]["cpu"]})
        renamed = {} if "failure_keeps" in run["settings"] else FORMER_NAMES
        for env, cells in run["envs"].items():
            into = merged["envs"].setdefault(env, {"tasks": cells["tasks"], "conditions": {}})
            for cond, cell in cells["conditions"].items():
                if cell.get("status") != "ok":
                    continue
                cond = renamed.get(cond, cond)
                if cond in into["conditions"]:
                    raise ConfigError(f"{env} / {cond} is in two runs (the second: {path.name})")
                into["conditions"][cond] = cell
    merged["settings"] = protocol or {}
    return merged


def markdown(m: Mapping[str, Any]) -> str:
    s = m["settings"]
    lines = [
        "# Learning over seeds: every family, every memory condition",
        "",
        f"{s.get('model')} + {s.get('embedder')}; {s.get('epochs')} epochs over each family's tasks; "
        f"paraphrases {'on' if s.get('paraphrases') else 'off'}; seeds {s.get('seeds')} (task order and "
        "paraphrase choice). Mean [95% interval over seeds]; *last* = success in the last epoch, *cum* = "
        "solved at least once. A difference is called one only when its paired interval excludes zero.",
        "",
        "| family | " + " | ".join(c for c in CONDITIONS) + " |",
        "|---|" + "---|" * len(CONDITIONS),
    ]
    for env, cells in m["envs"].items():
        row = []
        for cond in CONDITIONS:
            cell = cells["conditions"].get(cond)
            row.append(
                "not run" if cell is None else f"{interval_of(cell, 'last').text()} / {interval_of(cell, 'cum').text()}"
            )
        lines.append(f"| {env} ({cells['tasks']}) | " + " | ".join(row) + " |")
    lines += ["", "Paired differences:", ""]
    for env, cells in m["envs"].items():
        for treatment, baseline, title in COMPARED:
            q, b = cells["conditions"].get(treatment), cells["conditions"].get(baseline)
            if q and b:
                parts = [_verdict(q, b, key, label) for key, label in (("last", "last epoch"), ("cum", "cumulative"))]
                lines.append(f"- **{env}**, {title}: " + "; ".join(parts) + ".")
    lines += ["", "Per seed (seeds in the order above), last epoch / cumulative:", ""]
    lines += ["| family | condition | last | cum |", "|---|---|---|---|"]
    for env, cells in m["envs"].items():
        for cond in CONDITIONS:
            cell = cells["conditions"].get(cond)
            if cell is not None:
                last, cum = (" ".join(f"{v:.3f}" for v in cell[f"{key}_per_seed"]) for key in ("last", "cum"))
                lines.append(f"| {env} | {cond} | {last} | {cum} |")
    lines += ["", "Runs: " + ", ".join(f"`{r['file']}` ({r['seconds']:.0f} s, {r['machine']})" for r in m["runs"])]
    return "\n".join(lines) + "\n"


def main() -> dict[str, Any]:
    paths = sorted(p for p in SEEDS.glob("*.json") if p.name != "summary.json")
    merged = merge(paths)
    (SEEDS / "README.md").write_text(markdown(merged), encoding="utf-8")
    merge_summary(RESULTS / "summary.json", summary_keys(merged))
    print(markdown(merged))
    return merged


if __name__ == "__main__":
    main()
