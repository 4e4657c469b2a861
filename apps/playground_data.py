"""What the playground shows, as plain rows: pure functions the Streamlit script renders and tests call.

Nothing here imports Streamlit or pandas: each function turns the library's objects (an ``explain``
record, ``MemoryItem``s, ``PromptVersion``s, ``RoundMetrics``) into lists of dicts, one per table row or
chart mark, so the script stays a thin layout and every number it shows is tested without a browser.

Example:
    >>> q_histogram([0.1, 0.15, -0.4], bins=4)[2]
    {'from': 0.0, 'to': 0.5, 'count': 2}
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from connectors import ConfigError
from evolve import RoundMetrics, Team
from evolve.prompts.versions import PromptVersion
from evolve.serve.feedback import FeedbackReceipt
from evolve.teams.ordered import OrderedTeam
from evolve.teams.parallel import ParallelTeam
from memory import MemoryItem

Outcome = Literal["all", "successes", "failures"]
OUTCOMES: tuple[Outcome, ...] = ("all", "successes", "failures")


def feedback_note(receipt: FeedbackReceipt) -> str:
    """What one thumbs click did, in words: how many memories moved, or that it was a repeat."""
    if not receipt.applied:
        return "already rated: the first rating stands (one rating per answer)"
    verdict = "rated good" if receipt.reward > 0 else "rated bad"
    if receipt.reinforced == 0:
        return f"{verdict}: no memories were recalled, nothing to reinforce; the next job learns from it"
    noun = "memory" if receipt.reinforced == 1 else "memories"
    return f"{verdict}: reinforced {receipt.reinforced} {noun} (Q moved toward {receipt.reward:+g})"


def why_rows(explanation: Mapping[str, Any], items: Mapping[str, MemoryItem]) -> list[dict[str, Any]]:
    """One row per candidate of a recall (``MemoryStore.explain``): the selected ones in selection order,
    then the rest of the pool by score, then the candidates δ filtered out.

    ``items`` maps memory ids to their current state: ``Q now`` shows what feedback did since the recall
    (``Q`` is the value that scored it). A candidate missing from ``items`` was evicted since.
    """
    rows, keys = [], []
    for c in explanation.get("candidates", []):
        item = items.get(c["id"])
        if c["selected"]:
            verdict = f"selected #{c['rank'] + 1}"
            if c.get("superseded"):
                verdict += f" (superseded since by {c.get('superseded_by') or '?'})"
        elif c["filtered"]:
            verdict = "filtered: similarity ≤ δ"
        else:
            verdict = "not selected"
        rows.append(
            {
                "verdict": verdict,
                "memory": item.intent if item is not None else "(evicted)",
                "similarity": _num(c["sim"]),
                "Q": _num(c["q"]),
                "z(sim)": _num(c["z_sim"]),
                "z(Q)": _num(c["z_q"]),
                "score": _num(c["score"]),
                "Q now": item.q if item is not None else None,
                "experience": item.experience if item is not None else "",
                "id": c["id"],
            }
        )
        group = 0 if c["selected"] else 2 if c["filtered"] else 1
        keys.append((group, c["rank"] if c["selected"] else -(c["score"] or 0.0), -(c["sim"] or 0.0)))
    return [row for _, row in sorted(zip(keys, rows, strict=True), key=lambda pair: pair[0])]


def recall_summary(explanation: Mapping[str, Any]) -> str:
    """One line on a recall: how many memories were candidates, passed δ and were selected, and the knobs."""
    config = explanation.get("config", {})
    candidates = explanation.get("candidates", [])
    in_pool = sum(1 for c in candidates if not c["filtered"])
    knobs = ", ".join(f"{k}={config[k]:g}" for k in ("k1", "k2", "delta", "lam") if k in config)
    explored = " (ε-exploration: a random pick)" if explanation.get("explored") else ""
    return (
        f"{len(candidates)} candidates, {in_pool} above δ, {len(explanation.get('selected', []))} selected"
        f"{explored} · score = (1 − λ)·z(sim) + λ·z(Q) · {knobs}"
    )


def memory_rows(items: Iterable[MemoryItem]) -> list[dict[str, Any]]:
    """The memory table: one row per memory, highest Q first; ``kind`` (episode or strategy) and ``state``
    (``valid``, or which newer memory superseded it: no recall finds it any more)."""
    ordered = sorted(items, key=lambda it: -it.q)
    return [
        {
            "intent": it.intent,
            "experience": it.experience,
            "Q": it.q,
            "visits": it.visits,
            "kind": it.kind,
            "state": "valid" if it.valid else f"superseded by {it.superseded_by or '?'}",
            "success": it.success,
            "namespace": it.namespace,
            "created": time.strftime("%Y-%m-%d %H:%M", time.localtime(it.created_at)),
            "id": it.id,
        }
        for it in ordered
    ]


@dataclass(frozen=True)
class MemoryFilter:
    """The memory table's filters; the defaults keep every row.

    Example:
        >>> MemoryFilter(text="harbor", min_q=0.1, outcome="successes").outcome
        'successes'
    """

    text: str = ""
    min_q: float | None = None
    outcome: Outcome = "all"
    namespace: str | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ConfigError(f"outcome must be one of {list(OUTCOMES)}, got {self.outcome!r}")


def filter_rows(rows: Sequence[Mapping[str, Any]], flt: MemoryFilter) -> list[dict[str, Any]]:
    """The rows of ``memory_rows`` that pass the filter (text: case-insensitive, in intent or experience)."""
    needle = flt.text.strip().lower()
    out = []
    for r in rows:
        if needle and needle not in r["intent"].lower() and needle not in r["experience"].lower():
            continue
        if flt.min_q is not None and r["Q"] < flt.min_q:
            continue
        if flt.outcome == "successes" and r["success"] is not True:
            continue
        if flt.outcome == "failures" and r["success"] is not False:
            continue
        if flt.namespace is not None and r["namespace"] != flt.namespace:
            continue
        out.append(dict(r))
    return out


def q_histogram(values: Sequence[float], *, bins: int = 20, lo: float = -1.0, hi: float = 1.0) -> list[dict[str, Any]]:
    """Counts of Q-values in ``bins`` equal bins over [lo, hi] (widened to hold every value).

    Rewards are centred in [-1, 1], so Q lives there; fixed edges keep the chart comparable over time.
    The last bin is closed, the others half-open.
    """
    if bins < 1:
        raise ConfigError(f"bins must be >= 1, got {bins}")
    finite = [float(v) for v in values if math.isfinite(v)]
    lo, hi = min([lo, *finite]), max([hi, *finite])
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in finite:
        counts[min(int((v - lo) / width), bins - 1)] += 1
    return [
        {"from": round(lo + i * width, 10), "to": round(lo + (i + 1) * width, 10), "count": n}
        for i, n in enumerate(counts)
    ]


def version_rows(versions: Sequence[PromptVersion], head_id: str) -> list[dict[str, Any]]:
    """The prompt log as rows, newest first as given; HEAD is marked."""
    return [
        {
            "HEAD": "●" if v.id == head_id else "",
            "version": v.id[:12],
            "message": v.message,
            "validation": v.mean_score,
            "examples": len(v.scores),
            "parents": ", ".join(p[:8] for p in v.parents) or "seed",
            "created": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v.created_at)),
        }
        for v in versions
    ]


def version_label(version: PromptVersion, head_id: str) -> str:
    """How a version reads in a picker: short id, message, and whether it is HEAD."""
    mark = " (HEAD)" if version.id == head_id else ""
    return f"{version.id[:12]}{mark} · {version.message or 'no message'}"


def curve_rows(curves: Mapping[str, Sequence[RoundMetrics]], *, metric: str = "success_rate") -> list[dict[str, Any]]:
    """Learning curves in long form, ``{"run", "round", <metric>}`` per round, for one line per run."""
    if metric not in RoundMetrics.__dataclass_fields__:
        raise ConfigError(f"unknown round metric {metric!r}; pick one of {sorted(RoundMetrics.__dataclass_fields__)}")
    return [{"run": run, "round": m.round, metric: getattr(m, metric)} for run, ms in curves.items() for m in ms]


ROUND_COLUMNS = (
    "round",
    "success_rate",
    "mean_reward",
    "episodes",
    "errors",
    "memory_size",
    "q_mean",
    "prompt_updates",
    "prompt_version",
    "weight_updates",
    "tokens",
    "seconds",
    "prompt_note",
)


def round_rows(metrics: Sequence[RoundMetrics]) -> list[dict[str, Any]]:
    """The round table of one run: the metrics people read, in order."""
    return [{k: getattr(m, k) for k in ROUND_COLUMNS} for m in metrics]


def default_runs(names: Sequence[str], current: str) -> list[str]:
    """The runs the learning tab shows first: the current run when it has rounds, else every run."""
    return [current] if current in names else list(names)


def visible_runs(names: Sequence[str], current: str, *, tenant: bool) -> list[str]:
    """The runs the learning tab may show: a tenant sees its own run only (other tenants' runs, even
    their names, are not its business); the operator (no tenant) sees every run in the database."""
    return ([current] if current in names else []) if tenant else list(names)


def team_shape(team: Team) -> str:
    """One line on how a team's agents work together."""
    if isinstance(team, ParallelTeam):
        how = f"a judge, {team.judge}," if team.judge is not None else "a majority vote"
        debate = ", after one round of debate" if team.debate else ""
        return f"**Parallel team**: {', '.join(team.members)} answer on their own; {how} decides{debate}."
    if isinstance(team, OrderedTeam):
        return (f"**Chain that learns its order**: {', '.join(team.policy.agents)}, in an order drawn per task group "
                "while learning and the most probable one when served; each agent sees the one before it.")  # fmt: skip
    return f"**Chain**: {' → '.join(team.order)}; each agent sees its predecessors' outputs."


def order_rows(groups: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per task group of a learned order (``OrderPolicy.table``): the order served, the episodes it
    learned from, an example task, and each agent's priority."""
    return [
        {"group": g["group"], "served order": " → ".join(g["order"]), "episodes": g["episodes"],
         "example task": g["example"], **{f"priority · {a}": p for a, p in g["priorities"].items()}}
        for g in groups
    ]  # fmt: skip


def diagnosis_headline(figures: Mapping[str, Any]) -> str:
    """The diagnosis in one line: K* of at most n, agreement, the team's accuracy."""
    k, n = figures.get("kstar_mean"), len(figures.get("members", []))
    parts = [f"K* **{k:.2f}** of at most {n}" if k is not None else "K* not measured (no answers)"]
    if figures.get("agreement_mean") is not None:
        parts.append(f"agreement {figures['agreement_mean']:.2f}")
    if figures.get("team_accuracy") is not None:
        parts.append(f"team accuracy **{figures['team_accuracy']:.3f}**")
    return f"{', '.join(parts)} on {figures.get('tasks', 0)} tasks."


def diagnosis_rows(figures: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per member: its accuracy and its mean similarity to the others (``diagnosis.json``)."""
    members, sims, acc = figures.get("members", []), figures.get("similarity") or [], figures.get("accuracy") or {}
    rows = []
    for i, m in enumerate(members):
        others = [v for j, v in enumerate(sims[i] if i < len(sims) else []) if j != i and v is not None]
        rows.append(
            {
                "member": m,
                "accuracy": acc.get(m),
                "mean similarity to the others": _num(sum(others) / len(others)) if others else None,
            }
        )
    return rows


def recompose_rows(metrics: Sequence[RoundMetrics]) -> list[dict[str, Any]]:
    """The rounds that re-composed the team: what was kept and why."""
    return [{"round": m.round, "team from the next round": ", ".join(m.team) if m.team else "(unchanged)", "why": m.team_note}
            for m in metrics if m.team_note]  # fmt: skip


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


__all__ = [
    "diagnosis_headline",
    "diagnosis_rows",
    "recompose_rows",
    "team_shape",
    "OUTCOMES",
    "ROUND_COLUMNS",
    "MemoryFilter",
    "curve_rows",
    "default_runs",
    "feedback_note",
    "filter_rows",
    "memory_rows",
    "q_histogram",
    "recall_summary",
    "round_rows",
    "version_label",
    "version_rows",
    "visible_runs",
    "why_rows",
]
