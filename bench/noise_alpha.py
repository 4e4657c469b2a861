"""Today's Q update against ``MemoryConfig.alpha_schedule="visits"`` under wrong ratings, paired by seed.

``python -m bench.noise`` runs the default memory (``q_context``) with today's constant α (``noise.json``)
and, with ``--alpha-schedule visits --alpha-floor F``, with the step ``max(F, 1/(n + 2))`` after n
rewards (``noise_visits<F in hundredths>.json``), on the same seeds, tasks and wrong ratings. This pairs
them: per ρ, the difference (visits − constant) in last-epoch success and in the area under the curve,
per family and pooled over the families (each seed's mean over the families, so the pairs stay seeds),
with ``evolve.intervals.paired_interval``.

The gate (issue 40, item 3b): a floor is adopted only if, at every ρ > 0 that ran, it is above today's
rule pooled (paired interval above zero on last-epoch success or on the area under the curve) and below it
on no family and on neither metric (no paired interval below zero), and below it on no family at ρ = 0.

Run: python -m bench.noise_alpha --out /tmp/robust-q [--floors 0.1 0.2] [--condition q_context]
Writes <out>/noise_alpha.{json,md}.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.noise import alpha_tag
from bench.noise_report import LABELS, rhos_of, seeds_of, verdict
from connectors import ConfigError
from evolve.intervals import Interval, paired_interval

METRICS = ("last", "auc")
Report = Mapping[str, Any]
Rows = Mapping[str, Mapping[str, Mapping[str, Interval]]]


def per_seed(report: Report, family: str, condition: str, rho: str, metric: str) -> list[float] | None:
    runs = seeds_of(report["families"].get(family, {}).get("cells", {}), condition, rho)
    return None if not runs else [float(r[metric]) for r in runs]


def seed_means(by_family: Mapping[str, Sequence[float]]) -> list[float]:
    """Each seed's mean over the families (the pooled figure, one value per seed)."""
    return [sum(v) / len(v) for v in zip(*by_family.values(), strict=True)]


def compare(today: Report, rule: Report, condition: str = "q_context") -> Rows:
    """ρ key → family (and ``"pooled"``) → metric → the paired interval of ``rule − today``, over the
    families and ρ both reports ran."""
    if today["seeds"] != rule["seeds"]:
        raise ConfigError(f"the reports hold different seeds: {today['seeds']} and {rule['seeds']}; run both alike")
    families = [f for f in today["families"] if f in rule["families"]]
    out: dict[str, dict[str, dict[str, Interval]]] = {}
    for rho in rhos_of(today["families"][families[0]]["cells"]) if families else []:
        rows: dict[str, dict[str, Interval]] = {}
        for metric in METRICS:
            base, treat = {}, {}
            for family in families:
                a, b = per_seed(today, family, condition, rho, metric), per_seed(rule, family, condition, rho, metric)
                if a is not None and b is not None:
                    base[family], treat[family] = a, b
                    rows.setdefault(family, {})[metric] = paired_interval(baseline=a, treatment=b)
            if base:
                rows.setdefault("pooled", {})[metric] = paired_interval(
                    baseline=seed_means(base), treatment=seed_means(treat)
                )
        if rows:
            out[rho] = rows
    return out


def gate(rows: Rows) -> tuple[bool, list[str]]:
    """Whether a rule passes the module's gate, and why not (one line per failed check)."""
    why = []
    for rho, by in rows.items():
        for family, metrics in by.items():
            if family == "pooled":
                continue
            for metric, iv in metrics.items():
                if iv.high < 0:
                    why.append(
                        f"ρ = {int(rho[3:]) / 10:.1f}: below today's on {family}, {LABELS[metric]} ({iv.text()})"
                    )
        if rho != "rho0" and not any(iv.low > 0 for iv in by.get("pooled", {}).values()):
            why.append(f"ρ = {int(rho[3:]) / 10:.1f}: not above today's pooled on either metric")
    return not why, why


def markdown(today: Report, compared: Mapping[str, tuple[float, Rows]], condition: str) -> str:
    """The report: per floor, the paired table (ρ × metric × family and pooled) and the gate's verdict."""
    lines = ["# Q update under wrong ratings: visits-weighted steps against today's constant α", "",
             f"Reader: {today['reader']}; seeds {today['seeds']}; condition {condition}. Paired by seed, "
             "visits − constant; pooled: each seed's mean over the families. Above/below: the 95% interval "
             "excludes zero. Run: `python -m bench.noise_alpha` (see bench/noise_alpha.py).", ""]  # fmt: skip
    for floor, rows in compared.values():
        passed, why = gate(rows)
        families = list(next(iter(rows.values()), {}))
        lines += [f"## alpha_schedule = visits, alpha_floor = {floor}", "",
                  "| ρ | metric | " + " | ".join(families) + " |", "|" + "---|" * (len(families) + 2)]  # fmt: skip
        for rho, by in rows.items():
            for metric in METRICS:
                cells = [f"{by[f][metric].text()} ({verdict(by[f][metric])})" if metric in by.get(f, {}) else "not run"
                         for f in families]  # fmt: skip
                lines.append(f"| {int(rho[3:]) / 10:.1f} | {LABELS[metric]} | " + " | ".join(cells) + " |")
        lines += ["", "Gate: passed." if passed else "Gate: not passed:", *[f"- {w}" for w in why], ""]
    return "\n".join(lines) + "\n"


def as_json(rows: Rows) -> dict[str, Any]:
    return {rho: {f: {m: {"mean": round(iv.mean, 4), "ci_low": round(iv.low, 4), "ci_high": round(iv.high, 4)}
                      for m, iv in metrics.items()} for f, metrics in by.items()} for rho, by in rows.items()}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.noise_alpha", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="the folder bench.noise wrote both reports to")
    p.add_argument("--floors", nargs="+", type=float, default=[0.1, 0.2], metavar="F")
    p.add_argument("--condition", default="q_context")
    args = p.parse_args(argv)

    def read(tag: str) -> dict[str, Any]:
        found: dict[str, Any] = json.loads((args.out / f"noise{tag}.json").read_text(encoding="utf-8"))
        return found

    today = read("")
    compared = {}
    for floor in args.floors:
        tag = alpha_tag("visits", floor)
        compared[tag] = (floor, compare(today, read(tag), args.condition))
    result = {tag: {"alpha_floor": floor, "passed": gate(rows)[0], "why": gate(rows)[1], "rows": as_json(rows)}
              for tag, (floor, rows) in compared.items()}  # fmt: skip
    (args.out / "noise_alpha.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    text = markdown(today, compared, args.condition)
    (args.out / "noise_alpha.md").write_text(text, encoding="utf-8")
    print(text)
    return result


if __name__ == "__main__":
    main()
