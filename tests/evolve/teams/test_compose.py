"""Choosing a team from a pool: the greedy rules by validation and by K*, and the Evolver option that
re-composes a parallel team between rounds only when the new team validates better."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

import evolve.teams.compose
from connectors import ConfigError, HashEmbedder, load_chat
from evolve import Agent, Evolver, Task, Team
from evolve.teams.compose import Recompose, compose, mean_kstar, vote_accuracy
from evolve.teams.diagnose import diagnose
from evolve.teams.parallel import ParallelTeam
from memory import MemoryStore

RUN = "Zürich Nordhafen · Teamwahl — Rolltore Süd und Nord"
CODES = {"Halle Süd": "4471", "Halle Nord": "9902", "Halle Ost": "1234"}
TASKS = [
    Task(id=f"code-{h}", prompt=f"Welcher Code öffnet das Rolltor in der {h}?", answer=c) for h, c in CODES.items()
]


def knows(name: str, halls: set[str], wrong: str = "0000") -> Agent:
    """An agent that knows the codes of ``halls`` and says ``wrong`` for the others."""
    return Agent(name, load_chat("fake/scripted", replies={h: CODES[h] if h in halls else wrong for h in CODES}))


def pool() -> list[Agent]:
    """Each shift knows two of three codes; A and B the same two (copies), C and D two others each."""
    return [
        knows("Schicht A · Süd und Nord", {"Halle Süd", "Halle Nord"}),
        knows("Schicht B · Süd und Nord", {"Halle Süd", "Halle Nord"}),
        knows("Schicht C · Nord und Ost", {"Halle Nord", "Halle Ost"}, wrong="1111"),
        knows("Schicht D · Süd und Ost", {"Halle Süd", "Halle Ost"}, wrong="2222"),
        Agent("Plaudertasche", load_chat("fake/scripted", replies=["Das Wetter in Zürich ist heute schön."])),
    ]


def test_validation_picks_members_whose_errors_differ() -> None:
    d = diagnose(pool(), TASKS, embedder=HashEmbedder(64))
    team = compose(d, 3, by="validation")
    assert set(team.members) == {"Schicht A · Süd und Nord", "Schicht C · Nord und Ost", "Schicht D · Süd und Ost"}
    assert team.vote_accuracy == 1.0  # each is wrong on one hall, never the same one: the vote is always right
    copies = [0, 1, 2]  # A and B know the same halls: they outvote C where both are wrong
    assert vote_accuracy(d, copies) == pytest.approx(2 / 3) and mean_kstar(d, [0, 1]) == pytest.approx(1.0)


def test_kstar_picks_different_answers_but_not_an_agent_that_says_anything() -> None:
    d = diagnose(pool(), TASKS, embedder=HashEmbedder(64))
    team = compose(d, 3, by="kstar")
    assert "Plaudertasche" not in team.members  # never agrees with the pool: diversity alone does not get it in
    assert "Schicht B · Süd und Nord" not in team.members  # a copy of A adds no channel
    assert team.kstar > mean_kstar(d, [0, 1, 2]) and team.vote_accuracy == 1.0
    assert compose(d, 5, by="kstar").members[-1] == "Plaudertasche"  # taken only once nothing else is left


def test_bad_requests_are_clear_errors() -> None:
    d = diagnose(pool(), TASKS, embedder=HashEmbedder(64))
    with pytest.raises(ConfigError, match="cannot be chosen from a pool of 5"):
        compose(d, 6)
    with pytest.raises(ConfigError, match="compose by is one of"):
        compose(d, 2, by="luck")  # type: ignore[arg-type]
    unlabelled = diagnose(pool(), [t.prompt for t in TASKS], embedder=HashEmbedder(64))
    with pytest.raises(ConfigError, match='use by="kstar"'):
        compose(unlabelled, 2, by="validation")
    assert compose(unlabelled, 2, by="kstar").vote_accuracy is None


def test_the_evolver_recomposes_only_when_the_new_team_validates_better(tmp_path: Path) -> None:
    store = MemoryStore(f"sqlite:///{tmp_path / 'teams.db'}", embedder=HashEmbedder(64))
    candidates = pool()
    start = ParallelTeam(candidates[:2])  # two copies of one view: half the codes
    option = Recompose(candidates, size=3, embedder=HashEmbedder(64))
    metrics = Evolver(start, TASKS, memory=store, run=RUN, progress=False, recompose=option).run(rounds=2)
    assert [m.success_rate for m in metrics] == pytest.approx([2 / 3, 1.0])
    assert metrics[0].team is not None and set(metrics[0].team) == {
        "Schicht A · Süd und Nord",
        "Schicht C · Nord und Ost",
        "Schicht D · Süd und Ost",
    }
    assert metrics[1].team is None and metrics[1].team_note.startswith("kept")  # nothing better: kept as it is
    resumed = Evolver(start, TASKS, memory=store, run=RUN, progress=False, recompose=option)
    third = resumed.run(rounds=3)[2]
    assert third.success_rate == 1.0 and set(resumed.team.members) == set(metrics[0].team)  # type: ignore[attr-defined]
    store.close()


def test_the_evolver_refuses_what_recompose_cannot_do(tmp_path: Path) -> None:
    store = MemoryStore(f"sqlite:///{tmp_path / 'teams.db'}", embedder=HashEmbedder(64))
    option = Recompose(pool(), size=2, embedder=HashEmbedder(64))
    with pytest.raises(ConfigError, match="must be a ParallelTeam"):
        Evolver(Team(pool()[:1]), TASKS, memory=store, progress=False, recompose=option)
    with pytest.raises(ConfigError, match="not in the recompose pool"):
        Evolver(ParallelTeam([knows("Fremd", set())]), TASKS, memory=store, progress=False, recompose=option)
    with pytest.raises(ConfigError, match="size <= the pool's 5 agents"):
        Recompose(pool(), size=9, embedder=HashEmbedder(64))
    store.close()


def test_the_module_examples_run() -> None:
    assert doctest.testmod(evolve.teams.compose).failed == 0
