"""The learning benchmark's metrics (pure functions) and its reports: markdown, PNG curves, summary keys.

Metrics follow the MemRL paper's protocol: an *epoch* runs every task of an environment once; a run is
E epochs over the same tasks. From the epochs × tasks matrix of successes:

- last-epoch success: the success rate in the final epoch;
- cumulative success: the share of tasks solved in at least one epoch;
- pass@k (Chen et al.'s unbiased estimator over n attempts with c successes): for the repeated-sampling
  baseline, cumulative success over E epochs is exactly the mean pass@E.

Over seeds (task order, sampling, paraphrase choice) a cell reports the mean with its 95% interval and
keeps every seed's figures; Q-memory and similarity-only memory are compared seed by seed (paired), and a
difference is called one only when its interval excludes zero (``evolve.intervals``).

Example:
    >>> m = success_matrix([[0.0, 1.0], [1.0, 0.0]])
    >>> last_epoch_success(m), cumulative_success(m), mean_pass_at_k(m, 2)
    (0.5, 1.0, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from connectors import ConfigError
from evolve.intervals import Interval, paired_interval, seed_interval

SKIPPED = "full profile only"
"""What a cell says when its condition runs in the full profile only: never a number."""


# ---------------------------------------------------------------- metrics (pure)
def success_matrix(rewards: Sequence[Sequence[float]], *, threshold: float = 1.0) -> np.ndarray:
    """Epochs × tasks rewards → a boolean matrix; a reward at or above ``threshold`` is a success."""
    m = np.asarray(rewards, dtype=float)
    if m.ndim != 2 or m.shape[0] == 0 or m.shape[1] == 0:
        raise ConfigError(f"expected rewards as a non-empty epochs x tasks table, got shape {m.shape}")
    return m >= threshold


def epoch_success(matrix: np.ndarray) -> list[float]:
    """The success rate of each epoch."""
    return [float(x) for x in matrix.mean(axis=1)]


def last_epoch_success(matrix: np.ndarray) -> float:
    """The success rate of the final epoch."""
    return float(matrix[-1].mean())


def cumulative_curve(matrix: np.ndarray) -> list[float]:
    """After each epoch e, the share of tasks solved in at least one of epochs 1..e."""
    return [float(x) for x in np.logical_or.accumulate(matrix, axis=0).mean(axis=1)]


def cumulative_success(matrix: np.ndarray) -> float:
    """The share of tasks solved in at least one epoch."""
    return float(matrix.any(axis=0).mean())


def pass_at_k(n: int, c: int, k: int) -> float:
    """The probability that at least one of k attempts drawn from n (c of them correct) is correct.

    ``1 - C(n - c, k) / C(n, k)``: unbiased for the chance that k fresh samples contain a success.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ConfigError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(matrix: np.ndarray, k: int) -> float:
    """pass@k averaged over tasks, each task's attempts being its epochs."""
    n = matrix.shape[0]
    return float(np.mean([pass_at_k(n, int(c), k) for c in matrix.sum(axis=0)]))


def cell_metrics(rewards: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Everything one (environment, condition) cell reports from its epochs × tasks rewards."""
    m = success_matrix(rewards)
    return {
        "last": round(last_epoch_success(m), 4),
        "cum": round(cumulative_success(m), 4),
        "per_epoch": [round(x, 4) for x in epoch_success(m)],
        "cum_per_epoch": [round(x, 4) for x in cumulative_curve(m)],
        "pass_at_1": round(mean_pass_at_k(m, 1), 4),
        "mean_reward_last": round(float(np.mean(rewards[-1])), 4),
    }


SUMMED = ("tokens", "episode_tokens", "optimizer_tokens", "prompt_updates", "errors", "seconds")
AVERAGED = ("pass_at_1", "mean_reward_last", "memory_size")


def seed_cell(per_seed: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> dict[str, Any]:
    """One (environment, condition) cell over seeds: ``last`` and ``cum`` are means with a 95% interval
    (``last_ci``, ``cum_ci``) and their per-seed values; curves are averaged; costs are summed."""
    if len(per_seed) != len(seeds) or not per_seed:
        raise ConfigError(f"seed_cell: expected one cell per seed, got {len(per_seed)} for seeds {list(seeds)}")
    out: dict[str, Any] = {"status": "ok", "seeds": list(seeds)}
    for key in ("last", "cum"):
        iv = seed_interval([c[key] for c in per_seed])
        out[key], out[f"{key}_ci"], out[f"{key}_per_seed"] = (
            round(iv.mean, 4),
            [round(iv.low, 4), round(iv.high, 4)],
            list(iv.values),
        )
    for key in ("per_epoch", "cum_per_epoch"):
        out[key] = [round(float(x), 4) for x in np.mean([c[key] for c in per_seed], axis=0)]
    out.update({k: round(float(np.mean([c[k] for c in per_seed])), 4) for k in AVERAGED})
    out.update({k: round(sum(c[k] for c in per_seed), 1) for k in SUMMED})
    out["prompt_notes"] = [n for c in per_seed for n in c.get("prompt_notes", [])]
    out["per_seed"] = [dict(c) for c in per_seed]
    return out


def interval_of(cell: Mapping[str, Any], key: str) -> Interval:
    """The ``last`` or ``cum`` figure of a cell as an ``Interval`` (one seed: the point itself)."""
    return seed_interval(cell.get(f"{key}_per_seed", [cell[key]]))


# ---------------------------------------------------------------- summary keys
def summary_keys(result: Mapping[str, Any]) -> dict[str, float]:
    """Flat keys for the cells that ran: ``learning_<env>_<condition>_{last,cum}`` (the mean over seeds)
    and ``…_{last,cum}_{mean,ci_low,ci_high}``."""
    flat: dict[str, float] = {}
    for env, cells in result["envs"].items():
        for cond, cell in cells["conditions"].items():
            if cell.get("status") != "ok":
                continue
            for key in ("last", "cum"):
                iv, name = interval_of(cell, key), f"learning_{env}_{cond}_{key}"
                flat[name] = cell[key]
                flat[f"{name}_mean"], flat[f"{name}_ci_low"], flat[f"{name}_ci_high"] = (
                    round(iv.mean, 4), round(iv.low, 4), round(iv.high, 4)
                )  # fmt: skip
    return flat


# ---------------------------------------------------------------- markdown
def _cell_row(cond: str, cell: Mapping[str, Any]) -> str:
    if cell.get("status") != "ok":
        return f"| {cond} | {cell.get('status', '?')} | | | | | |"
    curve = " ".join(f"{x:.2f}" for x in cell["per_epoch"])
    last, cum = interval_of(cell, "last").text(), interval_of(cell, "cum").text()
    return (
        f"| {cond} | {last} | {cum} | {curve} | {cell['tokens']:,} "
        f"| {cell['optimizer_tokens']:,} | {cell['seconds']:.1f} |"
    )


COMPARED = (
    ("q_memory", "similarity", "Q-memory against similarity-only"),
    ("q_memory", "q_memory_keeps_answer", "failure memories without the wrong answer (the default) against with it"),
    ("similarity", "similarity_keeps_answer", "similarity-only without the wrong answer against with it"),
    ("q_memory", "similarity_keeps_answer", "Q-memory against similarity-only keeping the wrong answer"),
    ("q_memory_keeps_answer", "similarity_keeps_answer", "both keeping the wrong answer, Q against similarity-only"),
    ("q_memory_writer", "q_memory", "model-written experiences against cheap ones (both Q-memory)"),
    (
        "q_memory_writer",
        "q_memory_keeps_answer",
        "model-written experiences against cheap ones keeping the wrong answer",
    ),
    ("q_context", "q_memory", "Q in context against Q-memory"),
    ("q_context", "similarity", "Q in context against similarity-only"),
    ("q_context_keeps_answer", "q_memory_keeps_answer", "Q in context against Q-memory, both keeping the wrong answer"),
)


def verdicts(result: Mapping[str, Any]) -> list[str]:
    """One sentence per environment and pair of conditions that ran (``COMPARED``): is the first above
    the second, and on which metric."""
    lines = []
    for env, cells in result["envs"].items():
        for treatment, baseline, title in COMPARED:
            q, s = cells["conditions"].get(treatment, {}), cells["conditions"].get(baseline, {})
            if q.get("status") != "ok" or s.get("status") != "ok":
                continue
            parts = [_verdict(q, s, key, label) for key, label in (("last", "last-epoch"), ("cum", "cumulative"))]
            lines.append(f"- **{env}**: {title} — " + "; ".join(parts) + ".")
    return lines


def _verdict(q: Mapping[str, Any], s: Mapping[str, Any], key: str, label: str) -> str:
    """One metric of the verdict: the two figures and, over paired seeds, whether they differ."""
    d = paired_interval(baseline=interval_of(s, key).values, treatment=interval_of(q, key).values)
    if d.n == 1:
        word = "above" if d.mean > 0 else ("below" if d.mean < 0 else "level with")
        return f"{label} {q[key]:.3f} vs {s[key]:.3f} ({word}, {d.mean:+.3f}; 1 seed: no interval, no claim)"
    word = ("above" if d.mean > 0 else "below") if d.excludes_zero else "no difference"
    return (
        f"{label} {q[key]:.3f} vs {s[key]:.3f} (paired over {d.n} seeds: {d.mean:+.3f} "
        f"[{d.low:+.3f}, {d.high:+.3f}], {word})"
    )


def markdown(result: Mapping[str, Any]) -> str:
    """The report: settings, machine, one table per environment, the Q-vs-similarity verdicts."""
    m, s = result["machine"], result["settings"]
    lines = [
        "# Learning: conditions side by side",
        "",
        f"Profile **{s['profile']}**; model {s['model']}, embedder {s['embedder']}; {s['epochs']} epochs over the "
        f"same tasks (MemRL protocol); greedy decoding except repeated sampling (temperature "
        f"{s['sampling_temperature']}, a new seed each epoch, so its cumulative success is pass@{s['epochs']}).",
        f"Seeds: {len(s.get('seeds', [s['seed']]))} ({', '.join(map(str, s.get('seeds', [s['seed']])))}: task order, "
        f"sampling, paraphrase choice); paraphrases {'on' if s.get('paraphrases') else 'off'}. Last and cum show "
        "the mean over seeds and its 95% interval; the verdicts pair the seeds.",
        f"Machine: {m['cpu_count']} CPUs ({m['cpu']}), Python {m['python']}, {m['platform']}. "
        f"Total wall time {result['seconds']:.0f} s.",
        "",
        "Last = success rate in the final epoch; cum = share of tasks solved in at least one epoch; tokens = "
        "everything the condition sent through the model (episodes, optimizer rollouts and critic); optimizer "
        "tokens = the critic's share.",
        "",
        "## Memory conditions compared (paired over seeds)",
        "",
        *(verdicts(result) or ["- no environment ran both memory conditions."]),
    ]
    for env, cells in result["envs"].items():
        lines += [
            "",
            f"## {env}",
            "",
            f"{cells['tasks']} tasks, max {cells['max_turns']} turn(s) per episode. {cells['note']}".rstrip(),
            "",
            "| condition | last | cum | success per epoch | tokens | optimizer tokens | wall s |",
            "|---|---|---|---|---|---|---|",
            *(_cell_row(c, cell) for c, cell in cells["conditions"].items()),
            "",
            f"![learning curves](learning_{env}.png)",
        ]
    lines += ["", "Conditions:", "", *(f"- `{c}`: {d}" for c, d in result["conditions"].items())]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- curves
def plot_env(env: str, cells: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """Two panels for one environment: success per epoch and cumulative success, a line per condition."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(10.0, 4.0), dpi=110, sharey=True)
    styles = ["-", "--", "-.", ":"]
    markers = ["o", "s", "^", "D", "v", "P"]
    for i, (cond, cell) in enumerate(cells.items()):
        if cell.get("status") != "ok":
            continue
        epochs = list(range(1, len(cell["per_epoch"]) + 1))
        # Conditions often tie; distinct dashes and markers keep every line visible where they overlap.
        style = {"linestyle": styles[i % len(styles)], "marker": markers[i % len(markers)], "alpha": 0.85}
        axes[0].plot(epochs, cell["per_epoch"], label=cond, **style)
        axes[1].plot(epochs, cell["cum_per_epoch"], label=cond, **style)
    for ax, title in zip(axes, ("success per epoch", "cumulative success"), strict=True):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_title(f"{env}: {title}")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of tasks")
    axes[1].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
