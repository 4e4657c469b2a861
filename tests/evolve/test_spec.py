"""A spec names its files relative to itself: the tasks file and a SQLite database alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve.spec import load_spec, resolve_database

FOLDER = Path("/srv/agents/Équipe support — nuit (fr)")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///runs/evolve.db", f"sqlite:///{FOLDER}/runs/evolve.db"),
        ("sqlite:///evolve.db?timeout=5", f"sqlite:///{FOLDER}/evolve.db?timeout=5"),
        ("sqlite+pysqlite:///../shared/evolve.db", f"sqlite+pysqlite:///{FOLDER}/../shared/evolve.db"),
        ("sqlite:////var/lib/evolve/evolve.db", "sqlite:////var/lib/evolve/evolve.db"),  # absolute: unchanged
        ("sqlite://", "sqlite://"),  # in memory
        ("sqlite:///:memory:", "sqlite:///:memory:"),
        ("sqlite:///file:evolve.db?mode=ro&uri=true", "sqlite:///file:evolve.db?mode=ro&uri=true"),
        (
            "postgresql+psycopg://evolve:hunter2@db.internal/runs",
            "postgresql+psycopg://evolve:hunter2@db.internal/runs",
        ),
        (None, None),  # the default database: $EVOLVE_HOME/evolve.db
    ],
)
def test_a_relative_sqlite_path_is_relative_to_the_spec_folder(url: str | None, expected: str | None) -> None:
    assert resolve_database(url, FOLDER) == expected


def test_load_spec_puts_the_database_beside_the_spec_whatever_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "Équipe support — nuit (fr) 2025"
    folder.mkdir()
    spec = folder / "spec.toml"
    spec.write_text('[run]\ndatabase = "sqlite:///runs/evolve.db"\n\n[environment]\ntasks = "tasks.jsonl"\n')
    elsewhere = tmp_path / "somewhere else"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = load_spec(Path("..") / folder.name / "spec.toml")
    assert loaded.run.database == f"sqlite:///{folder.resolve()}/runs/evolve.db"
    assert loaded.resolve(loaded.environment.tasks) == folder.resolve() / "tasks.jsonl"  # as tasks always were
