"""`evolve memory backup|restore`: the whole database to one file and back, with what was done printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.cli import main
from tests.apps.test_cli import exit_status
from tests.reliability.backup import differences, pg_bin, populate, snapshot


def test_backup_then_restore_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, copy, file = f"sqlite:///{tmp_path / 'runs.db'}", f"sqlite:///{tmp_path / 'copy.db'}", tmp_path / "b.db"
    populate(db, n=40, root=tmp_path)
    assert main(["memory", "backup", str(file), "--db", db]) == 0  # no embedder is loaded for a backup
    out = capsys.readouterr().out
    assert f"to {file}" in out and "42 memories" in out and "3 prompt versions" in out and "MB" in out
    assert main(["memory", "restore", str(file), "--db", copy]) == 0
    assert "restored" in capsys.readouterr().out and differences(snapshot(db), snapshot(copy)) == 0


def test_restore_over_a_database_needs_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, file = f"sqlite:///{tmp_path / 'runs.db'}", tmp_path / "b.db"
    populate(db, n=10, root=tmp_path)
    assert main(["memory", "backup", str(file), "--db", db]) == 0
    assert main(["memory", "restore", str(file), "--db", db]) == 2
    assert "already holds a database" in capsys.readouterr().err
    assert main(["memory", "restore", str(file), "--db", db, "--force"]) == 0


def test_backup_and_restore_need_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_status(["memory", "backup"]) == 2
    assert "the following arguments are required: FILE" in capsys.readouterr().err
    assert main(["memory", "restore", "missing.db"]) == 2
    assert "no backup file at missing.db" in capsys.readouterr().err


@pytest.mark.postgres
def test_postgres_backup_restore_from_the_command_line(
    pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    populate(pg_url, n=10, root=tmp_path)
    file, tools = tmp_path / "pg.dump", str(pg_bin())
    assert main(["memory", "backup", str(file), "--db", pg_url, "--pg-bin", tools]) == 0
    assert "12 memories" in capsys.readouterr().out
    assert main(["memory", "restore", str(file), "--db", pg_url, "--pg-bin", tools]) == 2  # not empty
    assert main(["memory", "restore", str(file), "--db", pg_url, "--pg-bin", tools, "--force"]) == 0
