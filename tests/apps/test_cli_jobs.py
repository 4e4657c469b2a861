"""``evolve job SPEC --once`` and ``evolve scheduler``: real processes racing and being killed on one SQLite file.

The processes run ``apps.cli.main``, what the ``evolve`` command runs. Each waits at a barrier on stdin after its imports, so "started together"
means within milliseconds; the fake model's ``delay`` makes a round last seconds.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, Select, func, select

from apps.cli import main
from apps.jobs import LEASE_TTL, parse_duration
from connectors import ConfigError, HashEmbedder, make_engine
from evolve.jobs.job import job_history, lease_name
from evolve.jobs.leases import DEFAULT_TTL, Lease
from evolve.run_log import episodes
from memory import MemoryStore

TASKS = [
    {"id": f"{place}-{what}", "prompt": f"What is the {what} code of the {place}?", "answer": answer}
    for place, what, answer in [
        ("harbor", "door", "4471"),
        ("summit", "alarm", "9310"),
        ("quarry", "gate", "4471"),
        ("meadow", "safe", "1204"),
        ("canyon", "door", "4471"),
        ("lagoon", "locker", "5532"),
    ]
]
ENTRY = (
    "import sys; from apps.cli import main; print('ready', flush=True); sys.stdin.readline(); "
    "sys.exit(main(sys.argv[1:]))"
)


def write_spec(folder: Path, *, tasks: int = 2, delay: float = 0.0, batch_size: int = 16) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS[:tasks]))
    spec = folder / "spec.toml"
    spec.write_text(
        f"""
[run]
name = "cli"
database = "sqlite:///{folder / "runs.db"}"
batch_size = {batch_size}

[model]
chat = "fake/scripted"
options = {{ replies = ["4471"], delay = {delay} }}

[embedder]
name = "hash"

[environment]
tasks = "tasks.jsonl"

[memory]
k2 = 1
"""
    )
    return spec


def memory_state(folder: Path) -> list[tuple[str, float, int]]:
    with MemoryStore(f"sqlite:///{folder / 'runs.db'}", embedder=HashEmbedder()) as store:
        return sorted((it.id, round(it.q, 12), it.visits) for it in store.items())


def start_jobs(spec: Path, n: int, repo_root: Path, *extra: str) -> list[subprocess.Popen[str]]:
    """``n`` job processes, released from the barrier together."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ENTRY, "job", str(spec), "--once", "--quiet", *extra],
            cwd=repo_root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    return procs


def test_a_job_runs_one_round_per_call_and_says_what_it_did(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path)
    assert main(["job", str(spec), "--once", "--quiet"]) == 0
    assert main(["job", str(spec), "--once", "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ran cli round 1: success 0.50, reward 0.50, 2 memories, prompt update none, ")
    assert lines[1].startswith("ran cli round 2: success 0.50, reward 0.50, 4 memories, ")
    engine = make_engine(f"sqlite:///{tmp_path / 'runs.db'}")
    assert [(j.round, j.status) for j in job_history(engine)] == [(2, "done"), (1, "done")]


def test_two_jobs_started_together_one_runs_one_skips_and_memory_is_one_rounds(tmp_path: Path, repo_root: Path) -> None:
    spec = write_spec(tmp_path / "shared", tasks=4, delay=0.5, batch_size=1)
    outs = [p.communicate(timeout=120) + (p.returncode,) for p in start_jobs(spec, 2, repo_root)]
    assert [rc for _, _, rc in outs] == [0, 0], [err for _, err, _ in outs]
    lines = sorted(out.strip() for out, _, _ in outs)
    assert lines[0].startswith("ran cli round 1: ") and lines[1].startswith("skipped cli round 1: ")
    assert "holds the lease until" in lines[1]
    engine = make_engine(f"sqlite:///{tmp_path / 'shared' / 'runs.db'}")
    assert sorted(j.status for j in job_history(engine)) == ["done", "skipped"]

    alone = write_spec(tmp_path / "alone", tasks=4, batch_size=1)
    assert main(["job", str(alone), "--once", "--quiet"]) == 0
    assert memory_state(tmp_path / "shared") == memory_state(tmp_path / "alone")


def test_a_killed_job_is_resumed_by_the_next_without_applying_feedback_twice(
    tmp_path: Path, repo_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_spec(tmp_path / "killed", tasks=6, delay=0.3, batch_size=1)
    assert main(["job", str(spec), "--once", "--quiet"]) == 0  # round 1: memories whose Q round 2 updates
    engine = make_engine(f"sqlite:///{tmp_path / 'killed' / 'runs.db'}")
    count = select(func.count()).select_from(episodes).where(episodes.c.round == 2)
    (job,) = start_jobs(spec, 1, repo_root, "--lease-ttl", "1")
    deadline = time.monotonic() + 60
    while (recorded := _scalar(engine, count)) < 2:
        assert job.poll() is None, job.communicate()
        assert time.monotonic() < deadline, "the job never got going"
        time.sleep(0.01)
    job.send_signal(signal.SIGKILL)
    job.communicate(timeout=30)
    recorded = _scalar(engine, count)
    assert 2 <= recorded < 6, "killed mid-round: some episodes recorded, not all"

    lease = Lease(engine, lease_name("cli")).state()
    assert lease is not None  # the dead job never released it
    time.sleep(max(0.0, lease.expires_at - time.time()) + 0.05)
    capsys.readouterr()
    assert main(["job", str(spec), "--once", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ran cli round 2: ") and "abandoned job" in out
    assert _scalar(engine, count) == 6
    assert [j.status for j in job_history(engine)] == ["done", "abandoned", "done"]

    reference = write_spec(tmp_path / "reference", tasks=6, batch_size=1)
    for _ in range(2):
        assert main(["job", str(reference), "--once", "--quiet"]) == 0
    assert memory_state(tmp_path / "killed") == memory_state(tmp_path / "reference")


def _scalar(engine: Engine, query: Select[Any]) -> int:
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def test_the_scheduler_runs_a_job_per_interval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path)
    assert main(["scheduler", str(spec), "--every", "0s", "--max-runs", "2", "--quiet", "--tenant", "acme"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["ran cli@acme round 1", "ran cli@acme round 2"]
    engine = make_engine(f"sqlite:///{tmp_path / 'runs.db'}")
    assert [j.run for j in job_history(engine)] == ["cli@acme", "cli@acme"]


def test_ctrl_c_stops_the_scheduler_cleanly_and_frees_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from evolve.evolver import Evolver

    real = Evolver.run_round

    def interrupted(self: Evolver, round_: int, **kwargs: object) -> object:
        if round_ == 2:
            raise KeyboardInterrupt
        return real(self, round_, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Evolver, "run_round", interrupted)
    assert main(["scheduler", str(write_spec(tmp_path)), "--every", "0s", "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ran cli round 1") and lines[1] == "scheduler stopped after 1 job(s)"
    engine = make_engine(f"sqlite:///{tmp_path / 'runs.db'}")
    assert [(j.round, j.status, j.error) for j in job_history(engine)][0] == (2, "failed", "KeyboardInterrupt")
    assert Lease(engine, lease_name("cli")).state() is None  # the next job need not wait for the ttl


RIVAL = "cron-host-b.acme.internal:4242:9f3a1c"


def not_loaded(*args: object, **kwargs: object) -> None:
    raise AssertionError("the job loaded its models although another job holds the run")


def test_a_job_that_will_skip_loads_no_model_and_no_embedder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = write_spec(tmp_path)
    spec.write_text(spec.read_text().replace('name = "hash"', 'name = "no-such-embedder"'))  # would fail to load
    engine = make_engine(f"sqlite:///{tmp_path / 'runs.db'}")
    assert Lease(engine, lease_name("cli"), holder=RIVAL, ttl=600).acquire()
    monkeypatch.setattr("evolve.build.build", not_loaded)
    monkeypatch.setattr("connectors.load_embedder", not_loaded)
    monkeypatch.setattr("connectors.load_chat", not_loaded)
    assert main(["job", str(spec), "--once", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"skipped cli round 1: another job is evolving it ({RIVAL} holds the lease until ")
    assert [(j.round, j.status) for j in job_history(engine)] == [(1, "skipped")]
    state = Lease(engine, lease_name("cli")).state()
    assert state is not None and state.holder == RIVAL  # the rival's lease is untouched


def test_a_job_holds_the_run_while_its_models_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No window between the lease check and the round: a rival starting while the models load skips."""
    import evolve.build
    from evolve.jobs.job import JobResult, take_lease

    spec = write_spec(tmp_path)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    rivals: list[JobResult | Lease] = []
    real = evolve.build.build

    def build_while_a_rival_starts(*args: object, **kwargs: object) -> object:
        rivals.append(take_lease(make_engine(url), "cli", holder=RIVAL))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("evolve.build.build", build_while_a_rival_starts)
    assert main(["job", str(spec), "--once", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("ran cli round 1: ")
    assert len(rivals) == 1 and isinstance(rivals[0], JobResult) and rivals[0].status == "skipped"
    history = job_history(make_engine(url))
    assert [(j.status, j.holder == RIVAL) for j in history] == [("done", False), ("skipped", True)]


@pytest.mark.postgres
def test_on_postgresql_the_lease_is_checked_before_loading_and_held_through_the_round(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = write_spec(tmp_path)
    spec.write_text(spec.read_text().replace(f'"sqlite:///{tmp_path / "runs.db"}"', f'"{pg_url}"'))
    engine = make_engine(pg_url)
    rival = Lease(engine, lease_name("cli"), holder=RIVAL, ttl=600)
    assert rival.acquire()
    with monkeypatch.context() as patched:
        patched.setattr("evolve.build.build", not_loaded)
        assert main(["job", str(spec), "--once", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith(f"skipped cli round 1: another job is evolving it ({RIVAL} holds")
    assert rival.release()
    assert main(["job", str(spec), "--once", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("ran cli round 1: success 0.50")
    assert [j.status for j in job_history(engine)] == ["done", "skipped"]
    assert Lease(engine, lease_name("cli")).state() is None
    engine.dispose()


def test_a_job_whose_models_fail_to_load_frees_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path)
    spec.write_text(spec.read_text().replace('name = "hash"', 'name = "no-such-embedder"'))
    assert main(["job", str(spec), "--once", "--quiet"]) == 2
    assert "unknown embedder" in capsys.readouterr().err
    engine = make_engine(f"sqlite:///{tmp_path / 'runs.db'}")
    assert Lease(engine, lease_name("cli")).state() is None  # the next tick need not wait for the ttl
    assert job_history(engine) == []  # no round was started


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["job", "{spec}"], "needs --once"),
        (["job", "{spec}", "--once", "--tenant", "no spaces!"], "tenant name"),
        (["scheduler", "{spec}", "--every", "soon"], "a duration is"),
        (["scheduler", "{spec}", "--every", "15"], "a duration is"),
        (["scheduler", "{spec}", "--every=-5m"], "a duration is"),
        (["job", "missing.toml", "--once"], "does not exist"),
    ],
)
def test_bad_input_gets_a_clear_error_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    spec = write_spec(tmp_path)
    assert main([a.format(spec=spec) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evolve: ") and message in err and "Traceback" not in err
    assert not (tmp_path / "runs.db").exists()  # refused before anything was built


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30.0), ("15m", 900.0), ("1.5h", 5400.0), ("1d", 86400.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_junk_duration_names_what_it_expected() -> None:
    with pytest.raises(ConfigError, match=r"e\.g\. 30s, 15m, 1h"):
        parse_duration("fortnightly")


def test_the_cli_lease_default_is_the_librarys() -> None:
    assert LEASE_TTL == DEFAULT_TTL
