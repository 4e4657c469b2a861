"""Episodes on a real local Ray cluster (2 CPUs, workers in their own processes): the same memory and
round metrics as in-process, shared memory through a database, clear errors for what cannot travel."""

from __future__ import annotations

import functools
import itertools
import json
import os
import signal
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from connectors import ConfigError, ConnectorError, HashEmbedder, Message, load_chat
from evolve import Agent, Evolver, InProcess, MemoryView, RoundMetrics, Task, Team
from evolve.build import build
from evolve.envs.tasks import TaskEnv
from evolve.spec import load_spec
from memory import MemoryStore, RetrievalConfig
from tests.conftest import ROOT
from tests.support.copying_model import copying_reply

ray = pytest.importorskip("ray")

from evolve.ray_executor import RayExecutor, pack, unpack  # noqa: E402

NAMES = ["amber", "birch", "cedar", "delta", "ember", "flint"]
TASKS = [
    Task(
        id=f"t{i}",
        prompt=f"Which code opens the {name} gate?",
        answer=str(1000 + i),
        feedback="none" if i >= 4 else "reveal",
    )
    for i, name in enumerate(NAMES)
]
"""Four tasks whose feedback reveals the code (memory solves them from round 2) and two that never do
(their memories' Q goes negative)."""


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    """A local cluster of 2 CPUs (no dashboard) whose workers can import the test helpers; shut down
    after the tests. The workers inherit PYTHONPATH from this process (a runtime_env would restart them)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def make_evolver(url: str, *, executor: Any = "inprocess", reply: Any = copying_reply) -> Evolver:
    """Two agents in a chain, each recalling from its own namespace of one store."""
    store = MemoryStore(url, embedder=HashEmbedder())
    view = functools.partial(MemoryView, store, config=RetrievalConfig(k1=10, k2=1, delta=0.95))
    chat = load_chat("fake/scripted", replies=reply)
    team = Team([Agent("planner", chat, memory=view(namespace="r/planner")), Agent("solver", chat, memory=view())])
    return Evolver(team, TASKS, memory=store, run="r", batch_size=4, executor=executor, progress=False)


def memory_state(ev: Evolver) -> list[tuple[Any, ...]]:
    assert ev.memory is not None
    return sorted((m.id, m.namespace, m.intent, m.experience, m.q, m.visits) for m in ev.memory.items())


def without_time(metrics: Sequence[RoundMetrics]) -> list[RoundMetrics]:
    return [replace(m, seconds=0.0) for m in metrics]


def pid_reply(messages: Sequence[Message], *, folder: str) -> str:
    """``copying_reply``, leaving a file named after the process that answered."""
    Path(folder, str(os.getpid())).touch()
    return copying_reply(messages)


@pytest.fixture
def pg_urls(pg_server: str, pg_url: str) -> Iterator[tuple[str, str]]:
    """Two fresh PostgreSQL databases: one for the in-process run, one for Ray."""
    from tests.support.postgres import create_database, drop_database

    name = f"evolve_ray_{os.getpid()}_{next(_databases)}"
    yield pg_url, create_database(pg_server, name)
    drop_database(pg_server, name)


_databases = itertools.count(1)


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres), "sqlite"])
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """Two empty databases of one kind (PostgreSQL, or SQLite files shared by processes through WAL)."""
    if request.param == "postgres":
        pair: tuple[str, str] = request.getfixturevalue("pg_urls")
        return pair
    return f"sqlite:///{tmp_path / 'local.db'}", f"sqlite:///{tmp_path / 'ray.db'}"


def test_ray_rounds_learn_exactly_what_in_process_rounds_learn(
    urls: tuple[str, str], tmp_path: Path, ray_cluster: None
) -> None:
    local = make_evolver(urls[0])
    expected = local.run(rounds=3)
    assert [m.success_rate for m in expected] == [0.0, 4 / 6, 4 / 6]  # memory at work; two tasks never learnable
    pids = tmp_path / "pids"
    pids.mkdir()
    reply = functools.partial(pid_reply, folder=str(pids))
    distributed = make_evolver(urls[1], executor=RayExecutor(workers=2), reply=reply)
    got = distributed.run(rounds=3)
    assert without_time(got) == without_time(expected)
    state = memory_state(distributed)
    assert state == memory_state(local)
    assert {ns for _, ns, *_ in state} == {"default", "r/planner"}
    assert min(q for *_, q, _ in state) < 0 < max(q for *_, q, _ in state)
    workers = {int(p.name) for p in pids.iterdir()}
    assert len(workers) >= 2 and os.getpid() not in workers  # episodes ran in several other processes


def dying_reply(messages: Sequence[Message], *, marker: str, once: bool) -> str:
    """Kills its worker process on the delta task (only the first time when ``once``)."""
    if "delta" in messages[-1].content and not (once and os.path.exists(marker)):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return copying_reply(messages)


def test_a_killed_worker_fails_the_batch_and_the_run_resumes(tmp_path: Path, ray_cluster: None) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    dying = functools.partial(dying_reply, marker=str(tmp_path / "died"), once=False)
    ev = make_evolver(url, executor=RayExecutor(workers=2, max_retries=0), reply=dying)
    with pytest.raises(ConnectorError, match=r"worker was lost .*t3") as failure:
        ev.run(rounds=1)
    assert failure.value.retryable
    assert ev.log.done_task_ids(1) == set()  # the first batch held t3: nothing of it was recorded
    assert ev.memory is not None and ev.memory.items() == []
    again = make_evolver(url, executor=RayExecutor(workers=2))
    assert again.run(rounds=1)[0].episodes == len(TASKS)


def test_a_chunk_whose_worker_died_is_retried(tmp_path: Path, ray_cluster: None) -> None:
    dying = functools.partial(dying_reply, marker=str(tmp_path / "died"), once=True)
    ev = make_evolver(f"sqlite:///{tmp_path / 'ray.db'}", executor=RayExecutor(workers=2, max_retries=1), reply=dying)
    got = ev.run(rounds=2)
    assert (tmp_path / "died").exists()  # a worker really died on the first try
    local = make_evolver(f"sqlite:///{tmp_path / 'local.db'}")
    assert without_time(got) == without_time(local.run(rounds=2))
    assert memory_state(ev) == memory_state(local)


class BrokenChecker(TaskEnv):
    def step(self, action: str) -> Any:
        raise RuntimeError("the checker crashed")


def test_an_error_in_a_worker_is_raised_as_in_process(tmp_path: Path, ray_cluster: None) -> None:
    ev = make_evolver(f"sqlite:///{tmp_path / 'm.db'}", executor=RayExecutor(workers=2))
    ev.env_factory = functools.partial(BrokenChecker, TASKS)
    with pytest.raises(RuntimeError, match="the checker crashed"):
        ev.run(rounds=1)
    assert ev.log.done_task_ids(1) == set()


def test_an_in_memory_sqlite_store_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"in-memory SQLite.*sqlite:///path.*PostgreSQL"):
        make_evolver("sqlite://", executor="ray")


class LoggedEnvs:
    """An environment factory that holds an open file: it cannot travel to another process."""

    def __init__(self, log: Any) -> None:
        self.log = log

    def __call__(self) -> TaskEnv:
        return TaskEnv(TASKS)


def test_what_cannot_be_pickled_is_named(tmp_path: Path) -> None:
    ev = make_evolver(f"sqlite:///{tmp_path / 'm.db'}")
    with (tmp_path / "log.txt").open("w") as log:
        ev.env_factory = LoggedEnvs(log)
        with pytest.raises(ConfigError, match="the environment factory cannot be pickled"):
            RayExecutor().check(ev.rollout(1))


def test_a_packed_rollout_reopens_its_store_once_per_process(tmp_path: Path) -> None:
    ev = make_evolver(f"sqlite:///{tmp_path / 'm.db'}")
    assert ev.memory is not None
    ev.run(rounds=1)
    payload = pack(ev.rollout(2))
    first, second = unpack(payload), unpack(payload)
    stores = {a.memory.store for r in (first, second) for a in r.team.agents.values() if a.memory is not None}
    assert len(stores) == 1 and stores != {ev.memory}  # one store reopened for both copies, not the original
    assert {s.url for s in stores} == {ev.memory.url}
    assert first.team is not ev.team and first.team.order == ev.team.order
    here, there = ev.rollout(2)(TASKS), first(TASKS)
    assert [(e.id, e.answer, e.reward) for e in there] == [(e.id, e.answer, e.reward) for e in here]
    assert [e.success for e in there] == [True] * 4 + [False] * 2


def write_spec(folder: Path, run: str) -> Path:
    """A run spec on the scripted model and hash embedder; ``run`` is added to its ``[run]`` section."""
    lines = [json.dumps({"id": t.id, "prompt": t.prompt, "answer": t.answer}) for t in TASKS[:4]]
    (folder / "tasks.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    spec = folder / "spec.toml"
    spec.write_text(
        textwrap.dedent(
            f"""
            [run]
            name = "spec"
            rounds = 1
            batch_size = 4
            {run}

            [model]
            chat = "fake/scripted"
            options = {{ replies = ["1000"] }}

            [embedder]
            name = "hash"

            [environment]
            tasks = "tasks.jsonl"
            paraphrase = false
            """
        ),
        encoding="utf-8",
    )
    return spec


def test_a_run_spec_runs_on_ray(tmp_path: Path, ray_cluster: None) -> None:
    db = f"sqlite:///{tmp_path / 'spec.db'}"
    ev = build(load_spec(write_spec(tmp_path, f'database = "{db}"\nexecutor = "ray"\nworkers = 2')), progress=False)
    assert isinstance(ev.executor, RayExecutor) and ev.executor.workers == 2
    [metrics] = ev.run(rounds=1)
    assert (metrics.episodes, metrics.success_rate, metrics.memory_size) == (4, 0.25, 4)
    plain = build(load_spec(write_spec(tmp_path, f'database = "{db}"')), progress=False)
    assert isinstance(plain.executor, InProcess)


def test_a_run_spec_with_ray_options_but_no_ray_or_a_private_database_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="workers and ray_address apply only"):
        build(load_spec(write_spec(tmp_path, "workers = 2")), progress=False)
    with pytest.raises(ConfigError, match="in-memory SQLite"):
        build(load_spec(write_spec(tmp_path, 'database = "sqlite://"\nexecutor = "ray"')), progress=False)
