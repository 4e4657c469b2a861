"""Tables and learning curves from the rounds a database holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from connectors import EvolveError
from connectors.install import extra_hint
from evolve import RoundMetrics
from evolve.intervals import paired_interval, seed_interval


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


def seeded_table(runs: Mapping[str, Sequence[Sequence[RoundMetrics]]], *, metric: str = "success_rate") -> str:
    """A fixed-width table, one row per round and one column per condition: the mean over seeds and its
    95% interval (the value itself for one seed)."""
    names = list(runs)
    rounds = sorted({m.round for seeds in runs.values() for ms in seeds for m in ms})
    width = max([22 if any(len(s) > 1 for s in runs.values()) else 12, *(len(n) + 2 for n in names)])
    lines = ["round".ljust(7) + "".join(n.rjust(width) for n in names)]
    for r in rounds:
        cells = []
        for n in names:
            values = [getattr(m, metric) for ms in runs[n] for m in ms if m.round == r]
            text = "-" if not values else f"{values[0]:.2f}" if len(values) == 1 else seed_interval(values).text(2)
            cells.append(text.rjust(width))
        lines.append(str(r).ljust(7) + "".join(cells))
    return "\n".join(lines)


def solved_line(runs: Mapping[str, Sequence[Sequence[RoundMetrics]]]) -> str:
    """The share of tasks solved at least once by the last round, per condition (mean [95% interval] over
    seeds, the value itself for one seed)."""
    cells = []
    for name, seeds in runs.items():
        values = [ms[-1].solved_share for ms in seeds if ms and ms[-1].solved_share is not None]
        text = "-" if not values else f"{values[0]:.2f}" if len(values) == 1 else seed_interval(values).text(2)
        cells.append(f"{name} {text}")
    last = max((ms[-1].round for seeds in runs.values() for ms in seeds if ms), default=0)
    return f"solved at least once by round {last}: " + ", ".join(cells)


def paired_verdict(
    runs: Mapping[str, Sequence[Sequence[RoundMetrics]]], treatment: str, baseline: str, *, metric: str = "success_rate"
) -> str:
    """The last round of ``treatment`` against ``baseline``, paired by seed: a difference only when the
    interval excludes zero."""
    last = [ms[-1] for ms in runs[treatment]], [ms[-1] for ms in runs[baseline]]
    d = paired_interval(baseline=[getattr(m, metric) for m in last[1]], treatment=[getattr(m, metric) for m in last[0]])
    if d.n < 2:
        return f"{treatment} − {baseline}, round {last[0][0].round}: {d.mean:+.2f} (one seed: a draw, not a difference)"
    word = ("above" if d.mean > 0 else "below") if d.excludes_zero else "no difference"
    figure = f"{d.mean:+.2f} [{d.low:+.2f}, {d.high:+.2f}]"
    return f"{treatment} − {baseline}, round {last[0][0].round}, paired over {d.n} seeds: {figure} ({word})"


def plot_curves(
    curves: Mapping[str, Sequence[RoundMetrics]], path: str | Path, *, metric: str = "success_rate", title: str = ""
) -> Path:
    """Draw one line per run to a PNG (matplotlib, headless)."""
    plt = pyplot()

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


def plot_bands(
    runs: Mapping[str, Sequence[Sequence[RoundMetrics]]],
    path: str | Path,
    *,
    metric: str = "success_rate",
    title: str = "",
) -> Path:
    """One line per condition (the mean over seeds) with its 95% interval shaded, to a PNG."""
    plt = pyplot()

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for name, seeds in runs.items():
        rounds = [m.round for m in seeds[0]]
        ivs = [seed_interval([getattr(ms[i], metric) for ms in seeds]) for i in range(len(rounds))]
        ax.plot(rounds, [iv.mean for iv in ivs], marker="o", label=name)
        if len(seeds) > 1:
            ax.fill_between(rounds, [iv.low for iv in ivs], [iv.high for iv in ivs], alpha=0.15)
    ax.set_xlabel("round")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    n = len(next(iter(runs.values())))
    ax.set_title(title + (f" (mean of {n} seeds, 95% interval)" if n > 1 else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def pyplot() -> Any:
    """matplotlib's pyplot, headless; a missing ``plots`` extra is an error that says how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise EvolveError(f"learning curves need matplotlib: {extra_hint('plots')}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
