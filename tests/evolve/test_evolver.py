from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select

from connectors import ConfigError, HashEmbedder, ScriptedChat, make_engine
from connectors.chat import ChatClient
from evolve import Agent, Evolver, MemoryView, Task, Team, paraphrase_schedule
from evolve.episode import Episode
from evolve.evolver import pooled_moments, task_envs
from evolve.run_log import episodes
from memory import MemoryStore, RetrievalConfig
from tests.support.copying_model import copying_reply

TASKS = [
    Task(id=f"t{i}", prompt=f"Which code opens the {name} gate?", answer=str(1000 + i))
    for i, name in enumerate(["amber", "birch", "cedar", "delta"])
]


def make_evolver(
    url: str, *, memory: bool = True, run: str = "r", model: ScriptedChat | None = None, batch_size: int = 2
) -> tuple[Evolver, MemoryStore | None]:
    store = MemoryStore(url, embedder=HashEmbedder()) if memory else None
    agent = Agent(
        "solver",
        ChatClient(model or ScriptedChat(copying_reply)),
        memory=MemoryView(store, config=RetrievalConfig(k1=10, k2=1, delta=0.95)) if store else None,
    )
    ev = Evolver(
        Team([agent]),
        TASKS,
        memory=store,
        engine=None if store else make_engine(url),
        run=run,
        batch_size=batch_size,
        progress=False,
    )
    return ev, store


def test_memory_turns_revealed_feedback_into_success(tmp_path: Path) -> None:
    ev, store = make_evolver(f"sqlite:///{tmp_path / 'm.db'}")
    metrics = ev.run(rounds=3)
    assert [m.success_rate for m in metrics] == [0.0, 1.0, 1.0]
    assert metrics[0].memory_size == 4 and metrics[2].memory_size == 12  # one experience per attempt
    assert metrics[2].q_mean > 0  # the memories that helped earned utility
    baseline, _ = make_evolver(f"sqlite:///{tmp_path / 'b.db'}", memory=False)
    assert [m.success_rate for m in baseline.run(rounds=3)] == [0.0, 0.0, 0.0]


def test_rewards_reach_exactly_the_recalled_memories(tmp_path: Path) -> None:
    ev, store = make_evolver(f"sqlite:///{tmp_path / 'm.db'}")
    assert store is not None
    ev.run(rounds=2)
    items = store.items()
    round1 = [it for it in items if it.meta.get("provenance", it.meta).get("episode", "").startswith("r:1:")]
    assert len(round1) == 4
    assert all(it.visits >= 1 and it.q == pytest.approx(0.3) for it in round1)  # recalled once, reward 1, α = 0.3
    round2 = [it for it in items if it not in round1]
    assert all(it.visits == 0 and it.q == 0.0 for it in round2)


def test_finished_rounds_are_not_run_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    model = ScriptedChat(copying_reply)
    ev, store = make_evolver(url, model=model)
    ev.run(rounds=2)
    calls = len(model.calls)
    assert store is not None
    store.close()
    again, _ = make_evolver(url, model=model)
    assert [m.round for m in again.run(rounds=2)] == [1, 2]
    assert len(model.calls) == calls


def test_paraphrase_schedule_varies_phrasing_but_not_tasks() -> None:
    tasks = [Task(id="a", prompt="p0", answer="1", meta={"paraphrases": ["p1", "p2", "p3"]})]
    schedule = paraphrase_schedule(seed=3)
    prompts = {schedule(tasks, r)[0].prompt for r in range(1, 20)}
    assert prompts == {"p0", "p1", "p2", "p3"}
    assert schedule(tasks, 5) == schedule(tasks, 5)


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ConfigError, match="at least one task"):
        Evolver(Team([Agent("a", ChatClient(ScriptedChat(["x"])))]), [], engine=make_engine("sqlite://"))
    with pytest.raises(ConfigError, match="engine="):
        Evolver(Team([Agent("a", ChatClient(ScriptedChat(["x"])))]), TASKS)


KILLED_RUN = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r})
    from connectors import ScriptedChat
    from tests.support.copying_model import copying_reply
    from tests.evolve.test_evolver import make_evolver

    def slow(messages):
        time.sleep(0.4)
        return copying_reply(messages)

    ev, _ = make_evolver({url!r}, model=ScriptedChat(slow), batch_size=1)
    ev.run(rounds=3)
    """
)


def test_a_run_killed_mid_round_resumes_from_its_checkpoint(tmp_path: Path, repo_root: Path) -> None:
    url = f"sqlite:///{tmp_path / 'killed.db'}"
    script = tmp_path / "run.py"
    script.write_text(KILLED_RUN.format(root=str(repo_root), url=url))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=repo_root)
    engine = make_engine(url)
    deadline = time.time() + 60
    recorded = 0
    while time.time() < deadline and recorded < 6:  # round 1 done, round 2 half-way
        time.sleep(0.1)
        try:
            with engine.connect() as conn:
                recorded = conn.execute(select(func.count()).select_from(episodes)).scalar_one()
        except Exception:
            recorded = 0
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 6 <= recorded < 12, f"the run should have been killed in round 2, saw {recorded} episodes"

    resumed, store = make_evolver(url, batch_size=1)
    metrics = resumed.run(rounds=3)
    reference, ref_store = make_evolver(f"sqlite:///{tmp_path / 'reference.db'}", batch_size=1)
    expected = reference.run(rounds=3)
    assert [m.success_rate for m in metrics] == [m.success_rate for m in expected]
    assert store is not None and ref_store is not None
    got = sorted((it.intent, round(it.q, 9), it.visits) for it in store.items())
    want = sorted((it.intent, round(it.q, 9), it.visits) for it in ref_store.items())
    assert got == want  # no experience written twice, no reward applied twice


def test_pooled_moments_equal_the_moments_of_the_union() -> None:
    rng = np.random.default_rng(0)
    groups = [rng.normal(size=n) for n in (5, 0, 12, 1)]
    parts = [(len(g), float(g.mean()) if len(g) else 0.0, float(g.std()) if len(g) else 0.0) for g in groups]
    n, mean, std = pooled_moments(parts)
    union = np.concatenate(groups)
    assert n == 18 and mean == pytest.approx(union.mean()) and std == pytest.approx(union.std())
    assert pooled_moments([(0, 0.0, 0.0)]) == (0, 0.0, 0.0)


def test_round_metrics_cover_every_namespace_of_the_team(tmp_path: Path) -> None:
    store = MemoryStore(f"sqlite:///{tmp_path / 'm.db'}", embedder=HashEmbedder())
    drafter = Agent("drafter", ChatClient(ScriptedChat(copying_reply)), memory=MemoryView(store, "drafts"))
    solver = Agent("solver", ChatClient(ScriptedChat(copying_reply)), memory=MemoryView(store, "answers"))
    ev = Evolver(Team([drafter, solver]), TASKS, memory=store, batch_size=4, progress=False)
    last = ev.run(rounds=2)[-1]
    qs = np.array([it.q for it in store.items()])
    assert last.memory_size == len(qs) == 16  # 4 tasks x 2 rounds x 2 namespaces
    assert last.q_mean == pytest.approx(qs.mean()) and last.q_std == pytest.approx(qs.std())


def test_default_environments_are_independent() -> None:
    make = task_envs(TASKS)
    first, second = make(), make()
    first.reset(TASKS[0])
    assert second.reset(TASKS[1].id) == TASKS[1].prompt  # every task known to every environment
    assert first.step("1000").reward == 1.0 and second.step("1000").reward == 0.0


def test_a_batch_learned_from_but_not_yet_marked_is_not_learned_twice(tmp_path: Path) -> None:
    """A batch is marked learned with the next batch's record: a crash in between re-learns it on resume,
    and the idempotency keys keep its rewards and memories from counting twice."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    ev, store = make_evolver(url)
    ev.run(rounds=1)
    real_apply, calls = ev.apply, []

    def crash_after_second_batch(eps: list[Episode]) -> None:
        real_apply(eps)
        calls.append(len(eps))
        if len(calls) == 2:
            raise KeyboardInterrupt  # the process dies after learning, before the next record

    ev.apply = crash_after_second_batch  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        ev.run(rounds=2)
    assert len(ev.log.unlearned(2)) == 2  # learned from, not yet marked
    assert store is not None
    store.close()
    resumed, store = make_evolver(url)
    metrics = resumed.run(rounds=3)
    assert resumed.log.unlearned(2) == [] and resumed.log.unlearned(3) == []
    reference, ref_store = make_evolver(f"sqlite:///{tmp_path / 'reference.db'}")
    assert [m.success_rate for m in metrics] == [m.success_rate for m in reference.run(rounds=3)]
    assert store is not None and ref_store is not None
    got = sorted((it.intent, round(it.q, 9), it.visits) for it in store.items())
    assert got == sorted((it.intent, round(it.q, 9), it.visits) for it in ref_store.items())


def test_rounds_report_the_share_of_tasks_solved_at_least_once(tmp_path: Path) -> None:
    """MemRL's cumulative success: a task solved in any round so far counts, whatever later rounds do."""
    calls: dict[str, int] = {}
    right_on = {"amber": 1, "birch": 1, "cedar": 2}  # the attempt at which each gate's code is answered

    def forgetful(messages: list) -> str:
        gate = next(g for g in ("amber", "birch", "cedar", "delta") if g in messages[-1].content)
        calls[gate] = calls.get(gate, 0) + 1
        return (
            str(1000 + ["amber", "birch", "cedar", "delta"].index(gate)) if right_on.get(gate) == calls[gate] else "?"
        )

    ev, _ = make_evolver(f"sqlite:///{tmp_path / 'm.db'}", memory=False, model=ScriptedChat(forgetful))
    metrics = ev.run(rounds=3)
    assert [m.success_rate for m in metrics] == [0.5, 0.25, 0.0]
    assert [m.solved_share for m in metrics] == [0.5, 0.75, 0.75]
    from apps.report import run_table

    assert run_table(metrics).splitlines()[0].split()[:3] == ["round", "success", "solved"]
    assert run_table(metrics).splitlines()[2].split()[:3] == ["2", "0.25", "0.75"]


def test_every_memory_a_run_writes_names_the_run_as_its_writer(tmp_path: Path) -> None:
    run = "Türcodes Pilot 2026 — Zürich Nordhafen (Lager 7)"
    ev, store = make_evolver(f"sqlite:///{tmp_path / 'm.db'}", run=run)
    ev.run(rounds=1)
    assert store is not None
    assert {m.meta["writer"] for m in store.items()} == {f"run:{run}"} and len(store.items()) == len(TASKS)
