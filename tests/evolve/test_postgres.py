"""Leases, jobs, the run log and prompt versions on PostgreSQL, in the database the memory lives in.

On PostgreSQL a lease is an advisory lock held by a live connection: a holder that dies frees it at
once, whatever its ``ttl``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect

from connectors import HashEmbedder, ScriptedChat, make_engine
from connectors.chat import ChatClient
from connectors.pglock import AdvisoryLock
from evolve import Agent, Evolver, MemoryView, PromptEvolution, PromptGraph, Team, split_tasks
from evolve.jobs.job import job_history, lease_name, run_job
from evolve.jobs.leases import Lease
from memory import MemoryStore
from tests.evolve.prompts.test_evolution import TASKS, ProposeOnce, obedient

pytestmark = pytest.mark.postgres
HOUR = 3600.0


@pytest.fixture
def engine(pg_url: str) -> Engine:
    return make_engine(pg_url)


def test_a_lease_has_one_holder_and_its_row_says_who(engine: Engine) -> None:
    a, b = Lease(engine, "job", holder="a", ttl=HOUR), Lease(engine, "job", holder="b", ttl=HOUR)
    assert a.acquire() and not b.acquire()
    assert a.renew() and not b.renew()
    assert not b.release()
    state = b.state()
    assert state is not None and state.holder == "a"
    assert a.acquire()  # its own lease again
    assert a.release() and a.state() is None
    assert b.acquire() and a.state() is not None and not a.acquire()
    assert Lease(engine, "other job", holder="c").acquire()  # other names do not exclude each other
    b.release()


def test_a_lease_whose_connection_is_lost_is_lost(engine: Engine) -> None:
    lease = Lease(engine, "job", holder="a", ttl=HOUR)
    assert lease.acquire()
    lock = lease._lock
    assert isinstance(lock, AdvisoryLock)
    with engine.connect() as conn:
        (pid,) = lock.holders(conn)
        conn.exec_driver_sql(f"SELECT pg_terminate_backend({pid})")  # the server drops its session
    assert not lease.renew()
    assert Lease(engine, "job", holder="b", ttl=HOUR).acquire()


def test_a_killed_holder_frees_the_lease_at_once(pg_url: str, engine: Engine, repo_root: Path) -> None:
    code = (
        "import sys, time; from connectors import make_engine; from evolve.jobs.leases import Lease; "
        f"lease = Lease(make_engine({pg_url!r}), 'nightly', holder='doomed', ttl={HOUR}); "
        "print(lease.acquire(), flush=True); time.sleep(600)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=repo_root, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
        waiting = Lease(engine, "nightly", holder="next", ttl=HOUR)
        assert not waiting.acquire()
        state = waiting.state()
        assert state is not None and state.holder == "doomed" and state.expires_at > time.time() + HOUR / 2
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
        deadline = time.monotonic() + 10  # the server notices the closed socket; no ttl to wait out
        while not waiting.acquire():
            assert time.monotonic() < deadline, "the dead holder's lease was not freed"
            time.sleep(0.05)
        state = waiting.state()
        assert state is not None and state.holder == "next"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(30)
    waiting.release()


def make_evolver(url: str, optimizer: ProposeOnce) -> tuple[Evolver, PromptGraph, MemoryStore]:
    store = MemoryStore(url, embedder=HashEmbedder())
    team = Team(
        [Agent("solver", ChatClient(ScriptedChat(obedient)), system="Answer briefly.", memory=MemoryView(store))]
    )
    graph = PromptGraph(store.engine, "p")
    train, val = split_tasks(TASKS, seed=1)
    prompts = PromptEvolution(graph, optimizer, train_ids=train, val_ids=val)
    return Evolver(team, TASKS, memory=store, run="p", prompts=prompts, progress=False), graph, store


def test_jobs_evolve_prompts_and_memory_in_one_postgres_database(pg_url: str) -> None:
    ev, graph, store = make_evolver(pg_url, ProposeOnce("Answer briefly; always answer red."))
    first, second = run_job(ev), run_job(ev)
    assert (first.status, first.round, second.status, second.round) == ("ran", 1, "ran", 2)
    assert first.metrics is not None and first.metrics.success_rate == 0.0 and first.metrics.prompt_updates == 1
    assert second.metrics is not None and second.metrics.success_rate == 1.0
    assert graph.head().nodes["solver.system"] == "Answer briefly; always answer red."
    assert [(j.round, j.status) for j in job_history(store.engine)] == [(2, "done"), (1, "done")]
    assert Lease(store.engine, lease_name("p")).state() is None
    assert store.stats()["count"] == 2 * len(TASKS)  # one memory per attempt
    assert store.engine.dialect.name == "postgresql"
    tables = set(inspect(store.engine).get_table_names())
    shared = {"memory_items", "evolve_runs", "evolve_rounds", "evolve_episodes", "evolve_jobs", "evolve_leases"}
    assert shared | {"prompt_versions", "prompt_heads"} <= tables
    again, graph_again, other = make_evolver(pg_url, ProposeOnce("Answer briefly."))  # another machine
    third = run_job(again)
    assert (third.status, third.round) == ("ran", 3) and third.metrics is not None
    assert third.metrics.success_rate == 1.0  # it acts from the evolved HEAD it found in the database
    assert third.metrics.prompt_updates == 0 and graph_again.head().id == graph.head().id  # proposal rejected
    for s in (store, other):
        s.close()
