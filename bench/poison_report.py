"""``bench.poison``'s report: intervals over seeds, the expectations checked, the markdown, plots and keys.

A result holds per-seed figures (``families → cells → condition → "pi3/import/quarantine" → [per seed]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.noise_report import page
from evolve.intervals import Interval, paired_interval, seed_interval

NAMES = {"similarity": "similarity", "q_memory": "one Q per memory", "q_context": "Q-memory (default: in context)"}
DEFAULT = "q_context"
"""The default memory's condition (``RetrievalConfig``: Q in context, neutral start)."""
DEFENCE_KEYS = {"none": "", "neutral": "_neutral", "quarantine": "_trust"}
Cells = Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]]


def parts(key: str) -> tuple[float, str, str]:
    """``"pi3/import/quarantine"`` → (0.3, "import", "quarantine"); ``"pi0"`` → (0.0, "-", "-")."""
    head, *rest = key.split("/")
    return int(head[2:]) / 10, *(rest or ["-", "-"])  # type: ignore[return-value]


def stat(runs: Sequence[Mapping[str, Any]], metric: str) -> Interval:
    return seed_interval([float(r[metric]) for r in runs])


def _mean(runs: Sequence[Mapping[str, Any]], metric: str) -> float:
    return sum(float(r[metric]) for r in runs) / len(runs)


def family_section(name: str, fam: Mapping[str, Any]) -> list[str]:
    cells: Cells = fam["cells"]
    conds = [c for c in NAMES if c in cells]
    keys = list(dict.fromkeys(k for c in conds for k in cells[c]))
    lines = [f"### {name} ({fam['tasks']} tasks, {fam['epochs']} epochs)", "",
             "| π | path | defence | " + " | ".join(f"{NAMES[c]}: last / poison recall" for c in conds) + " |",
             "|" + "---|" * (3 + len(conds))]  # fmt: skip
    for key in keys:
        pi, path, defence = parts(key)
        row = []
        for c in conds:
            runs = cells[c].get(key)
            row.append("not run" if not runs else f"{stat(runs, 'last').text()} / {_mean(runs, 'poison_recall'):.3f}")
        lines.append(f"| {pi:.1f} | {path} | {defence} | " + " | ".join(row) + " |")
    lines += ["", "Poison recall rate per epoch (mean over seeds), π = 0.3:", ""]
    for c in conds:
        for key, runs in cells[c].items():
            if key.startswith("pi3/"):
                curve = [
                    sum(r["poison_recall_per_epoch"][e] for r in runs) / len(runs)
                    for e in range(len(runs[0]["per_epoch"]))
                ]
                lines.append(f"- {NAMES[c]}, {key[4:]}: " + " ".join(f"{x:.2f}" for x in curve))
    lines += ["", "Per seed, last epoch:", "", "| condition | cell | seeds |", "|---|---|---|"]
    for c in conds:
        for key, runs in cells[c].items():
            lines.append(f"| {c} | {key} | " + " ".join(f"{r['last']:.3f}" for r in runs) + " |")
    return [*lines, ""]


def expectations(result: Mapping[str, Any]) -> list[str]:
    """The issue's expectations at π = 0.3, checked on what ran, whichever way they come out."""
    out = []
    for name, fam in result["families"].items():
        cells: Cells = fam["cells"]
        for path in ("import", "promote"):
            q, s = (
                cells.get(DEFAULT, {}).get(f"pi3/{path}/none"),
                cells.get("similarity", {}).get(f"pi3/{path}/none"),
            )
            if q and s:
                qr, sr = _mean(q, "poison_recall"), _mean(s, "poison_recall")
                half = "at most half" if qr <= sr / 2 else "more than half"
                diff = paired_interval(baseline=[r["last"] for r in s], treatment=[r["last"] for r in q])
                out.append(f"- {name}, {path}: poison recall in the last epoch, Q-memory {qr:.3f} vs similarity {sr:.3f} "
                           f"({half} of similarity's); success Q-memory − similarity {diff.text()}")  # fmt: skip
            for cond in (DEFAULT, "similarity"):
                clean, trust = cells.get(cond, {}).get("pi0"), cells.get(cond, {}).get(f"pi3/{path}/quarantine")
                if clean and trust:
                    c, t = stat(clean, "last"), stat(trust, "last")
                    inside = "inside" if c.low <= t.mean <= c.high else "outside"
                    out.append(f"- {name}, {path}, {NAMES[cond]} with quarantine at π = 0.3: {t.text()}, {inside} "
                               f"the clean run's interval {c.text()}")  # fmt: skip
    return out


def markdown(result: Mapping[str, Any]) -> str:
    intro = (
        f"Reader: {result['reader']}; seeds {result['seeds']}. π = share of the memory written by a second writer "
        "whose wrong answers are stored as successes, rated good twice (Q ≈ 0.51). *last* = success in the last "
        "epoch, mean [95% interval over seeds]; *poison recall* = share of the last epoch's recalls that selected "
        "a poisoned memory (mean over seeds). Paths and defences: see bench/poison.py. Run: `python -m bench.poison`."
    )
    return page("Poisoned memory", intro, expectations(result), result, family_section)


def summary_keys(result: Mapping[str, Any]) -> dict[str, float]:
    """``poison_<family>_<condition>_pi<k>[_promote][_trust|_neutral]_{last_mean,last_ci_low,last_ci_high,
    poison_recall}<suffix>``: the import path has no path infix; ``_trust`` is quarantine."""
    suffix, out = result.get("suffix", ""), {}
    for name, fam in result["families"].items():
        for cond, by_key in fam["cells"].items():
            for key, runs in by_key.items():
                pi, path, defence = parts(key)
                base = f"poison_{name}_{cond}_pi{round(pi * 10)}"
                base += ("_promote" if path == "promote" else "") + DEFENCE_KEYS.get(defence, "")
                iv = stat(runs, "last")
                out.update({f"{base}_last_mean{suffix}": round(iv.mean, 4), f"{base}_last_ci_low{suffix}": round(iv.low, 4),
                            f"{base}_last_ci_high{suffix}": round(iv.high, 4),
                            f"{base}_poison_recall{suffix}": round(_mean(runs, "poison_recall"), 4)})  # fmt: skip
    return out


def plot_family(result: Mapping[str, Any], family: str, path: Path) -> Path:
    """Per path (import, promote): the poison recall rate per epoch at π = 0.3, per condition and defence."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells: Cells = result["families"][family]["cells"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, where in zip(axes, ("import", "promote"), strict=True):
        for cond in (c for c in NAMES if c in cells):
            for defence, style in (("none", "-"), ("neutral", "--"), ("quarantine", ":")):
                runs = cells[cond].get(f"pi3/{where}/{defence}")
                if runs:
                    n = len(runs[0]["per_epoch"])
                    curve = [sum(r["poison_recall_per_epoch"][e] for r in runs) / len(runs) for e in range(n)]
                    ax.plot(range(1, n + 1), curve, style, marker="o", label=f"{NAMES[cond]}, {defence}")
        ax.set(xlabel="epoch", title=f"{family}: {where}, π = 0.3", ylim=(-0.02, 1.02))
    axes[0].set_ylabel("poison recall rate")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
