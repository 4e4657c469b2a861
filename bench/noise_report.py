"""``bench.noise``'s report: intervals over seeds, paired differences, the markdown, the plots, the keys.

A result holds per-seed figures only (``families → cells → condition → rho<k> → [per seed]``); every mean,
interval and verdict is computed here, so runs merged cell by cell are reported as one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evolve.intervals import Interval, paired_interval, seed_interval

METRICS = ("last", "epoch2", "epoch4", "auc", "cum")
LABELS = {"last": "last epoch", "epoch2": "epoch 2", "epoch4": "epoch 4", "auc": "area under the curve",
          "cum": "solved at least once"}  # fmt: skip
PAIRS = (("q_context", "similarity"), ("q_memory", "similarity"), ("q_context", "q_memory"))
NAMES = {"no_memory": "no memory", "similarity": "similarity", "q_memory": "one Q per memory",
         "q_context": "Q-memory (default: Q in context)"}  # fmt: skip
DEFAULT = "q_context"
"""The default memory's condition (``RetrievalConfig``: Q in context, neutral start)."""
Cells = Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]]


def rhos_of(cells: Cells) -> list[str]:
    """The ρ keys the family ran, in order (``rho0``, ``rho1``, …)."""
    return sorted({r for by_rho in cells.values() for r in by_rho}, key=lambda r: int(r[3:]))


def seeds_of(cells: Cells, cond: str, rho: str) -> Sequence[Mapping[str, Any]] | None:
    """A condition's per-seed figures at ``rho``; no memory ignores ratings, so its ρ = 0 run stands for all."""
    by_rho = cells.get(cond, {})
    return by_rho.get(rho) or (by_rho.get("rho0") if cond == "no_memory" else None)


def interval(cells: Cells, cond: str, rho: str, metric: str) -> Interval | None:
    runs = seeds_of(cells, cond, rho)
    if not runs or any(r.get(metric) is None for r in runs):
        return None
    return seed_interval([float(r[metric]) for r in runs])


def paired(cells: Cells, treatment: str, baseline: str, rho: str, metric: str) -> Interval | None:
    """``treatment − baseline`` seed by seed (None when either did not run)."""
    a, b = seeds_of(cells, treatment, rho), seeds_of(cells, baseline, rho)
    if not a or not b or len(a) != len(b) or any(r.get(metric) is None for r in (*a, *b)):
        return None
    return paired_interval(baseline=[float(r[metric]) for r in b], treatment=[float(r[metric]) for r in a])


def epoch_pairs(cells: Cells, treatment: str, baseline: str, rho: str) -> list[Interval]:
    """``treatment − baseline`` at every epoch, paired by seed."""
    a, b = seeds_of(cells, treatment, rho), seeds_of(cells, baseline, rho)
    if not a or not b:
        return []
    n = len(a[0]["per_epoch"])
    return [
        paired_interval(baseline=[r["per_epoch"][e] for r in b], treatment=[r["per_epoch"][e] for r in a])
        for e in range(n)
    ]


def verdict(iv: Interval) -> str:
    return "above" if iv.low > 0 else "below" if iv.high < 0 else "level"


def _cell(iv: Interval | None) -> str:
    return "not run" if iv is None else iv.text()


def family_section(name: str, fam: Mapping[str, Any]) -> list[str]:
    cells: Cells = fam["cells"]
    conds = [c for c in NAMES if c in cells]
    rhos = rhos_of(cells)
    lines = [f"### {name} ({fam['tasks']} tasks, {fam['epochs']} epochs)", ""]
    head = "| ρ | metric | " + " | ".join(NAMES[c] for c in conds) + " |"
    lines += [head, "|" + "---|" * (len(conds) + 2)]
    for rho in rhos:
        for metric in ("last", "epoch2", "epoch4", "auc"):
            row = [_cell(interval(cells, c, rho, metric)) for c in conds]
            if set(row) == {"not run"}:
                continue
            lines.append(f"| {int(rho[3:]) / 10:.1f} | {LABELS[metric]} | " + " | ".join(row) + " |")
    lines += ["", "Paired by seed (treatment − baseline):", ""]
    for rho in rhos:
        for treatment, baseline in PAIRS:
            parts = []
            for metric in ("last", "auc"):
                iv = paired(cells, treatment, baseline, rho, metric)
                if iv is not None:
                    parts.append(f"{LABELS[metric]} {iv.text()} ({verdict(iv)})")
            if parts:
                lines.append(
                    f"- ρ = {int(rho[3:]) / 10:.1f}, {NAMES[treatment]} − {NAMES[baseline]}: " + "; ".join(parts)
                )
    behind = [
        f"ρ = {int(rho[3:]) / 10:.1f} epoch {e + 1} ({iv.text()})"
        for rho in rhos
        for e, iv in enumerate(epoch_pairs(cells, DEFAULT, "similarity", rho))
        if iv.high < 0
    ]
    lines += ["", "Epochs where the default memory is behind similarity-only (paired interval below zero): "
              + (", ".join(behind) if behind else "none") + ".", ""]  # fmt: skip
    lines += ["Per seed, last epoch:", "", "| condition | ρ | seeds |", "|---|---|---|"]
    for cond in conds:
        for rho, runs in cells[cond].items():
            lines.append(f"| {cond} | {int(rho[3:]) / 10:.1f} | " + " ".join(f"{r['last']:.3f}" for r in runs) + " |")
    return [*lines, ""]


def expectations(result: Mapping[str, Any]) -> list[str]:
    """The issue's expectations, checked on what ran (reported whichever way they come out)."""
    fams = result["families"]
    bundled = [f for f in ("facility_codes", "lookalikes", "procedures", "changing_facts") if f in fams]
    out = []
    above = [
        f for f in bundled if (iv := paired(fams[f]["cells"], DEFAULT, "similarity", "rho2", "last")) and iv.low > 0
    ]
    out.append(f"- At ρ = 0.2, the default memory above similarity-only (paired interval above zero, last epoch) on "
               f"{len(above)} of {len(bundled)} bundled families ({', '.join(above) or 'none'}); expected: at least 3.")  # fmt: skip
    if "bfcl_simple_python" in fams:
        iv = paired(fams["bfcl_simple_python"]["cells"], DEFAULT, "similarity", "rho2", "last")
        out.append(
            f"- BFCL simple_python at ρ = 0.2, default − similarity: {_cell(iv)}" + (f" ({verdict(iv)})" if iv else "")
        )
    behind = [
        f"{f} ρ={int(rho[3:]) / 10:.1f} epoch {e + 1}"
        for f in bundled
        for rho in rhos_of(fams[f]["cells"])
        for e, iv in enumerate(epoch_pairs(fams[f]["cells"], DEFAULT, "similarity", rho))
        if iv.high < 0
    ]
    out.append("- The default memory (Q in context) behind similarity-only at some epoch on the bundled families: "
               + ("; ".join(behind) if behind else "at none") + ".")  # fmt: skip
    return out


def markdown(result: Mapping[str, Any]) -> str:
    intro = (
        f"Reader: {result['reader']}; seeds {result['seeds']}; ρ = share of ratings flipped before memory sees them "
        "(success scored by the true checker). Mean [95% interval over seeds]. A difference is called one only "
        "when its interval, paired by seed, excludes zero. No memory learns nothing from ratings: its ρ = 0 run "
        "stands for every ρ. Run: `python -m bench.noise` (see bench/noise.py)."
    )
    return page("Learning under wrong ratings", intro, expectations(result), result, family_section)


def page(
    title: str, intro: str, expected: list[str], result: Mapping[str, Any],
    section: Callable[[str, Mapping[str, Any]], list[str]],
) -> str:  # fmt: skip
    """A bench report: title, protocol, the expectations as measured, a section per family, the runtime."""
    lines = [f"# {title}", "", intro, "", "## Expectations, as measured", "", *expected, ""]
    for name, fam in result["families"].items():
        lines += section(name, fam)
    lines.append(f"Runtime: {result.get('seconds', 0):.0f} s on {result.get('machine', {}).get('cpu', '?')}.")
    return "\n".join(lines) + "\n"


def summary_keys(result: Mapping[str, Any]) -> dict[str, float]:
    """``noise_<family>_<condition>_rho<k>_{last,auc}_{mean,ci_low,ci_high}<suffix>`` and the paired
    ``noise_<family>_q_minus_similarity_rho<k>_last_…`` (the default memory, Q in context, against
    similarity; ``one_q_minus_similarity``: one Q per memory against it); suffix ``_rule`` for the rule reader."""
    suffix, out = result.get("suffix", ""), {}
    for name, fam in result["families"].items():
        cells: Cells = fam["cells"]
        for rho in rhos_of(cells):
            found = {f"{c}_{rho}_{m}": interval(cells, c, rho, m) for c in cells for m in ("last", "auc")}
            found[f"q_minus_similarity_{rho}_last"] = paired(cells, DEFAULT, "similarity", rho, "last")
            found[f"one_q_minus_similarity_{rho}_last"] = paired(cells, "q_memory", "similarity", rho, "last")
            for key, iv in found.items():
                if iv is not None:
                    base = f"noise_{name}_{key}"
                    out.update({f"{base}_mean{suffix}": round(iv.mean, 4), f"{base}_ci_low{suffix}": round(iv.low, 4),
                                f"{base}_ci_high{suffix}": round(iv.high, 4)})  # fmt: skip
    return out


def plot_family(result: Mapping[str, Any], family: str, path: Path) -> Path:
    """Left: last-epoch success against ρ per condition (95% intervals); right: the curves at ρ = 0.2."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells: Cells = result["families"][family]["cells"]
    rhos = rhos_of(cells)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for cond in (c for c in NAMES if c in cells):
        ivs = [(int(r[3:]) / 10, interval(cells, cond, r, "last")) for r in rhos]
        xs = [x for x, iv in ivs if iv is not None]
        got = [iv for _, iv in ivs if iv is not None]
        left.errorbar(xs, [iv.mean for iv in got], yerr=[[iv.mean - iv.low for iv in got], [iv.high - iv.mean for iv in got]],
                      marker="o", capsize=3, label=NAMES[cond])  # fmt: skip
        runs = seeds_of(cells, cond, "rho2")
        if runs:
            curve = [sum(r["per_epoch"][e] for r in runs) / len(runs) for e in range(len(runs[0]["per_epoch"]))]
            right.plot(range(1, len(curve) + 1), curve, marker="o", label=NAMES[cond])
    left.set(xlabel="ρ (share of wrong ratings)", ylabel="success, last epoch", ylim=(-0.05, 1.05), title=family)
    right.set(xlabel="epoch", ylabel="success (true checker)", ylim=(-0.05, 1.05), title=f"{family}, ρ = 0.2")
    left.legend(fontsize=8)
    if right.lines:  # a run without ρ = 0.2 has no curves there
        right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
