"""A chain that learns its order (``[team] order = "learned"``, evolve.teams.ordered): how it acts, what it
learns from rewards, what a resumed run and a served team keep, and the spec's checks. Run as a user runs it:
a spec in a folder with spaces and Unicode, agents with long Unicode names."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from apps.cli import main
from connectors import ConfigError, Message, load_chat
from evolve.agent import Agent, Team
from evolve.build import build, build_team
from evolve.envs.tasks import Task
from evolve.evolver import Evolver
from evolve.run_log import RunLog
from evolve.serve.deployment import Deployment
from evolve.spec import load_spec
from evolve.teams.ordered import OrderedTeam, learn_orders
from evolve.weights.switch import WeightUpdates
from optimizers.order_policy import OrderPolicy, position_returns

DRAFT, REVIEW = "Entwurf · Zürcher Nachtschicht", "Prüfung · Qualitätssicherung Süd"
TASKS = [
    {"id": f"tor-{i}", "prompt": f"Welcher Code öffnet Tor {i} der Halle Süd?", "answer": "4471"} for i in range(8)
]


def reader(name: str):  # noqa: ANN201
    """Answers right only after the draft: the review turns a draft into the code; alone, anyone drafts."""

    def reply(messages: list[Message]) -> str:
        return "4471" if f"<output of {DRAFT}>" in messages[-1].content else f"ENTWURF von {name}"

    return reply


def team(**kw: object) -> OrderedTeam:
    agents = [Agent(n, load_chat("fake/scripted", replies=reader(n))) for n in (REVIEW, DRAFT)]  # listed: wrong
    return OrderedTeam(agents, **kw)  # type: ignore[arg-type]


def tasks() -> list[Task]:
    return [Task(**t) for t in TASKS]


def test_each_agent_sees_the_one_before_it_in_the_drawn_order_and_the_last_answers() -> None:
    t = team(seed=3)
    acts = t.act([f"Aufgabe {i}" for i in range(40)])
    orders = {tuple(s.agent for s in a.steps) for a in acts}
    assert orders == {(REVIEW, DRAFT), (DRAFT, REVIEW)}  # nothing learned: both drawn
    for a in acts:
        first, last = a.steps
        assert "<output of" not in first.messages[-1].content
        assert f"<output of {first.agent}>" in last.messages[-1].content and a.answer == last.output
        assert a.answer == ("4471" if first.agent == DRAFT else f"ENTWURF von {DRAFT}")


def test_the_loop_learns_the_order_and_a_resumed_run_keeps_it(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'läufe Süd.db'}")
    learner = team(seed=0, lr=1.0)
    ev = Evolver(learner, tasks(), engine=engine, run="Tore · lernend", batch_size=2, progress=False)
    metrics = ev.run(6)
    wrong = f"{REVIEW} > {DRAFT}"
    assert metrics[0].orders is not None and metrics[0].orders[wrong][0] > 0  # drawn while learning: it explores
    assert learner.policy.orders(["Welcher Code öffnet Tor 9 der Halle Süd?"], explore=False) == [(DRAFT, REVIEW)]
    used = metrics[-1].orders
    assert used is not None and sum(n for n, _ in used.values()) == len(TASKS)
    assert used.get(f"{DRAFT} > {REVIEW}", [0, 0])[1] == used.get(f"{DRAFT} > {REVIEW}", [0, 0])[0]  # all pass
    assert used.get(wrong, [0, 0])[1] == 0

    replayed = team(seed=0, lr=1.0)  # what a new process on the same run starts from: its log, replayed
    learn_orders(replayed, RunLog(engine, "Tore · lernend").learned_episodes())
    assert [g.priorities.tolist() for g in replayed.policy.groups] == [
        g.priorities.tolist() for g in learner.policy.groups
    ]
    resumed = team(seed=0, lr=1.0)
    again = Evolver(resumed, tasks(), engine=engine, run="Tore · lernend", batch_size=2, progress=False)
    assert again.run(6) == metrics  # every round done: nothing runs again
    assert again.run(7)[-1].success_rate >= 0.75  # a fresh policy would draw the wrong order half the time
    assert sum(g.episodes for g in resumed.policy.groups) == 7 * len(TASKS)


def test_a_step_is_credited_with_what_it_added() -> None:
    """A one-turn episode's steps carry the checker's score of their output, and each position's return is
    the reward less the score before it: a review that turned a right draft wrong is charged with it."""
    assert position_returns(0.0, [1.0], 2) == [0.0, -1.0]
    assert position_returns(1.0, [0.0, 0.0], 3) == [1.0, 1.0, 1.0]
    engine = create_engine("sqlite://")
    ev = Evolver(team(seed=1), tasks(), engine=engine, run="credit", batch_size=4, progress=False)
    ev.run(1)
    episode = ev.log.learned_episodes()[0]
    first, last = episode.steps
    assert first.score == (1.0 if first.output == "4471" else 0.0) and last.score is None


def test_a_served_team_acts_in_the_order_the_run_learned(tmp_path: Path) -> None:
    spec_path = write_spec(tmp_path / "Zürich Läufe", '[team]\norder = "learned"\norder_lr = 1.0')
    spec = load_spec(spec_path)
    deployment = Deployment(spec)  # serving while the run learns: each request's team is the run's latest
    before, _ = deployment.team(None)
    assert isinstance(before, OrderedTeam) and before.policy.orders([TASKS[0]["prompt"]], explore=False) == [
        (REVIEW, DRAFT)
    ]
    ev = build(spec, progress=False)
    ev.run(5)
    after, _ = deployment.team(None)
    assert after.policy.orders([TASKS[0]["prompt"]], explore=False) == [(DRAFT, REVIEW)]  # type: ignore[attr-defined]
    assert deployment.answer([Message("user", TASKS[0]["prompt"])]).text == "4471"
    assert deployment.team(None)[0].policy is after.policy  # type: ignore[attr-defined]  # replayed once
    served = build_team(spec, load_chat("fake/scripted", replies=["unused"]), ev.memory)
    assert isinstance(served, OrderedTeam) and served.serving
    assert served.policy.orders([TASKS[0]["prompt"]], explore=False) == [(DRAFT, REVIEW)]
    assert [g.priorities.tolist() for g in served.policy.groups] == [
        g.priorities.tolist()
        for g in ev.team.policy.groups  # type: ignore[attr-defined]
    ]


def test_evolve_team_diagnose_shows_the_learned_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path = write_spec(tmp_path / "Zürich Läufe", '[team]\norder = "learned"\norder_lr = 1.0')
    out = tmp_path / "Bericht Süd"
    assert main(["team", "diagnose", str(spec_path), "--out", str(out), "--quiet"]) == 0
    assert "Nothing learned yet" in capsys.readouterr().out
    assert main(["run", str(spec_path), "--rounds", "5", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["team", "diagnose", str(spec_path), "--out", str(out), "--quiet"]) == 0
    shown = capsys.readouterr().out
    groups = json.loads((out / "orders.json").read_text("utf-8"))
    assert groups and all(g["order"] == [DRAFT, REVIEW] for g in groups if g["episodes"] >= 3)
    assert f"{DRAFT} > {REVIEW}" in shown
    assert main(["team", "diagnose", str(spec_path), "--tasks", "3", "--quiet"]) == 2  # nothing to sample
    assert "--tasks and --seed sample tasks to run" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("team_toml", "says"),
    [
        ('[team]\ntopology = "parallel"\norder = "learned"', 'order apply only to topology = "chain"'),
        ('[team]\ntopology = "parallel"\norder_temperature = 2.0', "order_temperature apply only to"),
        ('[team]\norder = "learned"\norder_temperature = 0', "order_temperature"),
        ('[team]\norder = "learned"\norder_lr = -1', "order_lr"),
        ("[team]\norder_lr = 0.1", 'order_lr apply only to order = "learned"'),
        ('[team]\norder = "sometimes"', "order"),
    ],
)
def test_an_order_setting_the_spec_cannot_mean_is_a_clear_error(tmp_path: Path, team_toml: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_spec(write_spec(tmp_path, team_toml))


def test_after_fixes_an_order_a_learned_order_would_draw(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, '[team]\norder = "learned"', after=True)
    with pytest.raises(ConfigError, match="`after` fixes it"):
        load_spec(spec)


def test_bad_arguments_name_what_was_expected() -> None:
    with pytest.raises(ConfigError, match="temperature must be > 0"):
        team(temperature=0.0)
    with pytest.raises(ConfigError, match="a policy over"):
        OrderedTeam(team().agents.values(), policy=OrderPolicy(("Unbekannt", DRAFT)))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="names each agent"):
        team().policy.learn("Tor 1", ("Unbekannt", DRAFT), [1.0, 1.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        alone = OrderedTeam([Agent(DRAFT, load_chat("fake/scripted", replies=["4471"]))])
    assert "learns nothing" in str(caught[0].message) and not alone.policy.learns
    with pytest.raises(ConfigError, match="learns its order"):
        Evolver(team(), tasks(), engine=create_engine("sqlite://"), weights=WeightUpdates(), progress=False)


def test_a_plain_chain_is_unchanged() -> None:
    chain = Team([Agent(n, load_chat("fake/scripted", replies=reader(n))) for n in (DRAFT, REVIEW)])
    assert [tuple(s.agent for s in a.steps) for a in chain.act(["x", "y"])] == [(DRAFT, REVIEW)] * 2


def write_spec(folder: Path, team_toml: str, *, after: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tore.jsonl").write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in TASKS), "utf-8")
    spec = f"""
[run]
name = "Zürich Nordhafen · Tore"
database = "sqlite:///läufe/evolve.db"
batch_size = 2

[model]
chat = "fake/scripted"
options = {{ replies = {{ "<output of {DRAFT}>" = "4471" }}, default = "ENTWURF" }}

[embedder]
name = "hash"

[environment]
tasks = "tore.jsonl"
paraphrase = false

[memory]
enabled = false

{team_toml}

[[agents]]
name = "{REVIEW}"
system = "Prüfe den Entwurf."

[[agents]]
name = "{DRAFT}"
system = "Schreibe den Entwurf."
{'after = ["' + REVIEW + '"]' if after else ""}
"""
    path = folder / "tore.toml"
    path.write_text(spec, encoding="utf-8")
    return path
