"""The ablations' report: a table per family, a plot per family (a panel per knob) and summary keys."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

LABELS = {
    "lam": "λ (weight of Q)",
    "k1": "k1 (pool size)",
    "k2": "k2 (memories shown)",
    "delta": "δ (similarity floor)",
    "alpha": "α (Q learning rate)",
    "epsilon": "ε (exploration)",
    "reward": "reward to Q",
    "failure_memory": "a failure memory keeps",
    "context_q": "Q in context",
    "context_start": "Q in context where not yet earned",
}


def ci(cell: Mapping[str, Any], key: str) -> str:
    low, high = cell[f"{key}_ci"]
    return f"{cell[key]:.3f} [{low:.3f}, {high:.3f}]"


def markdown(r: Mapping[str, Any]) -> str:
    reader = (
        "the oracle reader (answers with what the best recalled memory shows: recall alone is measured)"
        if r["reader"] == "oracle"
        else f"the model {r['reader']}"
    )
    base = ", ".join(f"{k} = {v}" for k, v in r["base"].items())
    lines = [
        "# Ablations: one knob at a time",
        "",
        f"Reader: {reader}. {r['epochs']} epochs of each family's tasks with paraphrases, {len(r['seeds'])} seeds; "
        f"last = last-epoch success, cum = solved at least once, mean [95% interval over seeds]. Base setting (each knob moves from it): {base}.",
        f"Wall time {r.get('seconds', '?')} s on {r.get('machine', {}).get('cpu_count', '?')} CPUs.",
    ]
    for family, f in r["families"].items():
        lines += ["", f"## {family} ({f['tasks']} tasks)", "", "| knob | value | last | cum |", "|---|---|---|---|"]
        for knob, cells in f["knobs"].items():
            for value, cell in cells.items():
                mark = " (base)" if str(r["base"][knob]) == value else ""
                lines.append(f"| {LABELS[knob]} | {value}{mark} | {ci(cell, 'last')} | {ci(cell, 'cum')} |")
        lines += [
            "",
            f"![ablations of {family}](ablations{'' if r['reader'] == 'oracle' else '_' + r['reader'].replace('/', '_')}_{family}.png)",
        ]
    return "\n".join(lines) + "\n"


def plot_family(family: str, knobs: Mapping[str, Mapping[str, Any]], path: Path, *, reader: str) -> Path:
    """A panel per knob: last-epoch success (with its interval) and cumulative success against the value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(knobs)
    cols = min(4, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), dpi=110, sharey=True, squeeze=False)
    for ax, (knob, cells) in zip(axes.flat, knobs.items(), strict=False):
        values = list(cells)
        x = list(range(len(values)))
        for key, style in (("last", "-o"), ("cum", "--s")):
            means = [cells[v][key] for v in values]
            lows = [cells[v][f"{key}_ci"][0] for v in values]
            highs = [cells[v][f"{key}_ci"][1] for v in values]
            ax.plot(x, means, style, label=key, alpha=0.85)
            ax.fill_between(x, lows, highs, alpha=0.15)
        ax.set_xticks(x, values, fontsize=8)
        ax.set_title(LABELS[knob], fontsize=9)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes[0][0].set_ylabel("share of tasks")
    axes[0][0].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{family}: ablations ({reader} reader), 95% intervals over seeds", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def summary_keys(r: Mapping[str, Any], suffix: str = "") -> dict[str, float]:
    """``ablation<suffix>_<family>_<knob>_<value>_{last,cum}_mean`` (the intervals are in the JSON report)."""
    flat: dict[str, float] = {}
    for family, f in r["families"].items():
        for knob, cells in f["knobs"].items():
            for value, cell in cells.items():
                stem = f"ablation{suffix}_{family}_{knob}_{value}".replace(".", "_")
                for key in ("last", "cum"):
                    flat[f"{stem}_{key}_mean"] = cell[key]
    return flat
