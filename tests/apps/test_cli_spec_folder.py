"""A spec's SQLite database is relative to the spec file, like its tasks: ``evolve run some/dir/spec.toml``
and ``evolve job`` open the same database from any working folder, and say which one on stderr."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from apps.cli import main, say_database


def bundled_spec_copy(repo_root: Path, folder: Path) -> Path:
    """``data/facility_codes.toml`` and its tasks copied into ``folder``, on a scripted model and the hash
    embedder (the bundled models take minutes); its ``[run] database`` line is the bundled one."""
    text = (repo_root / "data" / "facility_codes.toml").read_text(encoding="utf-8")
    assert 'database = "sqlite:///runs/evolve.db"' in text and 'tasks = "facility_codes.jsonl"' in text
    fast = text.replace('chat = "local/smollm2"', 'chat = "fake/scripted"\noptions = { replies = ["6305"] }')
    fast = fast.replace('name = "minilm"', 'name = "hash"')
    assert fast.count("fake/scripted") == 1 and fast.count('name = "hash"') == 1
    folder.mkdir(parents=True)
    shutil.copy(repo_root / "data" / "facility_codes.jsonl", folder)
    spec = folder / "facility_codes.toml"
    spec.write_text(fast, encoding="utf-8")
    return spec


def test_run_and_job_from_another_folder_open_the_database_beside_the_spec(
    tmp_path: Path, repo_root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = bundled_spec_copy(repo_root, tmp_path / "Équipe support — nuit (fr) facility codes 2025")
    cron = tmp_path / "where cron starts jobs (übrigens: not here)"
    cron.mkdir()
    monkeypatch.chdir(cron)
    database = spec.parent / "runs" / "evolve.db"

    assert main(["run", os.path.relpath(spec, cron), "--quiet", "--rounds", "1"]) == 0
    out, err = capsys.readouterr()
    assert database.is_file() and not (cron / "runs").exists()
    assert f"evolve run: database sqlite:///{database}\n" in err
    assert out.splitlines()[0].split()[:2] == ["round", "success"]  # stdout is still the round table

    assert main(["job", str(spec), "--once", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("ran facility-codes round 2: ")  # round 1 is in the same database
    assert f"evolve job: database sqlite:///{database}\n" in err
    assert main(["memory", "stats", "--db", f"sqlite:///{database}"]) == 0
    assert '"count": 48' in capsys.readouterr().out  # 24 tasks, two rounds, one experience per attempt


def test_the_database_line_hides_a_password(capsys: pytest.CaptureFixture[str]) -> None:
    say_database("job", "postgresql+psycopg://evolve:hunter2-s3cret@db.internal:5432/runs")
    err = capsys.readouterr().err
    assert err == "evolve job: database postgresql+psycopg://evolve:***@db.internal:5432/runs\n"


def test_without_a_database_in_the_spec_the_line_names_the_default(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    say_database("run", None)
    assert capsys.readouterr().err == f"evolve run: database sqlite:///{isolated / 'evolve.db'}\n"
