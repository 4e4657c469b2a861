"""Parallel teams: members answer on their own, a vote or a judge decides, one round of debate, failures
that stay a member's own, and a team reward that reaches every member's memories."""

from __future__ import annotations

import doctest
from collections.abc import Sequence
from pathlib import Path

import pytest

import evolve.teams.parallel
from connectors import ConfigError, ConnectorError, HashEmbedder, Message, load_chat
from evolve import Agent, Evolver, MemoryView, Task, WeightUpdates
from evolve.teams.parallel import ParallelTeam
from memory import MemoryStore

RUN = "Zürich Nordhafen · Rolltore Süd — Abstimmung"  # a realistic run name: long, Unicode, spaces
TASK = "Welcher Code öffnet das Rolltor am Zürich-Nordhafen-Depot, Halle Süd?"


def member(name: str, *replies: str) -> Agent:
    return Agent(name, load_chat("fake/scripted", replies=list(replies)))


def failing(name: str) -> Agent:
    def fail(messages: Sequence[Message]) -> str:
        raise ConnectorError(f"{name}'s backend is down")

    return Agent(name, load_chat("fake/scripted", replies=fail))


def test_the_majority_of_normalised_answers_wins_and_its_step_comes_last() -> None:
    team = ParallelTeam([member("Gleis Nord", "4417"), member("Gleis Süd", "4471."), member("Kran 7", " 4471 ")])
    act = team.act([TASK])[0]
    assert act.error is None and act.answer == "4471."  # the first winning answer, as it was given
    assert [s.agent for s in act.steps] == ["Gleis Nord", "Kran 7", "Gleis Süd"]
    assert team.sink == "Gleis Nord" and team.order == ["Gleis Nord", "Gleis Süd", "Kran 7"]


def test_a_tie_goes_to_the_earlier_member() -> None:
    act = ParallelTeam([member("a", "Basel"), member("b", "Genf")]).act([TASK])[0]
    assert act.answer == "Basel"


def test_a_failing_member_does_not_vote_and_the_team_still_answers() -> None:
    team = ParallelTeam([failing("down"), member("b", "4471"), member("c", "4471")])
    act = team.act([TASK, "Und Halle Nord?"])
    assert [a.answer for a in act] == ["4471", "4471"] and all(a.error is None for a in act)
    assert all(s.agent != "down" for a in act for s in a.steps)


def test_a_team_with_no_answer_fails_and_says_why() -> None:
    act = ParallelTeam([failing("eins"), failing("zwei")]).act([TASK])[0]
    assert act.answer == "" and "eins's backend is down" in str(act.error) and "zwei" in str(act.error)
    assert isinstance(act.cause, ConnectorError)
    empty = ParallelTeam([member("a", ""), member("b", "   "), failing("c")]).act([TASK])[0]
    assert empty.error == "no member of the team gave an answer (1 failed, the rest said nothing)"


def test_the_judge_sees_every_answer_and_gives_the_teams() -> None:
    seen: list[str] = []

    def judge(messages: Sequence[Message]) -> str:
        seen.append(messages[-1].content)
        return "4471"

    members = [member("Gleis Nord", "4417"), failing("Gleis Süd"), member("Kran 7", "4471")]
    team = ParallelTeam(members, aggregate="judge", judge=Agent("Richter", load_chat("fake/scripted", replies=judge)))
    act = team.act([TASK])[0]
    assert act.answer == "4471" and [s.agent for s in act.steps] == ["Gleis Nord", "Kran 7", "Richter"]
    assert "output of Gleis Nord" in seen[0] and "4417" in seen[0] and "output of Kran 7" in seen[0]
    assert "Gleis Süd" not in seen[0]  # a member that failed has no answer to show
    assert TASK in seen[0]
    assert team.sink == "Richter"


def test_one_round_of_debate_shows_each_member_the_teams_answers() -> None:
    def persuadable(first: str):  # noqa: ANN202 - a script
        def reply(messages: Sequence[Message]) -> str:
            text = messages[-1].content
            return first if "output of" not in text else max(("4471", "4417"), key=text.count)

        return reply

    members = [Agent(n, load_chat("fake/scripted", replies=persuadable(a))) for n, a in
               [("a", "4417"), ("b", "4471"), ("c", "4471"), ("d", "4417"), ("e", "4471")]]  # fmt: skip
    plain = ParallelTeam(members).act([TASK])[0]
    debated = ParallelTeam(members, debate=True).act([TASK])[0]
    assert plain.answer == "4471" and debated.answer == "4471"
    assert len(debated.steps) == 10  # every member twice
    second = debated.steps[5:]
    assert all("output of a" in s.messages[-1].content and "output of e" in s.messages[-1].content for s in second)
    assert {s.output for s in second} == {"4471"}  # persuaded by the majority they saw
    assert all(s.recall_id is None for s in second)  # the second round recalls nothing: no reward twice


def test_copies_of_one_agent_are_separate_draws() -> None:
    """Sixteen copies of one agent on one model: each member samples with its own seed, so a homogeneous
    team is sixteen draws, not one answer sixteen times (nor one cache line)."""
    model = load_chat("fake/scripted", replies=["4471"])
    copies = [Agent(f"Kopie {i:02d}", model, params={"temperature": 0.8, "seed": 100}) for i in range(16)]
    ParallelTeam(copies).act([TASK], sample_index=2)
    seeds = [params["seed"] for _, params in model.backend.calls]
    assert sorted(seeds) == list(range(100 + 32, 100 + 48))


def test_bad_shapes_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="needs a judge agent"):
        ParallelTeam([member("a", "x")], aggregate="judge")
    with pytest.raises(ConfigError, match="needs a judge agent"):
        ParallelTeam([member("a", "x")], judge=member("j", "x"))
    with pytest.raises(ConfigError, match="aggregate is one of"):
        ParallelTeam([member("a", "x")], aggregate="mean")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="at least one member"):
        ParallelTeam([])
    with pytest.raises(ConfigError, match="unique"):
        ParallelTeam([member("a", "x"), member("a", "y")])


def test_prompts_evolve_per_member_and_stay_a_parallel_team() -> None:
    team = ParallelTeam([member("a", "x"), member("b", "y")], debate=True)
    assert set(team.prompts()) == {"a.system", "a.library", "b.system", "b.library"}
    changed = team.with_prompts({"b.system": "Antworte nur mit dem Code."})
    assert isinstance(changed, ParallelTeam) and changed.debate and changed.agents["b"].system.startswith("Antworte")


def test_a_team_reward_reinforces_every_members_recalled_memories(tmp_path: Path) -> None:
    store = MemoryStore(f"sqlite:///{tmp_path / 'team memory.db'}", embedder=HashEmbedder(64))
    names = ("Gleis Nord", "Gleis Süd", "Kran 7 — Halle Süd")
    replies = {"Gleis Nord": "4471", "Gleis Süd": "4471", "Kran 7 — Halle Süd": "4417"}
    members = [
        Agent(n, load_chat("fake/scripted", replies=[replies[n]]), memory=MemoryView(store, f"{RUN}/{n}"))
        for n in names
    ]
    tasks = [Task(id="rolltor-süd", prompt=TASK, answer="4471")]
    metrics = Evolver(ParallelTeam(members), tasks, memory=store, run=RUN, progress=False).run(rounds=2)
    assert [m.success_rate for m in metrics] == [1.0, 1.0]
    for n in names:  # round 1 wrote one memory per member; round 2 recalled and rewarded it, the outvoted one too
        (item,) = store.items(f"{RUN}/{n}")[:1]
        assert item.visits >= 1 and item.q > 0, n
    store.close()


def test_the_module_examples_run() -> None:
    assert doctest.testmod(evolve.teams.parallel).failed == 0


def test_weight_updates_are_refused_for_a_parallel_team_with_the_reason(tmp_path: Path) -> None:
    store = MemoryStore(f"sqlite:///{tmp_path / 'weights.db'}", embedder=HashEmbedder(64))
    tasks = [Task(id="rolltor-süd", prompt=TASK, answer="4471")]
    with pytest.raises(ConfigError, match="train a chain of agents; this is a parallel team"):
        Evolver(ParallelTeam([member("a", "4471")]), tasks, memory=store, progress=False, weights=WeightUpdates())
    store.close()
