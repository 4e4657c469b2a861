"""Choose a team from a pool of candidates, by diversity (K*, no labels) or by validation success.

Candidates are agents that differ in model, prompt, temperature, memory view or tools. One ``diagnose``
of the pool on sample tasks gives every candidate's answers; any team drawn from the pool is then scored
from those answers alone, with no more model calls: a vote among its members, and its K*.

The rule is greedy, one member at a time, ties to the earlier candidate in the pool:

- ``by="validation"`` (the tasks have answers): start from the most accurate candidate; then add the one
  with which the team's vote is most accurate; ties to the one with which some member is right on more
  tasks (coverage: a vote of two always follows the earlier member, so accuracy alone cannot tell a copy
  from a complement), then to the higher mean K*.
- ``by="kstar"`` (label-free): start from the candidate that agrees most often with the whole pool's vote;
  then add the one that raises the team's mean K* most, ties to the one that agrees more. A candidate that
  agrees with the pool's vote on fewer than a quarter as many tasks as the most agreeing one is not taken
  while others are left: an agent that says anything would otherwise win on diversity alone.

``Recompose`` is the ``Evolver`` option: between rounds it diagnoses the pool on validation tasks,
proposes a team by the rule, and keeps it only when its vote is more accurate there than the current
team's, as a prompt change is kept only when it validates.

Example:
    >>> from connectors import HashEmbedder, load_chat
    >>> from evolve import Agent, Task
    >>> from evolve.teams.diagnose import diagnose
    >>> pool = [Agent(n, load_chat("fake/scripted", replies=[a])) for n, a in [("a", "4"), ("b", "4"), ("c", "5"), ("d", "4")]]
    >>> d = diagnose(pool, [Task(id="t1", prompt="2 + 2?", answer="4")], embedder=HashEmbedder())
    >>> compose(d, 2, by="validation").members  # c's answer loses the vote but adds a channel
    ('a', 'c')
    >>> compose(d, 2, by="kstar").members  # without labels, c never agrees with the pool: not taken
    ('a', 'b')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from connectors import ConfigError, Embedder, Environment
from evolve.agent import Agent, Team
from evolve.envs.tasks import Task
from evolve.envs.textmatch import normalise
from evolve.run_log import RoundMetrics
from evolve.teams.diagnose import Diagnosis, diagnose
from evolve.teams.diversity import kstar, majority
from evolve.teams.parallel import ParallelTeam

By = Literal["kstar", "validation"]
RULES = ("kstar", "validation")
AGREEMENT_FLOOR = 0.25  # of the most agreeing candidate's agreement with the pool's vote (label-free rule)


@dataclass(frozen=True)
class Composition:
    """A team chosen from a pool: its ``members`` in the order they were taken, the rule (``by``), its
    vote's accuracy on the diagnosis tasks (None without answers) and its mean K*; ``order`` is every
    step's (member added, the score that chose it)."""

    members: tuple[str, ...]
    by: By
    vote_accuracy: float | None
    kstar: float
    order: tuple[tuple[str, float], ...] = field(default=())


def vote_accuracy(d: Diagnosis, members: Sequence[int]) -> float:
    """The accuracy a vote among ``members`` (positions in ``d.members``) had on ``d``'s tasks."""
    if d.rewards is None:
        raise ConfigError("vote accuracy needs tasks with answers; this diagnosis has none")
    hits = []
    for t, row in enumerate(d.answers):
        won = majority([row[m] for m in members])
        hits.append(0.0 if won is None else float(np.nan_to_num(d.rewards[t, members[won]])))
    return float(np.mean(hits))


def coverage(d: Diagnosis, members: Sequence[int]) -> float:
    """The share of ``d``'s tasks on which at least one of ``members`` was right."""
    if d.rewards is None:
        raise ConfigError("coverage needs tasks with answers; this diagnosis has none")
    return float((np.nan_to_num(d.rewards[:, list(members)]) > 0.5).any(axis=1).mean())


def mean_kstar(d: Diagnosis, members: Sequence[int]) -> float:
    """K* of ``members``' answers, averaged over the tasks at least one of them answered (NaN if none)."""
    values = []
    for t, row in enumerate(d.answers):
        ok = [m for m in members if row[m] is not None and row[m].strip()]  # type: ignore[union-attr]
        if ok:
            values.append(kstar(d.vectors[t][ok]))
    return float(np.mean(values)) if values else math.nan


def pool_agreement(d: Diagnosis) -> np.ndarray:
    """Per candidate, the share of tasks on which its answer is the whole pool's vote (normalised)."""
    agree = np.zeros(len(d.members))
    for row in d.answers:
        won = majority(list(row))
        if won is None:
            continue
        winner = normalise(row[won])  # type: ignore[arg-type]
        agree += [a is not None and a.strip() != "" and normalise(a) == winner for a in row]
    return agree / max(1, len(d.answers))


def compose(d: Diagnosis, size: int, *, by: By = "validation") -> Composition:
    """The team of ``size`` the greedy rule of ``by`` picks from the candidates ``d`` diagnosed."""
    n = len(d.members)
    if by not in RULES:
        raise ConfigError(f"compose by is one of {RULES}, got {by!r}")
    if not 1 <= size <= n:
        raise ConfigError(f"a team of {size} cannot be chosen from a pool of {n} candidates")
    if by == "validation" and d.rewards is None:
        raise ConfigError('compose by="validation" needs tasks with answers; use by="kstar" without them')
    agree = pool_agreement(d)
    accuracy = d.accuracy or {}
    floor = AGREEMENT_FLOOR * float(agree.max())

    def start(c: int) -> tuple[float, int]:
        return (accuracy[d.members[c]] if by == "validation" else float(agree[c]), -c)

    def gain(team: list[int], c: int) -> tuple[float, ...]:
        k = _or_zero(mean_kstar(d, [*team, c]))
        if by == "validation":
            return (vote_accuracy(d, [*team, c]), coverage(d, [*team, c]), k, -c)
        return (float(agree[c] >= floor), k, float(agree[c]), -c)

    team = [max(range(n), key=start)]
    order = [(d.members[team[0]], start(team[0])[0])]
    while len(team) < size:
        best = max((c for c in range(n) if c not in team), key=lambda c: gain(team, c))
        order.append((d.members[best], gain(team, best)[0 if by == "validation" else 1]))
        team.append(best)
    return Composition(
        tuple(d.members[c] for c in team), by, vote_accuracy(d, team) if d.rewards is not None else None,
        mean_kstar(d, team), tuple(order),
    )  # fmt: skip


@dataclass(frozen=True)
class TeamChange:
    """What one ``Recompose.step`` did: the team to act with next, whether it changed, and why."""

    team: ParallelTeam
    accepted: bool
    note: str


@dataclass
class Recompose:
    """The ``Evolver`` option that re-composes a parallel team from ``pool`` between rounds (see the
    module): ``size`` members chosen ``by`` the rule, diagnosed on ``tasks`` (default: the run's), every
    ``every`` rounds; ``embedder`` embeds answers for K*. The current team's members must be in the pool."""

    pool: Sequence[Agent]
    size: int
    embedder: Embedder
    by: By = "validation"
    tasks: Sequence[Task] | None = None
    every: int = 1

    def __post_init__(self) -> None:
        names = [a.name for a in self.pool]
        if len(set(names)) != len(names):
            raise ConfigError(f"the pool's agent names must be unique, got {names}")
        if not 1 <= self.size <= len(names) or self.every < 1 or self.by not in RULES:
            raise ConfigError(f"recompose needs 1 <= size <= the pool's {len(names)} agents, every >= 1 and by in "
                              f"{RULES}; got size={self.size}, every={self.every}, by={self.by!r}")  # fmt: skip

    def team_of(self, current: ParallelTeam, members: Sequence[str]) -> ParallelTeam:
        """``current``'s aggregator and debate over the pool's agents ``members``."""
        by_name = {a.name: a for a in self.pool}
        missing = [m for m in members if m not in by_name]
        if missing:
            raise ConfigError(f"team members {missing} are not in the recompose pool {list(by_name)}")
        judge = current.agents[current.judge] if current.judge is not None else None
        return ParallelTeam([by_name[m] for m in members], aggregate=current.aggregate, judge=judge,
                            debate=current.debate, workers=current.workers)  # fmt: skip

    def step(
        self, current: ParallelTeam, round_: int, tasks: Sequence[Task], env_factory: Callable[[], Environment]
    ) -> TeamChange | None:
        """After round ``round_``: None when this round does not recompose; else the gated change."""
        if round_ % self.every:
            return None
        d = diagnose(list(self.pool), list(self.tasks or tasks), embedder=self.embedder, env_factory=env_factory)
        positions = {m: i for i, m in enumerate(d.members)}
        missing = [m for m in current.members if m not in positions]
        if missing:
            raise ConfigError(f"the team's members {missing} are not in the recompose pool {list(d.members)}")
        now = vote_accuracy(d, [positions[m] for m in current.members])
        proposal = compose(d, self.size, by=self.by)
        assert proposal.vote_accuracy is not None
        if proposal.vote_accuracy <= now or set(proposal.members) == set(current.members):
            return TeamChange(current, False, f"kept {', '.join(current.members)}: vote {now:.3f} on validation; "
                                              f"{', '.join(proposal.members)} gave {proposal.vote_accuracy:.3f}")  # fmt: skip
        return TeamChange(self.team_of(current, proposal.members), True,
                          f"now {', '.join(proposal.members)}: vote {proposal.vote_accuracy:.3f} on validation "
                          f"against {now:.3f} (K* {proposal.kstar:.2f})")  # fmt: skip


def _or_zero(x: float) -> float:
    return 0.0 if math.isnan(x) else x


def check_recompose(recompose: Recompose | None, team: Team, prompts: object | None) -> Recompose | None:
    """``recompose`` when the ``Evolver`` can use it with ``team``; a ``ConfigError`` that says why not."""
    if recompose is None:
        return None
    if not isinstance(team, ParallelTeam):
        raise ConfigError("recompose chooses a parallel team's members: the team must be a ParallelTeam")
    if prompts is not None:
        raise ConfigError("recompose and prompt evolution both change the team between rounds; use one of them")
    missing = [m for m in team.members if m not in {a.name for a in recompose.pool}]
    if missing:
        raise ConfigError(f"the team's members {missing} are not in the recompose pool")
    return recompose


def last_kept(rounds: Mapping[int, RoundMetrics]) -> list[str] | None:
    """The members the latest re-composing round kept (``RoundMetrics.team``), or None if none did."""
    kept = [rounds[r].team for r in sorted(rounds) if rounds[r].team]
    return kept[-1] if kept else None


def resumed_team(team: Team, recompose: Recompose | None, rounds: Mapping[int, RoundMetrics]) -> Team:
    """The team a resumed run acts with: the last one a recorded round kept."""
    members = last_kept(rounds)
    if recompose is None or members is None or not isinstance(team, ParallelTeam):
        return team
    return recompose.team_of(team, members)
