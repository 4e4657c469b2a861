"""Scheduled self-improvement jobs: one idempotent round per call, one job per run at a time.

A job takes a lease row in the run's database (``evolve_leases``), runs the lowest round the run log
has not completed, and records itself in a ledger (``evolve_jobs``). Two jobs started together on
one run: one runs, the other finds the lease held and returns ``skipped``. A killed job leaves its
lease to expire (``ttl``) and its round incomplete; the next job takes the lease over, marks the dead
job ``abandoned`` in the ledger and finishes the round through the Evolver's checkpoint (recorded
episodes are not re-run, unlearned ones are learned, feedback ids keep rewards from applying twice).

A job that loads models first (``evolve job``) takes the lease with ``take_lease`` before loading
anything, keeps it renewed while they load (``holding``) and hands it to ``run_job``: a job that finds
the run busy loads nothing, and no other job can take the run between the check and the round.

Ledger statuses: ``running``, ``done``, ``failed`` (the error is kept), ``skipped`` (another job held
the lease) and ``abandoned`` (its lease expired before it finished: the process was killed or hung;
a later job took the run over).

Example:
    >>> from connectors import HashEmbedder, load_chat
    >>> from memory import MemoryStore
    >>> from evolve import Agent, Evolver, MemoryView, Task, Team
    >>> store = MemoryStore("sqlite://", embedder=HashEmbedder())
    >>> agent = Agent("solver", load_chat("fake/scripted", replies=["4"]), memory=MemoryView(store))
    >>> ev = Evolver(Team([agent]), [Task(id="t1", prompt="2 + 2?", answer="4")], memory=store, progress=False)
    >>> [(job.status, job.round) for job in (run_job(ev), run_job(ev))]
    [('ran', 1), ('ran', 2)]
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any, Literal

from sqlalchemy import (
    Column,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.exc import SQLAlchemyError

from connectors import ConfigError
from connectors.db import for_reads
from evolve.evolver import Evolver
from evolve.jobs.leases import DEFAULT_TTL, Heartbeat, Lease, LeaseState, create_tables, default_holder, when
from evolve.run_log import RoundMetrics, RunLog
from optimizers.types import Trace

log = logging.getLogger(__name__)

metadata = MetaData()

jobs = Table(
    "evolve_jobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run", String(200), nullable=False, index=True),
    Column("round", Integer),
    Column("holder", String(200), nullable=False),
    Column("host", String(200), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("started_at", Float, nullable=False),
    Column("finished_at", Float),
    Column("error", Text),
    Column("metrics", Text),
    Column("note", Text, nullable=False, default=""),
)

JobStatus = Literal["running", "done", "failed", "skipped", "abandoned"]


@dataclass(frozen=True)
class JobResult:
    """What one ``run_job`` call did.

    Attributes:
        status: ``"ran"`` (this job evolved the run) or ``"skipped"`` (another job holds the lease).
        run: the run's name.
        round: the round it ran, or (skipped) the lowest round not yet completed.
        metrics: the round's metrics; None when skipped.
        holder: this job's lease holder id (``host:pid:random``).
        note: why it skipped, which abandoned job it took over, or that its lease was lost mid-way.
        job_id: its row in the ``evolve_jobs`` ledger.
        held_by: (skipped) the lease that stopped it: who holds it and until when.

    Example:
        >>> JobResult("skipped", "support", 3, None, "a:1:x", "held by b:2:y").metrics is None
        True
    """

    status: Literal["ran", "skipped"]
    run: str
    round: int
    metrics: RoundMetrics | None
    holder: str
    note: str = ""
    job_id: int | None = None
    held_by: LeaseState | None = None


@dataclass(frozen=True)
class JobRecord:
    """One row of the ``evolve_jobs`` ledger, as ``job_history`` returns it."""

    id: int
    run: str
    round: int | None
    status: JobStatus
    holder: str
    host: str
    pid: int
    started_at: float
    finished_at: float | None
    error: str | None
    metrics: RoundMetrics | None
    note: str


def lease_name(run: str) -> str:
    """The lease that guards a run: two jobs on one run exclude each other, jobs on other runs do not."""
    return f"evolve:{run}"


def next_round(completed: Iterable[int]) -> int:
    """The lowest round (from 1) not in ``completed``: a killed job's round is incomplete, so it comes first."""
    done = set(completed)
    r = 1
    while r in done:
        r += 1
    return r


def take_lease(engine: Engine, run: str, *, ttl: float = DEFAULT_TTL, holder: str | None = None) -> Lease | JobResult:
    """Take ``run``'s lease in ``engine``'s database, before anything slow is loaded.

    Returns the held ``Lease`` (pass it to ``run_job``, which releases it), or, when another job holds
    the run, the ``JobResult("skipped", ...)`` that says who, recorded in the ledger. A cron job calls
    this first, so a tick that will skip loads no model: ``evolve job`` does.

    Example:
        >>> from connectors import make_engine
        >>> engine = make_engine("sqlite://")
        >>> isinstance(take_lease(engine, "support", holder="a"), Lease)
        True
        >>> take_lease(engine, "support", holder="b").status
        'skipped'
    """
    create_tables(engine, metadata)
    lease = Lease(engine, lease_name(run), holder=holder or default_holder(), ttl=ttl)
    if lease.acquire():
        return lease
    return _skipped(lease, run, lease.state())


@contextmanager
def holding(lease: Lease) -> Iterator[None]:
    """Keep a lease from ``take_lease`` renewed while the job loads its models (loading may outlast the
    ``ttl``); if loading fails, the lease is released and the error goes on."""
    try:
        with _heartbeat(lease):
            yield
    except BaseException:
        _quietly(lease.release, "release the lease")
        raise


def run_job(
    evolver: Evolver,
    *,
    ttl: float = DEFAULT_TTL,
    holder: str | None = None,
    before_round: Callable[[], Sequence[Trace] | None] | None = None,
    lease: Lease | None = None,
    after_round: Callable[[], str | None] | None = None,
) -> JobResult:
    """Run the next round of ``evolver``'s run unless another job is evolving it; record the job.

    Args:
        evolver: the loop to advance (its run log's database holds the lease and the ledger).
        ttl: seconds the lease lasts without renewal; a heartbeat renews it every ``ttl / 3`` while the
            round runs, so ``ttl`` bounds how long a killed job blocks the next one, not how long a round
            may take.
        holder: this job's lease holder id (default ``host:pid:random``).
        before_round: called inside the lease, before the round (e.g. to ingest feedback collected by
            ``evolve serve``); it may return traces (``evolve.jobs.served.feedback_traces``) that the round's
            prompt step learns from (``Evolver.run_round``'s ``extra_traces``), or None.
        after_round: called inside the lease once the round is recorded (memory upkeep:
            ``evolve.jobs.maintenance``); what it returns joins the job's note. A failure there fails the job
            with the round already done, and the next job runs the next round.
        lease: the run's lease, already taken with ``take_lease`` (before the evolver was built); None
            takes it here. Either way ``run_job`` releases it. A lease lost since it was taken (it
            expired and another job took the run over) makes this job ``skipped``.

    Returns:
        ``JobResult("ran", ...)`` with the round's metrics, or ``JobResult("skipped", ...)`` when the
        lease is held; both are recorded in the ledger. An exception marks the job ``failed`` with its
        message, releases the lease and propagates.
    """
    engine = evolver.log.engine
    create_tables(engine, metadata)
    run = evolver.run_name
    taken = take_lease(engine, run, ttl=ttl, holder=holder) if lease is None else _still_ours(lease, run)
    if isinstance(taken, JobResult):
        return taken
    lease = taken
    try:
        round_ = next_round(evolver.log.completed())  # read inside the lease: the last holder may have finished one
        took_over = _abandon_others(engine, run, lease.holder)
        job_id = _insert_row(engine, run, round_, lease.holder, "running")
    except BaseException:
        _quietly(lease.release, "release the lease")
        raise
    notes = [f"finished round {round_} left by abandoned job {', '.join(map(str, took_over))}"] if took_over else []
    try:
        with _heartbeat(lease) as beat:
            extra = _check_traces(before_round()) if before_round is not None else ()
            metrics = evolver.run_round(round_, extra_traces=extra)
            after = after_round() if after_round is not None else None
        if after:
            notes.append(after)
        if beat is not None and beat.lost:
            notes.append(f"lease lost at {when(beat.lost_at or 0.0)}: another job may have run this round too")
        _finish_row(engine, job_id, "done", metrics=metrics, note="; ".join(notes))
    except BaseException as e:
        error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        _quietly(
            lambda: _finish_row(engine, job_id, "failed", error=error, note="; ".join(notes)), "record the failure"
        )
        raise
    finally:
        _quietly(lease.release, "release the lease")
    return JobResult("ran", run, round_, metrics, lease.holder, "; ".join(notes), job_id)


def _still_ours(lease: Lease, run: str) -> Lease | JobResult:
    """A lease ``take_lease`` gave before the evolver was built, renewed; skipped if it was taken over."""
    if lease.name != lease_name(run):
        raise ConfigError(
            f"run_job: the lease {lease.name!r} does not guard run {run!r} (expected {lease_name(run)!r})"
        )
    try:
        if lease.renew():
            return lease
        return _skipped(lease, run, lease.state(), lost=True)  # it expired while loading, and another job took it
    except BaseException:
        _quietly(lease.release, "release the lease")
        raise


def _skipped(lease: Lease, run: str, held: LeaseState | None, *, lost: bool = False) -> JobResult:
    """The job that found ``run`` held by another job, recorded in the ledger."""
    engine = lease.engine
    note = f"another job holds the lease: {held.holder} until {when(held.expires_at)}" if held else "lease busy"
    if lost:
        note = f"the lease expired while this job loaded its models and was taken over ({note})"
    round_ = next_round(RunLog(engine, run).completed())
    job_id = _insert_row(engine, run, round_, lease.holder, "skipped", note=note, finished=True)
    log.info("job on %s skipped: %s", run, note)
    return JobResult("skipped", run, round_, None, lease.holder, note, job_id, held)


def job_history(engine: Engine, run: str | None = None, limit: int | None = None) -> list[JobRecord]:
    """The job ledger, newest first: every run's jobs, or one run's; at most ``limit`` rows."""
    if limit is not None and limit < 1:
        raise ConfigError(f"job_history limit must be >= 1 or None, got {limit!r}")
    create_tables(engine, metadata)
    query = select(jobs).order_by(jobs.c.id.desc())
    if run is not None:
        query = query.where(jobs.c.run == run)
    if limit is not None:
        query = query.limit(limit)
    with for_reads(engine).connect() as conn:
        return [_record(dict(r._mapping)) for r in conn.execute(query)]


def job_counts(engine: Engine) -> dict[str, int]:
    """How many jobs the ledger holds, by status, every run's together (``evolve serve``'s ``/metrics``: jobs that
    ran are ``done``, ``failed`` or ``abandoned``; those the lease turned away ``skipped``). Nothing before the
    first job: reading creates no table."""
    if not inspect(engine).has_table(jobs.name):
        return {}
    with for_reads(engine).connect() as conn:
        rows = conn.execute(select(jobs.c.status, func.count()).group_by(jobs.c.status)).all()
    return {str(status): int(n) for status, n in rows}


# -- the ledger --------------------------------------------------------------------------------------
def _insert_row(
    engine: Engine, run: str, round_: int, holder: str, status: JobStatus, *, note: str = "", finished: bool = False
) -> int:
    now = time.time()
    row = {
        "run": run,
        "round": round_,
        "holder": holder,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "status": status,
        "started_at": now,
        "finished_at": now if finished else None,
        "note": note,
    }
    with engine.begin() as conn:
        key = conn.execute(insert(jobs).values(**row)).inserted_primary_key
    if key is None:  # every backend SQLAlchemy supports returns it; this keeps mypy honest
        raise ConfigError(f"the database {engine.url!r} did not return the new job's id")
    return int(key[0])


def _finish_row(
    engine: Engine,
    job_id: int,
    status: JobStatus,
    *,
    metrics: RoundMetrics | None = None,
    error: str | None = None,
    note: str = "",
) -> None:
    values: dict[str, Any] = {"status": status, "finished_at": time.time(), "error": error, "note": note}
    if metrics is not None:
        values["metrics"] = json.dumps(asdict(metrics))
    with engine.begin() as conn:
        conn.execute(update(jobs).where(jobs.c.id == job_id).values(**values))


def _abandon_others(engine: Engine, run: str, holder: str) -> list[int]:
    """Mark the run's still-``running`` jobs of other holders ``abandoned`` (their lease expired: we hold it)."""
    with engine.begin() as conn:
        stale = [
            r[0]
            for r in conn.execute(
                select(jobs.c.id).where(jobs.c.run == run, jobs.c.status == "running", jobs.c.holder != holder)
            )
        ]
        if stale:
            note = f"its lease expired before it finished (killed or hung); {holder} took the run over"
            conn.execute(
                update(jobs).where(jobs.c.id.in_(stale)).values(status="abandoned", finished_at=time.time(), note=note)
            )
    if stale:
        log.warning("run %s: job(s) %s stopped without finishing; resuming their round", run, stale)
    return stale


def _record(row: dict[str, Any]) -> JobRecord:
    metrics = RoundMetrics(**json.loads(row["metrics"])) if row["metrics"] else None
    return JobRecord(
        id=row["id"],
        run=row["run"],
        round=row["round"],
        status=row["status"],
        holder=row["holder"],
        host=row["host"],
        pid=row["pid"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        error=row["error"],
        metrics=metrics,
        note=row["note"] or "",
    )


# -- helpers -----------------------------------------------------------------------------------------
def _heartbeat(lease: Lease) -> AbstractContextManager[Heartbeat | None]:
    """A running heartbeat, except on an in-memory SQLite database: its one shared connection cannot take
    a second thread's transactions, and no other process can see that database to compete for the lease."""
    url = lease.engine.url
    if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
        return nullcontext()
    return lease.heartbeat()


def _check_traces(found: object) -> Sequence[Trace]:
    if found is None:
        return ()
    if isinstance(found, (list, tuple)) and all(isinstance(t, Trace) for t in found):
        return found
    raise ConfigError(f"run_job: before_round must return None or a list of Trace, got {type(found).__name__}")


def _quietly(action: Callable[[], object], what: str) -> None:
    """Run a clean-up step without letting a database error hide the exception already on its way out."""
    try:
        action()
    except SQLAlchemyError as e:
        log.warning("job: could not %s: %s", what, e)


__all__ = [
    "JobRecord",
    "JobResult",
    "holding",
    "job_counts",
    "job_history",
    "lease_name",
    "next_round",
    "run_job",
    "take_lease",
]
