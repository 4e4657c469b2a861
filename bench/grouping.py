"""Intent grouping, measured on every bundled family: which threshold groups a task's paraphrases and
never merges two different tasks (issue 20, item 4).

Writes that name their task (``WriteEntry.task``, as the ``Evolver`` does) are grouped by task and never
merged. Writes without one (``evolve serve``, a LangChain app) are grouped by cosine: a new intent joins
the most similar key at or above ``MemoryConfig.group_threshold``. This benchmark replays every phrasing
of every task of a family through ``memory.write.grouping.assign_groups`` (the store's own grouping), in
shuffled orders, at a ladder of thresholds, and counts

- **merged tasks**: tasks that share a group with a different task (what must be zero), and
- **phrasings grouped**: the share of a task's phrasings that land in its largest group (1 = all its
  paraphrases group together; 1/5 = none do).

The calibrated threshold is the lowest threshold of the ladder that merges no task on any family and
order: grouping that never merges, with as many paraphrases grouped as the embedder allows.

Run: python -m bench.grouping [--orders 5] [--families facility_codes ...]
Writes bench/results/grouping.{json,md} and the grouping_* keys of bench/results/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import machine, merge_summary
from connectors import Embedder, load_embedder
from evolve import load_tasks
from evolve.envs.bundled import bundled_root
from memory import MemoryConfig
from memory.write.grouping import assign_groups

RESULTS = Path(__file__).resolve().parent / "results"
DATA = bundled_root()
FAMILIES = ("facility_codes", "changing_facts", "procedures", "lookalikes", "format_rules")
FORMER = 0.90  # the default before this calibration
THRESHOLDS = (0.80, 0.85, 0.88, 0.90, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 1.0)


def phrasings(family: str) -> tuple[list[str], list[str]]:
    """(texts, task ids): every phrasing of every task of a bundled family."""
    texts, owners = [], []
    for task in load_tasks(DATA / f"{family}.jsonl"):
        for text in [task.prompt, *task.meta.get("paraphrases", [])]:
            texts.append(text)
            owners.append(task.id)
    return texts, owners


def grouping_at(vecs: np.ndarray, owners: Sequence[str], threshold: float, order: np.ndarray) -> dict[str, float]:
    """Group the phrasings in ``order`` at ``threshold``; merged tasks and the share of phrasings grouped."""
    labels, _ = assign_groups(vecs[order], np.empty((0, vecs.shape[1]), dtype=np.float32), threshold)
    owner_of = [owners[i] for i in order]
    tasks_in: dict[int, set[str]] = {}
    for label, owner in zip(labels.tolist(), owner_of, strict=True):
        tasks_in.setdefault(label, set()).add(owner)
    merged = {t for group in tasks_in.values() if len(group) > 1 for t in group}
    per_task: dict[str, Counter[int]] = {}
    for label, owner in zip(labels.tolist(), owner_of, strict=True):
        per_task.setdefault(owner, Counter())[label] += 1
    grouped = np.mean([c.most_common(1)[0][1] / sum(c.values()) for c in per_task.values()])
    return {"merged_tasks": len(merged) / len(per_task), "phrasings_grouped": float(grouped)}


def cosines(vecs: np.ndarray, owners: Sequence[str]) -> dict[str, float | None]:
    """Mean cosine of two phrasings of one task, of a task's nearest other task, and the highest of those."""
    sims = vecs @ vecs.T
    same = np.equal.outer(np.asarray(owners), np.asarray(owners))
    upper = np.triu(np.ones_like(same), k=1).astype(bool)
    nearest_other = np.where(same, -1.0, sims).max(axis=1)
    pairs = sims[same & upper]  # none for a family without paraphrases
    return {
        "same_task_mean": float(pairs.mean()) if pairs.size else None,
        "same_task_min": float(pairs.min()) if pairs.size else None,
        "nearest_other_task_mean": float(nearest_other.mean()),
        "nearest_other_task_max": float(nearest_other.max()),
    }


def run(families: Sequence[str], orders: int, embedder: Embedder) -> dict[str, Any]:
    out: dict[str, Any] = {
        "embedder": embedder.name,
        "orders": orders,
        "default": MemoryConfig().group_threshold,
        "former": FORMER,
        "families": {},
    }
    for family in families:
        texts, owners = phrasings(family)
        vecs = np.asarray(embedder.embed(texts), dtype=np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        shuffles = [np.random.default_rng(seed).permutation(len(texts)) for seed in range(orders)]
        ladder = {}
        for t in THRESHOLDS:
            runs = [grouping_at(vecs, owners, t, order) for order in shuffles]
            ladder[f"{t:.2f}"] = {
                "merged_tasks": max(r["merged_tasks"] for r in runs),
                "phrasings_grouped": float(np.mean([r["phrasings_grouped"] for r in runs])),
            }
        out["families"][family] = {
            "tasks": len(set(owners)),
            "phrasings": len(texts),
            "cosines": cosines(vecs, owners),
            "ladder": ladder,
        }
    safe = [
        t for t in THRESHOLDS if all(f["ladder"][f"{t:.2f}"]["merged_tasks"] == 0 for f in out["families"].values())
    ]
    out["calibrated"] = min(safe) if safe else None
    return out


def markdown(r: dict[str, Any]) -> str:
    cal, default, former = r["calibrated"], r["default"], r["former"]
    lines = [
        "# Intent grouping: paraphrases together, different tasks apart",
        "",
        f"Embedder {r['embedder']}; every phrasing of every task replayed through the store's grouping "
        f"(`memory.write.grouping.assign_groups`) in {r['orders']} shuffled orders. *Merged* = share of tasks that "
        "share a group with another task (worst order); *grouped* = mean share of a task's phrasings in its "
        "largest group (1 = all paraphrases together).",
        "",
        f"Calibrated threshold (lowest that merges no task on any family): **{cal}**; the store's default: "
        f"{default} (before this calibration: {former}).",
        "",
        "| family | tasks | same task cos (mean / min) | nearest other task cos (mean / max) "
        f"| merged at {former} | grouped at {former} | merged at {cal} | grouped at {cal} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, f in r["families"].items():
        c, at = f["cosines"], f["ladder"]
        d, k = at[f"{former:.2f}"], at[f"{cal:.2f}"] if cal is not None else None
        calibrated = f"{k['merged_tasks']:.2f} | {k['phrasings_grouped']:.2f}" if k else "- | -"
        lines.append(
            f"| {name} | {f['tasks']} | {_num(c['same_task_mean'])} / {_num(c['same_task_min'])} "
            f"| {c['nearest_other_task_mean']:.3f} / {c['nearest_other_task_max']:.3f} "
            f"| {d['merged_tasks']:.2f} | {d['phrasings_grouped']:.2f} | {calibrated} |"
        )
    lines += ["", "Per threshold (merged / grouped):", "", "| threshold | " + " | ".join(r["families"]) + " |"]
    lines.append("|---|" + "---|" * len(r["families"]))
    for t in THRESHOLDS:
        cells = [
            f"{f['ladder'][f'{t:.2f}']['merged_tasks']:.2f} / {f['ladder'][f'{t:.2f}']['phrasings_grouped']:.2f}"
            for f in r["families"].values()
        ]
        lines.append(f"| {t:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def summary_keys(r: dict[str, Any]) -> dict[str, Any]:
    keys: dict[str, Any] = {"grouping_threshold_calibrated": r["calibrated"]}
    for name, f in r["families"].items():
        d = f["ladder"][f"{r['former']:.2f}"]
        keys[f"grouping_{name}_merged_tasks_at_0_90"] = d["merged_tasks"]
        keys[f"grouping_{name}_phrasings_grouped_at_0_90"] = round(d["phrasings_grouped"], 4)
        if r["calibrated"] is not None:
            k = f["ladder"][f"{r['calibrated']:.2f}"]
            keys[f"grouping_{name}_phrasings_grouped_at_calibrated"] = round(k["phrasings_grouped"], 4)
    return keys


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(
        prog="python -m bench.grouping", description=__doc__.splitlines()[0] if __doc__ else None
    )
    p.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    p.add_argument("--orders", type=int, default=5, help="shuffled arrival orders per threshold")
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    result = {"machine": machine(), **run(args.families, args.orders, load_embedder(args.embedder))}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "grouping.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (args.out / "grouping.md").write_text(markdown(result), encoding="utf-8")
    merge_summary(args.out / "summary.json", summary_keys(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
