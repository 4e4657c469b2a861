"""TextWorld games made by tw-make at fixed seeds, played through TextWorldEnv and the Evolver."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from connectors import ConfigError, HashEmbedder, Message, ScriptedChat
from connectors.chat import ChatClient
from evolve import Agent, Evolver, MemoryView, Task, TaskEnv, Team
from evolve.envs.textworld import TextWorldEnv, clean_feedback, match_command, short_goal, textworld_tasks
from memory import MemoryStore

pytest.importorskip("textworld", reason="the bench extra: pip install -e '.[bench]'")

SEEDS = (1, 2)


@pytest.fixture(scope="module")
def games(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Task]]:
    folder = tmp_path_factory.mktemp("tw-games")
    return folder, textworld_tasks(folder, seeds=SEEDS)


def test_tasks_describe_the_games(games: tuple[Path, list[Task]]) -> None:
    _, tasks = games
    assert [t.id for t in tasks] == ["tw-1", "tw-2"]
    for t in tasks:
        assert Path(t.meta["game_file"]).is_file() and t.meta["walkthrough"] and t.meta["max_score"] >= 1
        assert "TextWorld" not in t.prompt and t.prompt in " ".join(t.meta["objective"].split())
    assert tasks[0].prompt != tasks[1].prompt


def test_a_seed_always_makes_the_same_game(games: tuple[Path, list[Task]], tmp_path: Path) -> None:
    _, tasks = games
    again = textworld_tasks(tmp_path / "other", seeds=[SEEDS[0]])[0]
    assert (again.prompt, again.meta["walkthrough"]) == (tasks[0].prompt, tasks[0].meta["walkthrough"])
    assert Path(again.meta["game_file"]).read_bytes() == Path(tasks[0].meta["game_file"]).read_bytes()


def test_a_second_call_reuses_the_cached_games(games: tuple[Path, list[Task]], monkeypatch: pytest.MonkeyPatch) -> None:
    folder, tasks = games
    stamps = {t.id: Path(t.meta["game_file"]).stat().st_mtime_ns for t in tasks}

    def regenerate(*args: object) -> None:
        raise AssertionError("a cached game was generated again")

    monkeypatch.setattr("evolve.envs.textworld._make_game", regenerate)
    again = textworld_tasks(folder, seeds=SEEDS)
    assert again == tasks
    assert {t.id: Path(t.meta["game_file"]).stat().st_mtime_ns for t in again} == stamps


def test_other_options_make_other_games(games: tuple[Path, list[Task]], monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _ = games
    made: list[int] = []
    monkeypatch.setattr(
        "evolve.envs.textworld._make_game", lambda script, challenge, options, seed, target: made.append(seed)
    )
    with pytest.raises(FileNotFoundError):  # the fake made nothing, so the task cannot be read
        textworld_tasks(folder, seeds=[1], world_size=3, nb_objects=4, quest_length=2)
    assert made == [1]


def test_the_walkthrough_wins_the_game(games: tuple[Path, list[Task]]) -> None:
    for task in games[1]:
        env = TextWorldEnv()
        first = env.reset(task)
        commands = [f"- {c}" for c in env._commands]
        assert first.startswith(f"Goal: {task.prompt}")
        assert "Inventory:" in first and "Score 0/" in first
        assert first.endswith(
            "\n".join(["Choose the next command from this list:", *commands, "Answer with the command only."])
        )
        walkthrough = task.meta["walkthrough"]
        for i, command in enumerate(walkthrough):
            obs = env.step(command)
            assert obs.info["command"] == command
            assert obs.done == (i == len(walkthrough) - 1)
        assert obs.reward == 1.0 and obs.info["won"]
        assert "You won" in obs.text and ", ".join(walkthrough) in obs.text


def test_a_wrong_command_scores_zero_and_says_why(games: tuple[Path, list[Task]]) -> None:
    env = TextWorldEnv()
    env.reset(games[1][0])
    obs = env.step("fly to the moon")
    assert (obs.reward, obs.done, obs.info["command"]) == (0.0, False, None)
    assert "not one of the valid commands" in obs.text and "\n- look\n" in obs.text
    obs = env.step("look")  # a valid command that does not advance the quest
    assert (obs.reward, obs.done, obs.info["command"]) == (0.0, False, "look")
    assert "step 2 of 20" in obs.text and "Commands so far: look." in obs.text


def test_the_game_ends_after_max_steps(games: tuple[Path, list[Task]]) -> None:
    env = TextWorldEnv(max_steps=2)
    env.reset(games[1][0].to_dict())  # the JSON form of a task works too
    assert not env.step("look").done
    obs = env.step("look")
    assert obs.done and obs.reward == 0.0 and "Out of steps (2)" in obs.text
    with pytest.raises(ConfigError, match="reset"):
        env.step("look")


def test_a_textworld_task_refuses_single_step_scoring(games: tuple[Path, list[Task]]) -> None:
    env = TaskEnv(games[1])
    env.reset("tw-1")
    with pytest.raises(ConfigError, match="TextWorldEnv"):
        env.step("go south")


def test_reset_needs_a_game() -> None:
    with pytest.raises(ConfigError, match="game_file"):
        TextWorldEnv().reset(Task(id="x", prompt="p", answer="a"))
    with pytest.raises(ConfigError, match="does not exist"):
        TextWorldEnv().reset("/nowhere/game.z8")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("go east", "go east"),
        ("> Take Latchkey from basket.", "take latchkey from basket"),
        ("Command: look", "look"),
        ("- take latchkey\n- look", "take latchkey"),  # a model that copies the list starts with a bullet
        ("I will go east, then take latchkey from basket.", "go east"),
        ("take latchkey from basket", "take latchkey from basket"),
        ("```\ngo east\n```", "go east"),
        ("go eats", "go east"),  # a typo close enough
        ("fly away", None),
        ("go eastward and look around", "look"),  # commands match as whole words
    ],
)
def test_match_command(reply: str, expected: str | None) -> None:
    commands = ["go east", "look", "take latchkey", "take latchkey from basket"]
    assert match_command(reply, commands) == expected


def test_text_helpers() -> None:
    goal = "Welcome to TextWorld! Here is your task for today. First, go east. Then, eat the apple. Got that? Good!"
    assert short_goal(goal) == "First, go east. Then, eat the apple."
    assert clean_feedback("\nYou eat it.\n\n\n\nScore up.\n*** The End ***\nmenu") == "You eat it.\n\nScore up."
    assert clean_feedback("\nYou can't.\n\n>   -= Kitchen =-0/1") == "You can't."


def player(walkthroughs: dict[str, Sequence[str]]) -> Callable[[Sequence[Message]], str]:
    """A model that knows each game's walkthrough and plays the next command, said in a sentence."""

    def reply(messages: Sequence[Message]) -> str:
        observation = messages[-1].content.rsplit("Goal: ", 1)[-1]
        goal = observation.splitlines()[0]
        done = re.search(r"Commands so far: (.*)\.", observation)
        played = done.group(1).split(", ") if done else []
        return f"I will {walkthroughs[goal][len(played)]}."

    return reply


def test_evolver_plays_textworld_games_turn_by_turn(games: tuple[Path, list[Task]], tmp_path: Path) -> None:
    tasks = games[1]
    model = ScriptedChat(player({t.prompt: t.meta["walkthrough"] for t in tasks}))
    store = MemoryStore(f"sqlite:///{tmp_path / 'm.db'}", embedder=HashEmbedder())
    team = Team([Agent("player", ChatClient(model), memory=MemoryView(store))])
    ev = Evolver(team, tasks, memory=store, env_factory=lambda: TextWorldEnv(), max_turns=6, progress=False)
    episodes = ev.run_batch(tasks, 1)
    for task, episode in zip(tasks, episodes, strict=True):
        assert episode.success and episode.reward == 1.0 and episode.error is None
        assert [s.turn for s in episode.steps] == list(range(len(task.meta["walkthrough"])))
        assert "You won" in episode.feedback
    metrics = ev.run(rounds=1)[0]
    assert (metrics.episodes, metrics.success_rate, metrics.memory_size) == (2, 1.0, 2)
    assert len(model.calls) == 2 * sum(len(t.meta["walkthrough"]) for t in tasks)


def test_without_textworld_the_error_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata
    import sys

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    with pytest.raises(ConfigError, match=r"\.\[bench\]"):
        textworld_tasks(tmp_path, seeds=[0])
    monkeypatch.setitem(sys.modules, "textworld", None)  # import textworld now raises ImportError
    game = tmp_path / "g.z8"
    game.write_bytes(b"")
    with pytest.raises(ConfigError, match=r"\.\[bench\]"):
        TextWorldEnv().reset(game)


def test_a_textworld_installed_under_a_path_with_spaces_is_reached_through_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TextWorld's Inform 7 compiler cannot open its library under a path with spaces (a fresh clone in
    "Evolve Probe – Zürich" failed every game); tw-make then imports the package through a link without them."""
    import importlib.util
    import types

    from evolve.envs import textworld

    site = tmp_path / "Mein Projekt – Zürich" / "site-packages"
    (site / "textworld").mkdir(parents=True)
    spec = types.SimpleNamespace(origin=str(site / "textworld" / "__init__.py"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    monkeypatch.setattr(textworld.tempfile, "gettempdir", lambda: str(tmp_path))
    env = textworld._space_free_textworld()
    link = Path(env["PYTHONPATH"].split(":")[0])
    assert " " not in str(link) and link.resolve() == site.resolve()
    assert textworld._space_free_textworld() == env  # the link is made once and reused
    monkeypatch.setattr(textworld.tempfile, "gettempdir", lambda: str(tmp_path / "temp with spaces"))
    with pytest.raises(ConfigError, match="path with spaces"):
        textworld._space_free_textworld()
    spec.origin = "/opt/venv/site-packages/textworld/__init__.py"
    assert textworld._space_free_textworld() == {}
