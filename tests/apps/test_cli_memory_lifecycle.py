"""The memory lifecycle from the command line: ``evolve job`` consolidates and prunes after the round when the
spec asks, and ``evolve memory consolidate|prune|history|undo`` do it by hand (issue 24, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.cli import main
from connectors import HashEmbedder
from memory import MemoryStore
from tests.apps.test_cli import exit_status

RUN = "Zürich-Nordhafen-Logistik-Team-07 Türcodes"
TASKS = [
    {"id": f"{place}-door", "prompt": f"What is the door code of the {place} warehouse?", "answer": "4471"}
    for place in ("harbor", "summit", "quarry")
]


def write_spec(folder: Path, *, forget: str = "[memory.forget]\ncapacity = 7\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in TASKS))
    spec = folder / "spec.toml"
    spec.write_text(
        f"""
[run]
name = "{RUN}"
database = "sqlite:///{folder / "läufe.db"}"

[model]
chat = "fake/scripted"
options = {{ replies = ["4471"] }}

[embedder]
name = "hash"

[environment]
tasks = "tasks.jsonl"
paraphrase = false

[memory]
k2 = 2
consolidate = true
consolidate_min = 2

{forget}""",
        encoding="utf-8",
    )
    return spec


def stored(folder: Path) -> list:
    with MemoryStore(f"sqlite:///{folder / 'läufe.db'}", embedder=HashEmbedder()) as store:
        return store.items()


def test_each_job_consolidates_then_prunes_every_agent_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_spec(tmp_path)
    for _ in range(3):
        assert main(["job", str(spec), "--once", "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "consolidated 0 new strategies" in out[0] and "pruned nothing; 3 memories kept" in out[0]
    assert "consolidated 3 new strategies (0 replacing older ones, 0 unchanged)" in out[1]
    assert "consolidated 3 new strategies (3 replacing older ones, 0 unchanged)" in out[2], out[2]
    assert "pruned" in out[2] and "7 memories kept" in out[2]
    items = stored(tmp_path)
    valid = [i for i in items if i.valid]
    assert len(valid) <= 7 and {i.kind for i in valid} == {"episode", "strategy"}
    assert sum(1 for i in valid if i.kind == "strategy") == 3  # the newest strategy of each task survives


def test_memory_commands_consolidate_prune_list_and_undo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path, forget="")
    for _ in range(2):
        assert main(["job", str(spec), "--once", "--quiet"]) == 0
    db = f"sqlite:///{tmp_path / 'läufe.db'}"
    capsys.readouterr()
    assert main(["memory", "consolidate", "--db", db, "--min-size", "2"]) == 0
    assert "0 strategies written (0 replacing older ones), 3 unchanged" in capsys.readouterr().out
    assert main(["memory", "prune", "--db", db, "--capacity", "4", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("would remove 5 memories")
    assert len(stored(tmp_path)) == 9
    assert main(["memory", "prune", "--db", db, "--capacity", "4"]) == 0
    assert capsys.readouterr().out.startswith("removed 5 memories")
    assert main(["memory", "history", "--db", db]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 and all("undoable" in line for line in lines)
    removal_id, namespace = lines[0].split()[2], lines[0].split("[")[1].split("]")[0]
    assert main(["memory", "undo", removal_id, "--db", db, "--namespace", namespace]) == 0
    assert capsys.readouterr().out.startswith("restored 1")
    assert main(["memory", "undo", removal_id, "--db", db, "--namespace", namespace]) == 0
    assert "already restored" in capsys.readouterr().out  # replaying the log changes nothing
    assert len(stored(tmp_path)) == 5
    assert main(["memory", "prune", "--db", db, "--recall-retention-days", "0"]) == 0
    assert "recalls expired" in capsys.readouterr().out  # every logged recall is older than 0 days


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["memory", "prune"], "needs --capacity N, --merge-similarity COSINE and/or --recall-retention-days"),
        (["memory", "undo"], "needs the removal ids or memory ids"),
        (["memory", "prune", "--capacity", "0"], "capacity must be an integer >= 1"),
        (["memory", "export", "a.jsonl", "b.jsonl"], "evolve memory export: error: this command does not take b.jsonl"),
        (["memory", "history", "extra"], "does not take extra"),
        (["memory", "consolidate", "--embedder", "hash"], "does not take --embedder"),
        (["memory", "stats", "--capacity", "5"], "does not take --capacity"),
    ],
)
def test_bad_lifecycle_commands_say_what_was_expected(
    tmp_path: Path, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_spec(tmp_path, forget="")
    assert main(["job", str(spec), "--once", "--quiet"]) == 0
    capsys.readouterr()
    assert exit_status([*argv, "--db", f"sqlite:///{tmp_path / 'läufe.db'}"]) == 2  # refused by the parser or after
    assert says in capsys.readouterr().err


def test_a_missing_database_is_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", "consolidate", "--db", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    assert "no database at" in capsys.readouterr().err and not (tmp_path / "none.db").exists()
