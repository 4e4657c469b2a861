"""``evolve job SPEC --once`` (one self-improvement round, for cron) and ``evolve scheduler SPEC --every 15m``.

A crontab line is all a deployment needs::

    */15 * * * * evolve job /srv/agent/spec.toml --once --quiet >> /var/log/evolve-job.log 2>&1

Two jobs that overlap on one run do not both evolve it: the second prints that it skipped, and who
holds the lease until when, and exits 0. The lease is taken before the models load, so a tick that
skips costs a database query, not a model load. A killed job's round is finished by the next job once its
lease expires (``--lease-ttl``). ``evolve scheduler`` does the same on an interval inside one
process (models load once) for machines without cron.

Before its round a job learns what users rated through ``evolve serve`` since the last job: the rated
answers become memories, and the round's prompt step critiques the poorly rated ones.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from apps.options import count, seconds
from connectors import ConfigError

if TYPE_CHECKING:
    from evolve.evolver import Evolver
    from evolve.jobs.job import JobResult
    from evolve.spec import RunSpec
    from optimizers.types import Trace

LEASE_TTL = 300.0
"""``evolve.jobs.leases.DEFAULT_TTL``, repeated so that building the parser imports nothing heavy (a test checks)."""
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*")


def parse_duration(text: str) -> float:
    """``30s``, ``15m``, ``1.5h``, ``1d`` → seconds; anything else is a ``ConfigError`` that says so."""
    found = DURATION.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise ConfigError(f"a duration is a number and a unit s, m, h or d (e.g. 30s, 15m, 1h), got {text!r:.40}")
    return float(found[1]) * UNITS[found[2]]


def describe(result: JobResult) -> str:
    """One line for a job: what ran (round, success, memories, prompt update, seconds) or why it skipped."""
    from evolve.jobs.leases import when

    if result.status == "skipped" or result.metrics is None:
        held = result.held_by
        who = f"{held.holder} holds the lease until {when(held.expires_at)}" if held else result.note
        return f"skipped {result.run} round {result.round}: another job is evolving it ({who})"
    m = result.metrics
    prompt = f"+{m.prompt_updates} ({m.prompt_version[:8]})" if m.prompt_updates else "none"
    line = (
        f"ran {result.run} round {result.round}: success {m.success_rate:.2f}, reward {m.mean_reward:.2f}, "
        f"{m.memory_size} memories, prompt update {prompt}, {m.seconds:.1f} s"
    )
    return f"{line}; {result.note}" if result.note else line


def _spec(args: argparse.Namespace) -> RunSpec:
    from evolve.spec import load_spec

    return load_spec(args.spec).for_tenant(args.tenant)


def _build(spec: RunSpec, args: argparse.Namespace) -> Evolver:
    from apps.options import quiet_loading
    from evolve.build import build

    quiet_loading(args.quiet)
    return build(spec, progress=not args.quiet)


def served_feedback(evolver: Evolver, spec: RunSpec) -> Callable[[], list[Trace]]:
    """The job's ``before_round``: learn what users rated through ``evolve serve`` since the last job
    that finished (``evolve.jobs.served.learn_served``); in a tenant's run with ``[serve] promote``,
    then move its well-rated memories into the trained run's (``evolve.jobs.served.promote``)."""
    from evolve.jobs.job import job_history
    from evolve.jobs.served import learn_served, promote

    def before_round() -> list[Trace]:
        done = next((j for j in job_history(evolver.log.engine, evolver.run_name) if j.status == "done"), None)
        traces = learn_served(evolver, since=done.started_at if done is not None else 0.0)
        if spec.serve.promote and spec.shared_run is not None:
            moved = promote(
                evolver.memory, evolver.team, min_q=spec.serve.promote_q, min_visits=spec.serve.promote_visits,
                tenant=spec.run.name.partition("@")[2] or None,  # the copies' writer: promoted:<tenant>
            )  # fmt: skip
            print(f"promoted {moved} memories of {spec.run.name} into {spec.shared_run}'s shared memory", flush=True)
        return traces

    return before_round


def upkeep(evolver: Evolver, spec: RunSpec) -> Callable[[], str | None] | None:
    """The job's ``after_round``: consolidate (``[memory] consolidate``) and prune (``[memory.forget]``)
    every agent's memory (``evolve.jobs.maintenance``); None when neither is asked for."""
    from evolve.build import build_critic
    from evolve.jobs.maintenance import forgets, memory_upkeep

    store, m = evolver.memory, spec.memory
    if store is None or not (m.consolidate or forgets(store)):
        return None
    views = [a.memory for a in evolver.team.agents.values() if a.memory is not None]
    model = next(iter(evolver.team.agents.values())).model
    llm = build_critic(spec, model) if m.consolidate and m.consolidate_with == "critic" else None

    def after_round() -> str:
        done = memory_upkeep(
            store, [v.namespace for v in views], consolidate=m.consolidate, min_size=m.consolidate_min, llm=llm,
            prune=forgets(store),
        )  # fmt: skip
        return done.note()

    return after_round


def _noted(result: JobResult, evolver: Evolver) -> JobResult:
    """``result`` with the run's quarantined served ratings in its note: they wait for a fix, not a retry."""
    from dataclasses import replace

    from evolve.serve.responses import quarantine_note

    note = quarantine_note(evolver.log.engine, evolver.run_name)
    return replace(result, note=f"{result.note}; {note}" if result.note else note) if note else result


def _close(evolver: Evolver) -> None:
    if evolver.memory is not None:
        evolver.memory.close()  # saves the vector index beside the database


def cmd_job(args: argparse.Namespace) -> None:
    """Take the run's lease first, then load the models: a job that skips loads nothing (cron ticks stay cheap)."""
    from apps.options import say_database
    from connectors import make_engine
    from evolve.jobs.job import JobResult, holding, run_job, take_lease

    if not args.once:
        raise ConfigError(
            "evolve job runs one round per call and needs --once (put it in cron or any scheduler); "
            "to run jobs on an interval in this process, use: evolve scheduler SPEC --every 15m"
        )
    spec = _spec(args)
    say_database("job", spec.run.database)
    engine = make_engine(spec.run.database)
    try:
        taken = take_lease(engine, spec.run.name, ttl=args.lease_ttl)
        if isinstance(taken, JobResult):
            print(describe(taken), flush=True)
            return
        with holding(taken):  # renewed while the models load; released if loading fails
            evolver = _build(spec, args)
        try:
            ran = run_job(
                evolver, lease=taken, before_round=served_feedback(evolver, spec), after_round=upkeep(evolver, spec)
            )
            result = _noted(ran, evolver)
        finally:
            _close(evolver)
    finally:
        engine.dispose()
    print(describe(result), flush=True)


def cmd_scheduler(args: argparse.Namespace) -> None:
    from apps.options import say_database
    from evolve.jobs.job import run_job

    every = parse_duration(args.every)
    spec = _spec(args)
    evolver = _build(spec, args)  # once: every job reuses the loaded models
    say_database("scheduler", spec.run.database)
    runs = 0
    try:
        while True:
            started = time.monotonic()
            before, after = served_feedback(evolver, spec), upkeep(evolver, spec)
            ran = run_job(evolver, ttl=args.lease_ttl, before_round=before, after_round=after)
            result = _noted(ran, evolver)
            runs += 1
            print(describe(result), flush=True)
            if args.max_runs is not None and runs >= args.max_runs:
                break
            time.sleep(max(0.0, started + every - time.monotonic()))  # the interval is between job starts
    except (KeyboardInterrupt, SystemExit) as stop:  # Ctrl-C, SIGTERM: the job in flight was recorded as failed
        print(f"scheduler stopped after {runs} job(s)", flush=True)  # and its lease released
        if isinstance(stop, SystemExit):
            raise  # SIGTERM's exit status (143)
    finally:
        _close(evolver)


def add_job_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``job`` and ``scheduler`` on the ``evolve`` command's subparsers."""
    j = sub.add_parser("job", help="one self-improvement round for cron: skips if another job is evolving the run")
    s = sub.add_parser("scheduler", help="run `evolve job` every interval in this process (no cron needed)")
    for p in (j, s):
        p.add_argument("spec", type=Path, help="the run's TOML spec")
        p.add_argument("--tenant", default=None, help="evolve the tenant's run <run>@<tenant>")
        p.add_argument(
            "--lease-ttl",
            type=seconds,
            default=LEASE_TTL,
            help=f"seconds before a killed job's lease may be taken over (default {LEASE_TTL:.0f})",
        )
    j.add_argument("--once", action="store_true", help="run one round and exit (required)")
    j.set_defaults(func=cmd_job)
    s.add_argument("--every", required=True, help="the interval between job starts: 30s, 15m, 1h, 1d")
    s.add_argument(
        "--max-runs", type=count(1), default=None, help="stop after this many jobs (default: run until Ctrl-C)"
    )
    s.set_defaults(func=cmd_scheduler)
