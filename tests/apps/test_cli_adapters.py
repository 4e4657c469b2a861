"""``evolve adapters log|rollback``: what a user sees of the agents' trained adapters, and how HEAD moves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from apps.cli import main
from connectors import make_engine
from evolve.weights.registry import AdapterRegistry, AdapterVersion


def fake_adapter(folder: Path, weights: bytes) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text('{"r": 8}')
    (folder / "adapter_model.safetensors").write_bytes(weights)
    return folder


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.fixture
def committed(db: str, tmp_path: Path) -> dict[str, AdapterVersion]:
    """Run "team": solver has two versions (HEAD on the second), planner one."""
    registry = AdapterRegistry(make_engine(db), "team", root=tmp_path / "adapters")
    s1 = registry.commit("solver", fake_adapter(tmp_path / "s1", b"s1"), metrics={"reward": 0.5}, message="step 1")
    s2 = registry.commit("solver", fake_adapter(tmp_path / "s2", b"s2"), parent=s1.id, metrics={"reward": 0.75})
    p1 = registry.commit("planner", fake_adapter(tmp_path / "p1", b"p1"), message="planner step 1")
    return {"s1": s1, "s2": s2, "p1": p1}


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_log_shows_every_agent_with_head_marked(
    db: str, committed: dict[str, AdapterVersion], capsys: pytest.CaptureFixture[str]
) -> None:
    s1, s2, p1 = committed["s1"], committed["s2"], committed["p1"]
    code, out, _ = run_cli(capsys, "adapters", "log", "--db", db, "--run", "team")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"planner: HEAD {p1.id}  {p1.path}"
    assert lines[1].split() == ["*", p1.id, "from", "base", "-", "planner", "step", "1"]
    assert lines[2] == f"solver: HEAD {s2.id}  {s2.path}"
    assert lines[3].split() == ["*", s2.id, "from", s1.id[:8], "reward=0.750"]  # newest first
    assert lines[4].split() == [s1.id, "from", "base", "reward=0.500", "step", "1"]

    code, out, _ = run_cli(capsys, "adapters", "log", "--db", db, "--run", "team", "--agent", "solver", "--limit", "1")
    assert code == 0 and out.splitlines() == [f"solver: HEAD {s2.id}  {s2.path}", lines[3]]


def test_rollback_prints_what_moved_and_log_follows(
    db: str, committed: dict[str, AdapterVersion], capsys: pytest.CaptureFixture[str]
) -> None:
    s1, s2 = committed["s1"], committed["s2"]
    base = ["adapters", "rollback", "--db", db, "--run", "team", "--agent", "solver"]
    assert run_cli(capsys, *base)[:2] == (0, f"solver: HEAD {s2.id} -> {s1.id}  {s1.path}\n")
    assert run_cli(capsys, *base)[:2] == (0, f"solver: HEAD {s1.id} -> base (no adapter)\n")
    code, out, _ = run_cli(capsys, "adapters", "log", "--db", db, "--run", "team", "--agent", "solver")
    assert out.splitlines()[0] == "solver: HEAD base (no adapter)" and "*" not in out
    assert run_cli(capsys, *base, "--to", s2.id[:6])[:2] == (
        0,
        f"solver: HEAD base (no adapter) -> {s2.id}  {s2.path}\n",
    )
    assert run_cli(capsys, *base, "--to", s2.id)[:2] == (0, f"solver: HEAD stays at {s2.id}  {s2.path}\n")
    assert run_cli(capsys, *base, "--to", "base")[:2] == (0, f"solver: HEAD {s2.id} -> base (no adapter)\n")
    registry = AdapterRegistry(make_engine(db), "team", root=Path("unused"))
    assert registry.head("solver") is None and registry.head("planner") == committed["p1"]  # one agent moved


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["rollback", "--run", "team", "--agent", "solver", "--to", "ffffffffffffffff"], "unknown adapter version"),
        (["rollback", "--run", "team", "--agent", "solver", "--to", "zzz"], "unknown adapter version"),
        (["rollback", "--run", "team", "--agent", "critic"], "agent 'critic' has no adapters"),
        (["log", "--run", "team", "--agent", "critic"], "agents with adapters: planner, solver"),
        (["log", "--run", "other"], "run 'other' has no adapters"),
        (["log", "--run", "../x"], "folder-safe"),
    ],
)
def test_errors_exit_2_with_one_line(
    db: str, committed: dict[str, AdapterVersion], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, "adapters", argv[0], "--db", db, *argv[1:])
    assert code == 2 and out == ""
    assert err.startswith("evolve: ") and message in err and err.count("\n") == 1


def test_rollback_past_the_base_model_exits_2(
    db: str, committed: dict[str, AdapterVersion], capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["adapters", "rollback", "--db", db, "--run", "team", "--agent", "planner"]
    assert run_cli(capsys, *base)[0] == 0
    code, _, err = run_cli(capsys, *base)
    assert code == 2 and "base model" in err and err.count("\n") == 1


def test_ambiguous_prefix_lists_the_candidates(db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = AdapterRegistry(make_engine(db), "team", root=tmp_path / "adapters")
    by_digit: dict[str, AdapterVersion] = {}
    for i in range(17):  # 17 versions over 16 first hex digits: two share one
        v = registry.commit("solver", fake_adapter(tmp_path / f"v{i}", f"w{i}".encode()))
        if v.id[0] in by_digit:
            break
        by_digit[v.id[0]] = v
    code, _, err = run_cli(
        capsys, "adapters", "rollback", "--db", db, "--run", "team", "--agent", "solver", "--to", v.id[0]
    )
    assert code == 2 and "ambiguous" in err and v.id in err and by_digit[v.id[0]].id in err


def test_rollback_needs_an_agent(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["adapters", "rollback", "--db", db, "--run", "team"])
    assert exit_info.value.code == 2 and "--agent" in capsys.readouterr().err


def test_the_command_in_its_own_process(db: str, committed: dict[str, AdapterVersion], repo_root: Path) -> None:
    s1, s2 = committed["s1"], committed["s2"]
    rollback = [sys.executable, "-m", "apps.cli", "adapters", "rollback", "--db", db, "--run", "team"]
    out = subprocess.run(
        [*rollback, "--agent", "solver", "--to", s1.id[:8]], cwd=repo_root, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"solver: HEAD {s2.id} -> {s1.id}  {s1.path}\n"
    bad = subprocess.run([*rollback, "--agent", "nobody"], cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("evolve: ") and "Traceback" not in bad.stderr


def test_the_spec_names_the_database_and_the_run(
    db: str, committed: dict[str, AdapterVersion], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--spec SPEC`` finds the database and the run's name as ``evolve run SPEC`` does: no ``--db``, no ``--run``."""
    (tmp_path / "tasks.jsonl").write_text('{"id": "t1", "prompt": "Door code?", "answer": "4471"}\n')
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[run]\nname = "team"\ndatabase = "{db}"\n\n[model]\nchat = "fake/scripted"\n\n'
        '[embedder]\nname = "hash"\n\n[environment]\ntasks = "tasks.jsonl"\n'
    )
    code, out, err = run_cli(capsys, "adapters", "log", "--spec", str(spec), "--agent", "solver", "--limit", "1")
    s2 = committed["s2"]
    assert code == 0 and out.splitlines()[0] == f"solver: HEAD {s2.id}  {s2.path}"
    assert err.startswith("evolve adapters log: database sqlite:///")  # which database, on stderr
    code, out, err = run_cli(capsys, "adapters", "log", "--db", db)  # a database alone names no run
    assert code == 2 and "needs the run: --spec SPEC, or --run NAME (with --db URL)" in err
