"""When the loop escalates (``plateaued``), whether it may (``weights_blocker``), and what MARFT trains on
(``TeamTask``: the very messages the team is served, so a trained adapter fits its use)."""

from __future__ import annotations

import random

import pytest

from connectors import ChatClient, ConfigError, ScriptedChat, load_chat
from evolve import Agent, Task, Team
from evolve.agent import render_messages
from evolve.weights.escalation import TeamTask, plateaued, weights_blocker

TASK = Task(id="a", prompt="What is 2 + 2?", answer="4")


@pytest.mark.parametrize(
    ("curve", "patience", "min_gain", "expected"),
    [
        ([0.2, 0.5, 0.5, 0.5], 2, 0.0, True),  # two rounds without beating 0.5
        ([0.2, 0.5, 0.5, 0.6], 2, 0.0, False),  # the last round beat it
        ([0.2, 0.5, 0.5, 0.52], 2, 0.05, True),  # a gain below min_gain is no gain
        ([0.5, 0.4], 1, 0.0, True),  # falling back counts as no gain
        ([0.5, 0.5], 2, 0.0, False),  # too few rounds to judge
        ([], 1, 0.0, False),
    ],
)
def test_plateaued(curve: list[float], patience: int, min_gain: float, expected: bool) -> None:
    assert plateaued(curve, patience=patience, min_gain=min_gain) is expected


def test_plateaued_needs_a_patience_of_at_least_one_round() -> None:
    with pytest.raises(ConfigError, match="patience must be >= 1"):
        plateaued([0.1, 0.2], patience=0)


def test_weights_blocker_names_every_agent_on_an_api() -> None:
    api = load_chat("openai/gpt-4o-mini", api_key="sk-test", base_url="http://127.0.0.1:9/v1")
    team = Team([Agent("drafter", api), Agent("editor", api)])
    reason = weights_blocker(team)
    assert reason is not None
    assert "drafter (openai/gpt-4o-mini), editor (openai/gpt-4o-mini) run on an API" in reason
    assert "memory and prompt evolution keep working" in reason


def test_weights_blocker_is_none_for_a_team_on_local_models(tiny_local_model: object) -> None:
    team = Team([Agent("solver", load_chat(f"local/{tiny_local_model}"))])
    assert weights_blocker(team) is None


class ServesAdapters(ScriptedChat):
    serves_adapters = True


def test_weights_blocker_asks_the_backend_not_the_models_name() -> None:
    says_yes = ChatClient(ServesAdapters(["4"], name="openai/named-like-an-api"))
    says_nothing = ChatClient(ScriptedChat(["4"], name="local/named-like-a-local-model"))
    assert weights_blocker(Team([Agent("solver", says_yes)])) is None
    reason = weights_blocker(Team([Agent("drafter", says_yes), Agent("editor", says_nothing)]))
    assert reason is not None and "editor (local/named-like-a-local-model)" in reason
    assert "drafter" not in reason


def chat() -> object:
    return load_chat("fake/scripted", replies=["draft", "final"])


def test_team_task_prompts_are_the_messages_the_team_is_served() -> None:
    team = Team(
        [Agent("drafter", chat(), system="Draft it."), Agent("editor", chat(), system="Edit it.")]  # type: ignore[arg-type]
    )
    task = TeamTask.of(team, [TASK])
    state = task.sample(random.Random(0))

    assert task.prompt(state, 0, []) == render_messages(team.agents["drafter"], TASK.prompt, None, {})
    assert task.prompt(state, 1, ["a draft "]) == render_messages(
        team.agents["editor"], TASK.prompt, None, {"drafter": "a draft"}
    )
    assert task.reward(state, ["a draft", "4"]) == 1.0 and task.reward(state, ["4", "5"]) == 0.0


def test_team_task_follows_the_team_edges_not_just_the_previous_agent() -> None:
    agents = [Agent(n, chat(), system=f"You are {n}.") for n in ("a", "b", "judge")]  # type: ignore[arg-type]
    team = Team(agents, [("a", "judge"), ("b", "judge")])
    task = TeamTask.of(team, [TASK])

    assert task.agents == ("a", "b", "judge") and task.inputs == ((), (), ("a", "b"))
    assert task.prompt(TASK, 1, ["from a"]) == render_messages(team.agents["b"], TASK.prompt, None, {})
    judged = task.prompt(TASK, 2, ["from a", "from b"])
    assert judged == render_messages(team.agents["judge"], TASK.prompt, None, {"a": "from a", "b": "from b"})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tasks": []}, "at least one task"),
        ({"roles": ("only one",)}, "one role per agent"),
        ({"inputs": ((), ("editor",))}, "inputs must name earlier agents"),
    ],
)
def test_team_task_refuses_inconsistent_settings(kwargs: dict[str, object], message: str) -> None:
    settings: dict[str, object] = {"tasks": [TASK], "agents": ("drafter", "editor"), "roles": ("r1", "r2"), **kwargs}
    with pytest.raises(ConfigError, match=message):
        TeamTask(**settings)  # type: ignore[arg-type]
