"""The executor seam: chunking, choosing an executor, and the loop running through any ``Executor``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from connectors import ConfigError, HashEmbedder, Message, load_chat
from connectors.environment import Observation
from evolve import Agent, Episode, Evolver, Executor, InProcess, MemoryView, Task, Team
from evolve.executors import Rollout, split
from evolve.ray_executor import make_executor
from memory import MemoryStore, RetrievalConfig
from tests.support.copying_model import copying_reply

TASKS = [Task(id=f"t{i}", prompt=f"Which code opens gate {i}?", answer=str(1000 + i)) for i in range(5)]


@pytest.mark.parametrize(("n", "parts", "sizes"), [(5, 2, [3, 2]), (5, 5, [1] * 5), (2, 4, [1, 1]), (0, 3, [])])
def test_split_keeps_order_and_balances_chunks(n: int, parts: int, sizes: list[int]) -> None:
    chunks = split(TASKS[:n], parts)
    assert [len(c) for c in chunks] == sizes
    assert [t for c in chunks for t in c] == TASKS[:n]


def test_executors_are_chosen_by_name_or_given() -> None:
    assert isinstance(make_executor(), InProcess)
    ray = make_executor("ray", workers=3)
    assert type(ray).__name__ == "RayExecutor" and ray.workers == 3  # type: ignore[attr-defined]
    mine = InProcess()
    assert make_executor(mine) is mine
    with pytest.raises(ConfigError, match="unknown executor 'dask'"):
        make_executor("dask")
    with pytest.raises(ConfigError, match="object with run"):
        make_executor(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="takes no options"):
        make_executor("inprocess", workers=2)
    with pytest.raises(ConfigError, match="workers must be an int >= 1"):
        make_executor("ray", workers=0)


def test_executor_ray_without_ray_installed_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails as if it were not installed
    with pytest.raises(ConfigError, match=r"needs Ray.*pip install -e '\.\[distributed\]'"):
        make_evolver(f"sqlite:///{tmp_path / 'm.db'}", "ray")


class Chunked:
    """An executor that runs the rollout in chunks of two, here, and records what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, list[str]]] = []

    def run(self, rollout: Rollout, tasks: Sequence[Task]) -> list[Episode]:
        self.calls.append((rollout.round, [t.id for t in tasks]))
        return [e for chunk in split(tasks, (len(tasks) + 1) // 2) for e in rollout(chunk)]


def make_evolver(url: str, executor: str | Executor) -> Evolver:
    store = MemoryStore(url, embedder=HashEmbedder())
    view = MemoryView(store, config=RetrievalConfig(k1=10, k2=1, delta=0.95))
    team = Team([Agent("solver", load_chat("fake/scripted", replies=copying_reply), memory=view)])
    return Evolver(team, TASKS, memory=store, run="r", batch_size=4, executor=executor, progress=False)


def test_the_loop_runs_batches_through_the_executor_it_is_given(tmp_path: Path) -> None:
    chunked = Chunked()
    ev = make_evolver(f"sqlite:///{tmp_path / 'chunked.db'}", chunked)
    got = ev.run(rounds=2)
    assert chunked.calls == [(1, ["t0", "t1", "t2", "t3"]), (1, ["t4"]), (2, ["t0", "t1", "t2", "t3"]), (2, ["t4"])]
    expected = make_evolver(f"sqlite:///{tmp_path / 'whole.db'}", "inprocess").run(rounds=2)
    assert [replace(m, seconds=0.0) for m in got] == [replace(m, seconds=0.0) for m in expected]
    assert [m.success_rate for m in got] == [0.0, 1.0]


def test_a_rollout_names_its_episodes_and_runs_every_turn() -> None:
    team = Team([Agent("solver", load_chat("fake/scripted", replies=knows_gate_1))])
    rollout = Rollout(team, _TwoTries, run="r", round=7, max_turns=3)
    [first, second] = rollout(TASKS[1:3])
    assert (first.id, first.round, first.success, len(first.steps)) == ("r:7:t1", 7, True, 1)
    assert (second.id, second.success, [s.turn for s in second.steps]) == ("r:7:t2", False, [0, 1, 2])


def knows_gate_1(messages: Sequence[Message]) -> str:
    return "1001" if "gate 1" in messages[-1].content else "1003"


class _TwoTries:
    """A task environment that lets a wrong answer be tried again."""

    def __init__(self) -> None:
        self.answer = ""

    def reset(self, task: Task | str) -> str:
        assert isinstance(task, Task)
        self.answer = task.answer
        return task.prompt

    def step(self, action: str) -> Observation:
        ok = action.strip() == self.answer
        return Observation("right" if ok else "try again", 1.0 if ok else 0.0, ok, {})
