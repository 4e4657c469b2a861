"""The report of ``bench.strategy_memory``: per family the cells, the paired differences against episodic
memory with a verdict each, what recall drew, the memory's size at the end; the ``strategy_*`` summary keys.

A verdict is ``above`` or ``below`` when the 95% interval of the paired difference (over seeds) excludes
zero, ``level`` when it does not (``evolve.intervals.paired_interval``); one seed gives no interval and no claim.

Example:
    >>> verdict(paired_interval(baseline=[0.5, 0.5, 0.6], treatment=[0.7, 0.8, 0.8]))
    'above'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from evolve.intervals import Interval, paired_interval, seed_interval

BASELINE = "episodic"
TREATMENTS = ("strategies", "both")
METRICS = {"memrl": ("last", "cum"), "transfer": ("last", "cum", "transfer")}


def verdict(d: Interval) -> str:
    """``above``, ``below`` or ``level`` as the paired interval says; ``1 seed`` when there is none."""
    if d.n < 2:
        return "1 seed"
    if not d.excludes_zero:
        return "level"
    return "above" if d.mean > 0 else "below"


def as_dict(i: Interval) -> dict[str, Any]:
    """Mean and interval rounded (a rounded -0.0 reads 0.0), with the per-seed values."""
    return {"mean": round(i.mean, 4) + 0.0, "ci": [round(i.low, 4) + 0.0, round(i.high, 4) + 0.0],
            "values": list(i.values)}  # fmt: skip


def drawn(cell: Mapping[str, Any]) -> dict[str, Any]:
    """What recall drew, averaged over seeds: per round the share of selected memories that were strategies,
    and in the last round the recalls, the empty ones and the kinds selected (means per seed)."""
    seeds = [c["recalled"] for c in cell["per_seed"]]
    share = []
    for r in range(len(seeds[0])):
        rounds = [s[r] for s in seeds]
        share.append(
            round(float(np.mean([x["strategies"] / max(1, x["episodes"] + x["strategies"]) for x in rounds])), 4)
        )
    last = {k: round(float(np.mean([s[-1][k] for s in seeds])), 2) for k in seeds[0][-1]}
    upkeep = [c["upkeep"] for c in cell["per_seed"]]
    made = [{k: round(float(np.mean([u[r][k] for u in upkeep])), 2) for k in ("written", "skipped")}
            for r in range(len(upkeep[0]))]  # fmt: skip
    return {"strategy_share_per_round": share, "last_round": last, "consolidated_per_round": made}


def sizes(cell: Mapping[str, Any]) -> dict[str, float]:
    """The memory at the end (after the last round's consolidation), means over seeds."""
    keys = cell["per_seed"][0]["sizes"]
    return {k: round(float(np.mean([c["sizes"][k] for c in cell["per_seed"]])), 2) for k in keys}


def summarise_family(cells: dict[str, Any], protocol: str) -> dict[str, Any]:
    """The family's cells (with transfer intervals under that protocol), the paired differences against
    ``episodic`` per metric, what recall drew and the memory's size, per condition."""
    if protocol == "transfer":
        for cell in cells.values():
            iv = seed_interval([c["transfer"] for c in cell["per_seed"]])
            cell["transfer"], cell["transfer_ci"], cell["transfer_per_seed"] = (
                round(iv.mean, 4), [round(iv.low, 4), round(iv.high, 4)], list(iv.values)
            )  # fmt: skip
    differences: dict[str, Any] = {}
    base = cells.get(BASELINE)
    for name in TREATMENTS:
        if base is None or name not in cells:
            continue
        differences[name] = {}
        for key in METRICS[protocol]:
            d = paired_interval(baseline=base[f"{key}_per_seed"], treatment=cells[name][f"{key}_per_seed"])
            differences[name][key] = {**as_dict(d), "verdict": verdict(d)}
    return {
        "conditions": cells,
        "differences": differences,
        "recalled": {name: drawn(cell) for name, cell in cells.items()},
        "sizes": {name: sizes(cell) for name, cell in cells.items()},
    }


# ---------------------------------------------------------------- summary keys
def summary_keys(result: Mapping[str, Any]) -> dict[str, Any]:
    """``strategy_<family>_<condition>_<metric>`` (+ ``_lo``, ``_hi``), ``strategy_<family>_<condition>[_<metric>]
    _minus_episodic`` (+ ``_lo``, ``_hi``; the last epoch's has no metric in its name), the memory's size at the
    end ``strategy_<family>_<condition>_memory_size``, and ``strategy_seeds`` (and ``strategy_bfcl_seeds``)."""
    flat: dict[str, Any] = {}
    seeds = {"memrl": "strategy_seeds", "transfer": "strategy_bfcl_seeds"}
    for family, block in result["families"].items():
        protocol = block["protocol"]
        for cond, cell in block["conditions"].items():
            stem = f"strategy_{family}_{cond}"
            for key in METRICS[protocol]:
                iv = seed_interval(cell[f"{key}_per_seed"])
                flat[f"{stem}_{key}"], flat[f"{stem}_{key}_lo"], flat[f"{stem}_{key}_hi"] = (
                    round(iv.mean, 4), round(iv.low, 4), round(iv.high, 4)
                )  # fmt: skip
            flat[f"{stem}_memory_size"] = block["sizes"][cond]["valid"]
            flat[f"{stem}_strategies_at_end"] = block["sizes"][cond]["strategies"]
            flat[seeds[protocol]] = len(cell["per_seed"])
        for cond, diffs in block["differences"].items():
            for key, d in diffs.items():
                name = f"strategy_{family}_{cond}_minus_episodic" if key == "last" else (
                    f"strategy_{family}_{cond}_{key}_minus_episodic"
                )  # fmt: skip
                flat[name], flat[f"{name}_lo"], flat[f"{name}_hi"] = d["mean"], d["ci"][0], d["ci"][1]
    if "min_size" in result.get("settings", {}):
        flat["strategy_min_size"] = result["settings"]["min_size"]
    return flat


# ---------------------------------------------------------------- markdown
def _row(cond: str, cell: Mapping[str, Any], metrics: Sequence[str], block: Mapping[str, Any]) -> str:
    figs = [seed_interval(cell[f"{k}_per_seed"]).text() for k in metrics]
    size = block["sizes"][cond]
    share = " ".join(f"{x:.2f}" for x in block["recalled"][cond]["strategy_share_per_round"])
    curve = " ".join(f"{x:.2f}" for x in cell["per_epoch"])
    return (
        f"| {cond} | {' | '.join(figs)} | {curve} | {share} | {size['episodes']:g} + {size['strategies']:g} "
        f"({size['superseded_strategies']:g}) | {cell['tokens']:,} | {cell['seconds']:.0f} |"
    )


def _made(rounds: Sequence[Mapping[str, float]]) -> str:
    if not rounds:
        return ""
    each = ", ".join(f"{r['written']:g} written / {r['skipped']:g} yielded none" for r in rounds)
    return f"; strategies after each round (mean per seed): {each}"


def _protocol(block: Mapping[str, Any]) -> str:
    seeds = f"seeds {', '.join(map(str, block['seeds']))}"
    if block["protocol"] == "transfer":
        return (f"{block['tasks']} train tasks (MemRL epochs: last, cum), then {block['test_tasks']} unseen test tasks "
                f"once with memory frozen (transfer); {seeds} (split and order).")  # fmt: skip
    said = "in one of its paraphrases per round" if block["paraphrases"] else "as written"
    return f"{block['tasks']} tasks, each asked {said} (MemRL protocol); {seeds} (task order, paraphrase choice)."


def family_lines(family: str, block: Mapping[str, Any]) -> list[str]:
    metrics = METRICS[block["protocol"]]
    head = "memory at end: episodes + strategies (superseded)"
    lines = [
        "",
        f"## {family}",
        "",
        f"{_protocol(block)} {block['note']} Wall time {block['seconds']:.0f} s.",
        "",
        f"| condition | {' | '.join(metrics)} | success per epoch | strategy share of recalls per round | {head} "
        "| tokens | wall s |",
        "|---|" + "---|" * (len(metrics) + 6),
        *(_row(c, cell, metrics, block) for c, cell in block["conditions"].items()),
        "",
    ]
    for cond, diffs in block["differences"].items():
        parts = [
            f"{key} {d['mean']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}] → **{d['verdict']}**"
            for key, d in diffs.items()
        ]
        lines.append(f"- {cond} − episodic (paired over {len(diffs['last']['values'])} seeds): " + "; ".join(parts))
    for cond, seen in block["recalled"].items():
        last = seen["last_round"]
        lines.append(
            f"- {cond}, last epoch's recalls (mean per seed): {last['recalls']:g} recalls, {last['empty']:g} drew "
            f"nothing; selected {last['episodes']:g} episodes and {last['strategies']:g} strategies"
            + _made(seen["consolidated_per_round"])
        )
    return lines


def markdown(result: Mapping[str, Any]) -> str:
    s, m = result["settings"], result["machine"]
    lines = [
        "# Strategy memory vs episodic memory vs both",
        "",
        f"Model {s['model']}, embedder {s['embedder']}; {s['epochs']} epochs over the same tasks; consolidation "
        f"by {s['consolidation']} after every round (`memory_upkeep`, as `evolve job` runs it), intent groups of at "
        f"least {s['min_size']} episodes. Last = success in the final epoch, cum = share of tasks solved at least "
        "once, transfer = success on unseen tasks with memory frozen. Figures: mean [95% interval over seeds]; "
        "differences paired by seed; a verdict is above/below only when its interval excludes zero, else level.",
        f"Machine: {m['cpu_count']} CPUs ({m['cpu']}), shared with other work; wall time of the families "
        f"{sum(b['seconds'] for b in result['families'].values()):.0f} s.",
        "",
        "Conditions:",
        "",
        *(f"- `{c}`: {about}" for c, about in result["conditions"].items()),
    ]
    for family, block in result["families"].items():
        lines += family_lines(family, block)
    return "\n".join(lines) + "\n"
