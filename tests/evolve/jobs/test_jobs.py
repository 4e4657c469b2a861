"""Leases and jobs: one job per run at a time, a ledger of every job, and killed jobs resumed."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy import Engine, insert

from connectors import ChatClient, ConfigError, EvolveError, HashEmbedder, ScriptedChat, make_engine
from evolve import Agent, Evolver, MemoryView, Task, Team
from evolve.jobs.job import (
    JobResult,
    holding,
    job_counts,
    job_history,
    jobs,
    lease_name,
    next_round,
    run_job,
    take_lease,
)
from evolve.jobs.leases import Lease, leases
from evolve.run_log import RoundMetrics
from memory import MemoryStore, RetrievalConfig
from optimizers.types import Trace

TASKS = [
    Task(id=f"t{i}", prompt=f"Which code opens the {name} gate?", answer="4471" if i % 2 == 0 else str(1000 + i))
    for i, name in enumerate(["amber", "birch", "cedar", "delta"])
]


def make_evolver(db: Path, *, run: str = "r") -> Evolver:
    store = MemoryStore(f"sqlite:///{db}", embedder=HashEmbedder())
    agent = Agent(
        "solver",
        ChatClient(ScriptedChat(["4471"])),
        memory=MemoryView(store, namespace=f"{run}/solver", config=RetrievalConfig(k1=10, k2=1)),
    )
    return Evolver(Team([agent]), TASKS, memory=store, run=run, batch_size=1, progress=False)


def memory_state(ev: Evolver) -> list[tuple[str, float, int]]:
    assert ev.memory is not None
    return sorted((it.id, round(it.q, 12), it.visits) for it in ev.memory.items())


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return make_engine(f"sqlite:///{tmp_path / 'leases.db'}")


# -- leases ------------------------------------------------------------------------------------------
def test_a_live_lease_has_one_holder_until_released(engine: Engine) -> None:
    a, b = Lease(engine, "job", holder="a", ttl=60), Lease(engine, "job", holder="b", ttl=60)
    assert a.acquire() and not b.acquire()
    assert a.renew() and not b.renew()
    assert not b.release()  # b cannot free a's lease
    state = a.state()
    assert state is not None and state.holder == "a" and state.expires_at > state.acquired_at
    assert a.acquire()  # a holder may take its own lease again
    assert a.release() and a.state() is None
    assert b.acquire() and b.state() is not None


def test_an_expired_lease_is_taken_over_and_its_old_holder_finds_out(engine: Engine) -> None:
    clock = Clock()
    a = Lease(engine, "job", holder="a", ttl=10, clock=clock)
    b = Lease(engine, "job", holder="b", ttl=10, clock=clock)
    assert a.acquire()
    clock.t += 9
    assert not b.acquire()  # still live
    clock.t += 2
    assert b.acquire()  # a stopped renewing (killed): its lease expired
    assert not a.renew()
    assert not a.release()
    state = b.state()
    assert state is not None and state.holder == "b" and state.expires_at == clock.t + 10


def test_leases_with_other_names_do_not_exclude_each_other(engine: Engine) -> None:
    assert Lease(engine, lease_name("one"), holder="a").acquire()
    assert Lease(engine, lease_name("two"), holder="b").acquire()


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"ttl": 0}, "ttl"), ({"holder": ""}, "holder"), ({"ttl": float("nan")}, "ttl")]
)
def test_bad_lease_settings_are_refused(engine: Engine, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Lease(engine, "job", **kwargs)


def test_the_heartbeat_renews_the_lease_and_notices_when_it_is_taken(engine: Engine) -> None:
    lease = Lease(engine, "job", holder="a", ttl=0.3)
    assert lease.acquire()
    first = lease.state()
    assert first is not None
    with lease.heartbeat() as beat:
        deadline = time.monotonic() + 10
        while (now := lease.state()) is not None and now.renewed_at == first.renewed_at:
            assert time.monotonic() < deadline, "the heartbeat never renewed the lease"
            time.sleep(0.02)
        assert not beat.lost
        with engine.begin() as conn:  # another holder takes the lease
            conn.execute(leases.update().values(holder="thief"))
        assert beat.wait_lost(10)
    assert beat.lost_at is not None


def test_processes_racing_for_one_lease_get_it_once(tmp_path: Path, repo_root: Path) -> None:
    """Atomic across processes: each waits at a barrier, then all try at once; exactly one wins."""
    url = f"sqlite:///{tmp_path / 'race.db'}"
    Lease(make_engine(url), "job")  # creates the table first, so the race is about the row
    code = (
        "import sys; from connectors import make_engine; from evolve.jobs.leases import Lease; "
        f"lease = Lease(make_engine({url!r}), 'job', ttl=60); print('ready', flush=True); "
        "sys.stdin.readline(); print(lease.acquire(), flush=True)"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], cwd=repo_root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(5)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    answers = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert sorted(answers) == ["False"] * 4 + ["True"]


# -- jobs --------------------------------------------------------------------------------------------
def test_next_round_is_the_lowest_round_not_completed() -> None:
    assert next_round([]) == 1
    assert next_round([1, 2, 4]) == 3


def test_each_job_runs_the_next_round_and_the_ledger_records_it(tmp_path: Path) -> None:
    ev = make_evolver(tmp_path / "m.db")
    first, second = run_job(ev), run_job(ev)
    assert (first.status, first.round, second.status, second.round) == ("ran", 1, "ran", 2)
    assert first.metrics is not None and first.metrics.episodes == 4 and first.metrics.success_rate == 0.5
    assert second.metrics is not None and second.metrics.memory_size == 8
    history = job_history(ev.log.engine)
    assert [(j.id, j.round, j.status) for j in history] == [(second.job_id, 2, "done"), (first.job_id, 1, "done")]
    assert history[0].metrics == second.metrics and history[0].finished_at is not None
    assert history[0].holder == second.holder and history[0].error is None
    assert Lease(ev.log.engine, lease_name("r")).state() is None  # released
    assert [j.round for j in job_history(ev.log.engine, run="r", limit=1)] == [2]
    assert job_history(ev.log.engine, run="other") == []


def test_a_job_skips_while_another_holds_the_run_and_changes_nothing(tmp_path: Path) -> None:
    ev = make_evolver(tmp_path / "m.db")
    run_job(ev)
    before = memory_state(ev)
    assert Lease(ev.log.engine, lease_name("r"), holder="busy-host:1:abc", ttl=60).acquire()
    skipped = run_job(ev)
    assert (skipped.status, skipped.round, skipped.metrics) == ("skipped", 2, None)
    assert skipped.held_by is not None and skipped.held_by.holder == "busy-host:1:abc"
    assert "busy-host:1:abc" in skipped.note
    assert memory_state(ev) == before and 2 not in ev.log.completed()
    record = job_history(ev.log.engine, limit=1)[0]
    assert (record.status, record.round, record.id) == ("skipped", 2, skipped.job_id)
    assert "busy-host:1:abc" in record.note


def test_jobs_on_other_runs_are_not_blocked(tmp_path: Path) -> None:
    ev = make_evolver(tmp_path / "m.db", run="r@acme")
    assert Lease(ev.log.engine, lease_name("r@globex"), holder="other", ttl=60).acquire()
    assert run_job(ev).status == "ran"


def test_before_round_runs_inside_the_lease(tmp_path: Path) -> None:
    ev = make_evolver(tmp_path / "m.db")
    seen = []

    def ingest() -> None:
        state = Lease(ev.log.engine, lease_name("r")).state()
        seen.append((state.holder if state else None, sorted(ev.log.completed())))

    assert run_job(ev, holder="me", before_round=ingest).status == "ran"
    assert seen == [("me", [])]


def test_traces_before_round_returns_reach_the_rounds_prompt_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ev = make_evolver(tmp_path / "m.db")
    rated = [Trace("served:1", (), "4471", 0.0, "A user rated this answer 0 out of 1.")]
    seen = []
    real = ev.run_round

    def spy(round_: int, *, extra_traces: Sequence[Trace] = ()) -> RoundMetrics:
        seen.append(list(extra_traces))
        return real(round_, extra_traces=extra_traces)

    monkeypatch.setattr(ev, "run_round", spy)
    run_job(ev, before_round=lambda: rated)
    run_job(ev, before_round=lambda: None)
    assert seen == [rated, []]
    with pytest.raises(ConfigError, match="list of Trace, got int"):
        run_job(ev, before_round=lambda: 3)  # type: ignore[arg-type,return-value]
    assert job_history(ev.log.engine)[0].status == "failed"


def test_a_failing_job_is_recorded_releases_the_lease_and_its_round_runs_next_time(tmp_path: Path) -> None:
    ev = make_evolver(tmp_path / "m.db")

    def broken() -> None:
        raise EvolveError("feedback source unreachable")

    with pytest.raises(EvolveError, match="unreachable"):
        run_job(ev, before_round=broken)
    failed = job_history(ev.log.engine)[0]
    assert (failed.status, failed.round) == ("failed", 1)
    assert failed.error == "EvolveError: feedback source unreachable"
    assert Lease(ev.log.engine, lease_name("r")).state() is None
    assert run_job(ev).round == 1


def test_a_killed_job_is_marked_abandoned_and_its_round_finished_once(tmp_path: Path) -> None:
    """In-process stand-in for a SIGKILL (tests/apps/test_cli_jobs.py kills a real process): a dead
    holder's expired lease, its ledger row still running, and half a round recorded, half unlearned."""
    reference = make_evolver(tmp_path / "ref.db")
    run_job(reference)
    ev = make_evolver(tmp_path / "m.db")
    engine = ev.log.engine
    ev.apply(done := ev.run_batch(TASKS[:1], 1))  # one episode recorded and learned...
    ev.log.record_episodes(done)
    ev.log.mark_learned([e.id for e in done])
    ev.log.record_episodes(ev.run_batch(TASKS[1:2], 1))  # ...and one recorded but not learned from
    assert job_history(engine) == [] and Lease(engine, lease_name("r")).state() is None  # creates the tables
    with engine.begin() as conn:
        conn.execute(
            insert(leases).values(name=lease_name("r"), holder="dead:1:x", acquired_at=0, renewed_at=0, expires_at=1)
        )
        conn.execute(
            insert(jobs).values(run="r", round=1, holder="dead:1:x", host="dead", pid=1, status="running", started_at=0)
        )
    result = run_job(ev)
    assert (result.status, result.round) == ("ran", 1)
    assert "abandoned job" in result.note
    history = job_history(engine)
    assert [(j.holder, j.status) for j in history] == [(result.holder, "done"), ("dead:1:x", "abandoned")]
    assert result.metrics is not None and result.metrics.episodes == 4
    assert memory_state(ev) == memory_state(reference)  # no reward applied twice, no attempt written twice


def test_a_job_whose_lease_was_taken_mid_round_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ev = make_evolver(tmp_path / "m.db")

    def stolen() -> None:
        with ev.log.engine.begin() as conn:
            conn.execute(leases.update().values(holder="thief"))
        deadline = time.monotonic() + 10
        while not any("was lost" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the heartbeat never noticed"
            time.sleep(0.02)

    with caplog.at_level(logging.WARNING, logger="evolve.jobs.leases"):
        result = run_job(ev, ttl=0.3, before_round=stolen)
    assert result.status == "ran" and "lease lost" in result.note
    assert "lease lost" in job_history(ev.log.engine)[0].note
    state = Lease(ev.log.engine, lease_name("r")).state()
    assert state is not None and state.holder == "thief"  # not released: it is not ours any more


def test_a_lease_taken_before_loading_is_kept_renewed_then_run_under(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'm.db'}")
    lease = take_lease(engine, "r", ttl=0.3, holder="cron-host-a:101:aa")
    assert isinstance(lease, Lease)
    first = lease.state()
    assert first is not None
    with holding(lease):  # the models load for longer than the ttl
        deadline = time.monotonic() + 10
        while (now := lease.state()) is not None and now.renewed_at == first.renewed_at:
            assert time.monotonic() < deadline, "the lease was not renewed while the models loaded"
            time.sleep(0.02)
        rival = take_lease(engine, "r", holder="cron-host-b:202:bb")
        assert isinstance(rival, JobResult) and rival.status == "skipped"
        ev = make_evolver(tmp_path / "m.db")
    result = run_job(ev, lease=lease)
    assert (result.status, result.round, result.holder) == ("ran", 1, "cron-host-a:101:aa")
    assert Lease(engine, lease_name("r")).state() is None  # released after the round
    assert [(j.status, j.holder) for j in job_history(engine)] == [
        ("done", "cron-host-a:101:aa"),
        ("skipped", "cron-host-b:202:bb"),
    ]


def test_job_counts_are_the_ledger_by_status_and_create_no_table(tmp_path: Path) -> None:
    ev = make_evolver(tmp_path / "m.db")
    engine = ev.log.engine
    assert job_counts(engine) == {} and not sqlalchemy.inspect(engine).has_table(jobs.name)
    lease = take_lease(engine, "r", holder="cron-a")
    assert isinstance(take_lease(engine, "r", holder="cron-b"), JobResult)  # held: skipped
    assert isinstance(lease, Lease) and run_job(ev, lease=lease).status == "ran"
    assert job_counts(engine) == {"done": 1, "skipped": 1}


def test_a_lease_that_expired_while_loading_and_was_taken_over_skips_the_round(tmp_path: Path) -> None:
    clock = Clock()
    ev = make_evolver(tmp_path / "m.db")
    engine = ev.log.engine
    slow = Lease(engine, lease_name("r"), holder="slow-loader:1:aa", ttl=10, clock=clock)
    assert slow.acquire()
    clock.t += 11  # its models took longer than the ttl, with no heartbeat (e.g. a stopped process)
    assert Lease(engine, lease_name("r"), holder="next-tick:2:bb", ttl=10, clock=clock).acquire()
    result = run_job(ev, lease=slow)
    assert (result.status, result.round, result.metrics) == ("skipped", 1, None)
    assert "expired while this job loaded its models" in result.note and "next-tick:2:bb" in result.note
    assert ev.log.completed() == {} and memory_state(ev) == []
    state = Lease(engine, lease_name("r")).state()
    assert state is not None and state.holder == "next-tick:2:bb"


def test_failed_loading_frees_the_lease_and_a_foreign_lease_is_refused(tmp_path: Path) -> None:
    ev = make_evolver(tmp_path / "m.db")
    engine = ev.log.engine
    lease = take_lease(engine, "r")
    assert isinstance(lease, Lease)
    with pytest.raises(ConfigError, match="unknown embedder"), holding(lease):
        raise ConfigError("unknown embedder 'no-such-embedder'")
    assert lease.state() is None
    other = take_lease(engine, "another-run")
    assert isinstance(other, Lease)
    with pytest.raises(ConfigError, match="does not guard run 'r'"):
        run_job(ev, lease=other)


def test_job_history_refuses_a_bad_limit(engine: Engine) -> None:
    with pytest.raises(ConfigError, match="limit"):
        job_history(engine, limit=0)
