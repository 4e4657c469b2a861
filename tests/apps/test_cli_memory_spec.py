"""``evolve memory … --spec SPEC`` works on the database the spec names, found as ``evolve run SPEC`` finds it
(relative to the spec file, from any folder), and ``--namespace`` naming no namespace is an error that lists
the namespaces there are (issue 41, item 7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.cli import main

TASKS = [
    {"id": "harbor-door", "prompt": "What is the door code of the Harbor warehouse?", "answer": "4471"},
    {"id": "summit-alarm", "prompt": "What is the alarm code of the Summit workshop?", "answer": "9310"},
]
SPEC = """
[run]
name = "Türcodes"
rounds = 2
database = "sqlite:///läufe/evolve.db"   # relative to this file

[model]
chat = "fake/scripted"
options = { replies = ["4471"] }

[embedder]
name = "hash"

[environment]
tasks = "tasks.jsonl"

[[agents]]
name = "solver"
system = "Reply with the code only."
"""


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "Équipe nuit"
    folder.mkdir()
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS), encoding="utf-8")
    (folder / "spec.toml").write_text(SPEC, encoding="utf-8")
    assert main(["run", str(folder / "spec.toml"), "--quiet"]) == 0
    elsewhere = tmp_path / "anderswo"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the spec's database is found from any folder
    return folder / "spec.toml"


def test_stats_and_show_read_the_database_the_spec_names(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{spec.parent / 'läufe' / 'evolve.db'}"
    capsys.readouterr()
    assert main(["memory", "stats", "--db", db]) == 0
    by_db = capsys.readouterr().out
    assert json.loads(by_db)["count"] == 4  # two tasks, two rounds

    assert main(["memory", "stats", "--spec", str(spec)]) == 0
    out, err = capsys.readouterr()
    assert out == by_db  # the same store
    assert err == f"evolve memory stats: database {db}\n"  # where --spec led, on stderr

    assert main(["memory", "show", "--spec", str(spec), "--namespace", "Türcodes/solver", "--limit", "3"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert len(shown) == 3 and all("[Türcodes/solver]" in line for line in shown)


@pytest.mark.parametrize("action", ["stats", "show"])
def test_a_namespace_that_does_not_exist_is_an_error_naming_those_that_do(
    spec: Path, capsys: pytest.CaptureFixture[str], action: str
) -> None:
    capsys.readouterr()
    assert main(["memory", action, "--spec", str(spec), "--namespace", "Türcodes/solvr"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "no namespace 'Türcodes/solvr'" in err and "its namespaces: Türcodes/solver" in err


def test_spec_and_db_together_are_refused(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["memory", "stats", "--spec", str(spec), "--db", "sqlite:///other.db"])
    assert refused.value.code == 2
    assert "argument --db: not allowed with argument --spec" in capsys.readouterr().err
    assert not Path("other.db").exists()


def test_the_lifecycle_commands_find_the_spec_database_the_same_way(
    spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["memory", "prune", "--spec", str(spec), "--capacity", "1", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("would remove 3 memories")
