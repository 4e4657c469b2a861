"""Diagnose a team or a pool: run its members on sample tasks and report how right and how different they
are.

``diagnose`` puts the members side by side (a ``ParallelTeam``: every member answers every task on its
own, the vote or judge decides) and reports, per member, its accuracy (when the tasks can be checked);
per task, K* (``evolve.teams.diversity.kstar`` over the members' answers, embedded) and how often the
members agree; over all tasks, the mean cosine similarity of every pair of members' answers, the
correlation of their correctness, and the team's accuracy. ``heat_map`` draws the pairwise similarity as
a PNG. Failed and empty answers are left out of K* and similarity and counted as wrong, and the report
says how many there were; a team of one has K* = 1 by definition, and the report says that too.

Example:
    >>> from connectors import HashEmbedder, load_chat
    >>> from evolve import Agent, Task
    >>> pool = [Agent(n, load_chat("fake/scripted", replies=[a])) for n, a in [("a", "4"), ("b", "4"), ("c", "5")]]
    >>> d = diagnose(pool, [Task(id="t1", prompt="2 + 2?", answer="4")], embedder=HashEmbedder())
    >>> d.accuracy, d.team_accuracy
    ({'a': 1.0, 'b': 1.0, 'c': 0.0}, 1.0)
    >>> round(d.kstar_mean, 2)
    1.89
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from connectors import ConfigError, Embedder, Environment, Tool
from connectors.install import extra_hint
from evolve.agent import Agent, Team
from evolve.envs.tasks import Task, TaskEnv
from evolve.executors import env_tools
from evolve.teams.diversity import agreement, correctness_correlation, kstar
from evolve.teams.parallel import ParallelTeam


@dataclass(frozen=True)
class Diagnosis:
    """What ``diagnose`` measured. Rows are tasks and columns members, in the team's order.

    ``answers[t][m]`` is member m's answer to task t, None when it failed (``errors[t][m]`` says why);
    ``rewards`` (tasks × members, NaN where it failed) and ``team_rewards`` are the checker's rewards, None
    when the tasks could not be checked; ``kstar`` and ``agreement`` are per task (K* NaN where no member
    answered); ``similarity`` is the mean cosine of each pair's answers over the tasks both answered (NaN
    for a pair that never did).
    """

    members: tuple[str, ...]
    task_ids: tuple[str, ...]
    answers: tuple[tuple[str | None, ...], ...]
    errors: tuple[tuple[str | None, ...], ...]
    team_answers: tuple[str, ...]
    rewards: np.ndarray | None
    team_rewards: np.ndarray | None
    kstar: np.ndarray
    agreement: np.ndarray
    similarity: np.ndarray
    vectors: tuple[np.ndarray, ...] = field(default=(), repr=False)
    """Each task's answer vectors, members × dim (a zero row for a failed or empty answer)."""

    @property
    def accuracy(self) -> dict[str, float] | None:
        """Each member's mean reward over the tasks (a failure counts 0), or None without checks."""
        if self.rewards is None:
            return None
        return {m: float(np.nan_to_num(self.rewards[:, j]).mean()) for j, m in enumerate(self.members)}

    @property
    def team_accuracy(self) -> float | None:
        return None if self.team_rewards is None else float(self.team_rewards.mean())

    @property
    def kstar_mean(self) -> float:
        """K* averaged over the tasks some member answered (NaN when none did)."""
        answered = self.kstar[~np.isnan(self.kstar)]
        return float(answered.mean()) if len(answered) else math.nan

    @property
    def correctness_correlation(self) -> np.ndarray | None:
        """The φ correlation of every pair's correctness across tasks (``diversity.correctness_correlation``)."""
        if self.rewards is None or len(self.task_ids) < 2:
            return None
        return correctness_correlation(np.nan_to_num(self.rewards) > 0.5)

    @property
    def failures(self) -> int:
        return sum(a is None for row in self.answers for a in row)

    @property
    def empty(self) -> int:
        return sum(a is not None and not a.strip() for row in self.answers for a in row)

    def notes(self) -> list[str]:
        """What a reader must know to read the figures: a team of one, failures, empty answers."""
        out = []
        if len(self.members) == 1:
            out.append("A team of one: K* is 1 by definition; diversity needs at least two members.")
        if self.failures:
            out.append(f"{self.failures} answers failed (counted wrong, left out of K* and similarity).")
        if self.empty:
            out.append(f"{self.empty} answers were empty (counted wrong, left out of K* and similarity).")
        if self.rewards is None:
            out.append("The tasks carry no answers: accuracy is not measured (K* needs no labels).")
        return out

    def to_dict(self) -> dict[str, Any]:
        """The figures as JSON-ready values (NaN as None)."""

        def clean(a: np.ndarray | None) -> Any:
            if a is None:
                return None
            values = np.round(a, 4).astype(object)
            values[np.isnan(a)] = None
            return values.tolist()

        return {
            "members": list(self.members), "tasks": len(self.task_ids), "accuracy": self.accuracy,
            "team_accuracy": self.team_accuracy, "kstar_mean": _num(self.kstar_mean),
            "kstar_per_task": dict(zip(self.task_ids, clean(self.kstar), strict=True)),
            "agreement_mean": _num(float(self.agreement.mean())) if len(self.agreement) else None,
            "similarity": clean(self.similarity), "correctness_correlation": clean(self.correctness_correlation),
            "failures": self.failures, "empty": self.empty, "notes": self.notes(),
        }  # fmt: skip

    def markdown(self) -> str:
        """A short report: the team's figures, then one row per member."""
        acc, team = self.accuracy, self.team_accuracy
        lines = [
            f"{len(self.members)} members on {len(self.task_ids)} tasks: K* {self.kstar_mean:.2f} "
            f"(of at most {len(self.members)}), agreement {float(np.mean(self.agreement)):.2f}"
            + (f", team accuracy {team:.3f}" if team is not None else ""),
            "",
            "| member | accuracy | mean similarity to the others |",
            "|---|--:|--:|",
        ]
        for j, m in enumerate(self.members):
            others = np.delete(self.similarity[j], j)
            mean = float(np.nanmean(others)) if len(others) and not np.isnan(others).all() else math.nan
            lines.append(
                f"| {m} | {'—' if acc is None else f'{acc[m]:.3f}'} | {'—' if math.isnan(mean) else f'{mean:.3f}'} |"
            )
        return "\n".join(lines + [""] + [f"- {n}" for n in self.notes()]) + "\n"


def diagnose(
    team: ParallelTeam | Sequence[Agent],
    tasks: Sequence[Task | str],
    *,
    embedder: Embedder,
    env_factory: Callable[[], Environment] | None = None,
    check: bool | None = None,
) -> Diagnosis:
    """Run ``team`` (a parallel team, or a pool of agents voting) once on every task and measure it.

    A task is a ``Task``, or a prompt alone (a string: nothing to check, K* needs no labels). Answers are
    checked by ``env_factory``'s environments (default: the tasks' own checkers) when ``check`` is true,
    or, by default, when every task is a ``Task``. One step per task: a multi-turn environment is
    diagnosed on its first turn.
    """
    if isinstance(team, Team) and not isinstance(team, ParallelTeam):
        raise ConfigError("diagnose compares answers to one task: give a ParallelTeam or a list of agents, not a "
                          "chain, whose agents play different parts")  # fmt: skip
    team = team if isinstance(team, ParallelTeam) else ParallelTeam(list(team))
    if not tasks:
        raise ConfigError("diagnose needs at least one task")
    check = all(isinstance(t, Task) for t in tasks) if check is None else check
    if check and env_factory is None and not all(isinstance(t, Task) for t in tasks):
        raise ConfigError(
            "checking answers needs Tasks (with answers) or an env_factory; prompts alone cannot be checked"
        )
    items: list[Task | _Prompt] = [
        t if isinstance(t, Task) else _Prompt(f"prompt-{i + 1}", t) for i, t in enumerate(tasks)
    ]
    envs = env_factory or (lambda: TaskEnv([t for t in items if isinstance(t, Task)]))
    started = [_started(envs, t) for t in items]  # what each environment shows and the tools it gives
    tools = [tools for _, tools in started]
    acts = team.act([obs for obs, _ in started], queries=[t.prompt for t in items], contexts=[t.id for t in items],
                    tools=tools if any(tools) else None)  # fmt: skip
    members = tuple(team.members)
    answers, errors = [], []
    for act in acts:
        last = {s.agent: s.output for s in act.steps}  # a member's last step is its final answer
        failed = {f.split(": ", 1)[0]: f for f in (*act.failed, *([act.error] if act.error else []))}
        answers.append(tuple(last.get(m) for m in members))
        errors.append(tuple(None if m in last else failed.get(m, act.error or "no answer") for m in members))
    vecs = _embedded(embedder, answers)
    rewards = team_rewards = None
    if check:
        rewards = np.array([[_reward(envs, t, a) for a in row] for t, row in zip(items, answers, strict=True)])
        team_rewards = np.array([_reward(envs, t, act.answer if act.error is None else None)
                                 for t, act in zip(items, acts, strict=True)])  # fmt: skip
    return Diagnosis(
        members, tuple(t.id for t in items), tuple(answers), tuple(errors), tuple(a.answer for a in acts),
        rewards, team_rewards,
        np.array([kstar(v[ok]) if ok.any() else math.nan for v, ok in vecs]),
        np.array([agreement([a for a in row if a and a.strip()]) for row in answers]),
        _mean_similarity(vecs, len(members)), tuple(v for v, _ in vecs),
    )  # fmt: skip


@dataclass(frozen=True)
class _Prompt:
    """A task given as a prompt alone."""

    id: str
    prompt: str


def heat_map(diagnosis: Diagnosis, path: str | Path, *, title: str | None = None) -> Path:
    """Draw the members' pairwise answer similarity (and K*) as a PNG at ``path``; needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ConfigError(f"the heat map needs matplotlib: {extra_hint('plots')}") from e
    n = len(diagnosis.members)
    fig, ax = plt.subplots(figsize=(2.2 + 0.7 * n, 1.8 + 0.6 * n))
    image = ax.imshow(np.nan_to_num(diagnosis.similarity, nan=0.0), vmin=0.0, vmax=1.0, cmap="viridis")
    ax.set_xticks(range(n), diagnosis.members, rotation=45, ha="right")
    ax.set_yticks(range(n), diagnosis.members)
    for i in range(n):
        for j in range(n):
            value = diagnosis.similarity[i, j]
            ax.text(j, i, "—" if np.isnan(value) else f"{value:.2f}", ha="center", va="center",
                    color="white" if np.isnan(value) or value < 0.6 else "black", fontsize=8)  # fmt: skip
    fig.colorbar(image, ax=ax, label="mean cosine similarity of answers")
    ax.set_title(title or f"K* {diagnosis.kstar_mean:.2f} of {n}")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _embedded(embedder: Embedder, answers: list[tuple[str | None, ...]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each task's answer vectors (zero rows for missing ones) and which members gave a non-empty answer,
    from one embedding call."""
    given = [a for row in answers for a in row if a is not None and a.strip()]
    flat = iter(np.asarray(embedder.embed(given), dtype=np.float64)) if given else iter(())
    out = []
    for row in answers:
        ok = np.array([a is not None and bool(a.strip()) for a in row])
        vecs = [next(flat) if k else None for k in ok]
        dim = next((len(v) for v in vecs if v is not None), 1)
        out.append((np.stack([v if v is not None else np.zeros(dim) for v in vecs]), ok))
    return out


def _mean_similarity(vecs: list[tuple[np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    """The mean cosine of each pair of members over the tasks both answered; NaN for a pair that never did."""
    total, count = np.zeros((n, n)), np.zeros((n, n))
    for v, ok in vecs:
        if not ok.any():
            continue
        unit = np.zeros_like(v)
        unit[ok] = v[ok] / np.linalg.norm(v[ok], axis=1, keepdims=True)
        both = np.outer(ok, ok)
        total += np.where(both, unit @ unit.T, 0.0)
        count += both
    with np.errstate(invalid="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _started(envs: Callable[[], Environment], task: Task | _Prompt) -> tuple[str, list[Tool]]:
    """A task's first observation and tools from a fresh environment (a prompt alone: itself, no tools)."""
    if isinstance(task, _Prompt):
        return task.prompt, []
    env = envs()
    return str(env.reset(task)), env_tools(env)


def _reward(envs: Callable[[], Environment], task: Task | _Prompt, answer: str | None) -> float:
    """The checker's reward for ``answer`` to ``task`` (0 for no answer)."""
    if answer is None or not answer.strip():
        return 0.0
    env = envs()
    env.reset(task)
    return float(env.step(answer).reward)


def _num(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 4)
