"""Tables and learning curves from the rounds a database holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from evolve import RoundMetrics


def round_table(curves: Mapping[str, Sequence[RoundMetrics]], *, metric: str = "success_rate") -> str:
    """A fixed-width table, one row per round and one column per run (condition)."""
    names = list(curves)
    rounds = sorted({m.round for ms in curves.values() for m in ms})
    width = max([12, *(len(n) + 2 for n in names)])
    lines = ["round".ljust(7) + "".join(n.rjust(width) for n in names)]
    for r in rounds:
        cells = []
        for n in names:
            m = next((m for m in curves[n] if m.round == r), None)
            cells.append(("-" if m is None else f"{getattr(m, metric):.2f}").rjust(width))
        lines.append(str(r).ljust(7) + "".join(cells))
    return "\n".join(lines)


def plot_curves(
    curves: Mapping[str, Sequence[RoundMetrics]], path: str | Path, *, metric: str = "success_rate", title: str = ""
) -> Path:
    """Draw one line per run to a PNG (matplotlib, headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for name, ms in curves.items():
        ax.plot([m.round for m in ms], [getattr(m, metric) for m in ms], marker="o", label=name)
    ax.set_xlabel("round")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_ylim(-0.02, 1.02) if metric == "success_rate" else None
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title or f"{metric.replace('_', ' ')} per round")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def run_table(metrics: Sequence[RoundMetrics]) -> str:
    """One run round by round: success, the share of tasks solved at least once so far, reward, memory
    size and mean Q, prompt updates and HEAD, and weight updates (LoRA MARFT escalations) with what they did."""
    head = (
        f"{'round':<6}{'success':>8}{'solved':>8}{'reward':>8}{'memories':>10}{'mean Q':>8}{'prompt':>8}{'weights':>8}  "
        f"{'version':<17}note"
    )
    lines = [head]
    for m in metrics:
        prompt = "+1" if m.prompt_updates else ("0" if m.prompt_version else "-")
        weights = "+1" if m.weight_updates else ("0" if m.weights_note else "-")
        note = "; ".join(n for n in (m.prompt_note[:100], m.weights_note) if n)
        lines.append(
            f"{m.round:<6}{m.success_rate:>8.2f}{_share(m.solved_share):>8}{m.mean_reward:>8.2f}{m.memory_size:>10}{m.q_mean:>+8.2f}{prompt:>8}"
            f"{weights:>8}  {m.prompt_version[:16]:<17}{note}"
        )
    return "\n".join(lines)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
