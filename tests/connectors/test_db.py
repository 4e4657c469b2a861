"""make_engine: SQLite pragmas, in-memory databases, bad URLs, and where Evolve keeps its files."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from connectors import ConfigError, evolve_home, make_engine
from connectors.db import BUSY_TIMEOUT_MS, default_url, sqlite_path


def pragma(engine: object, name: str) -> object:
    with engine.connect() as conn:  # type: ignore[attr-defined]
        return conn.execute(text(f"PRAGMA {name}")).scalar()


def test_sqlite_file_gets_wal_foreign_keys_and_busy_timeout(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'sub' / 'x.db'}")
    assert (tmp_path / "sub").is_dir()  # the parent folder is created
    assert pragma(engine, "journal_mode") == "wal"
    assert pragma(engine, "foreign_keys") == 1
    assert pragma(engine, "busy_timeout") == BUSY_TIMEOUT_MS


def test_foreign_keys_are_enforced(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'fk.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE parent (id INTEGER PRIMARY KEY)"))
        conn.execute(text("CREATE TABLE child (id INTEGER PRIMARY KEY, parent_id INTEGER REFERENCES parent(id))"))
    with pytest.raises(IntegrityError):
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO child (id, parent_id) VALUES (1, 42)"))


def test_transactions_commit_and_roll_back(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'tx.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (v INTEGER)"))
        conn.execute(text("INSERT INTO t VALUES (1)"))
    with pytest.raises(RuntimeError):
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO t VALUES (2)"))
            raise RuntimeError("abort")
    other = make_engine(f"sqlite:///{tmp_path / 'tx.db'}")  # a second engine sees committed rows only
    with other.connect() as conn:
        assert conn.execute(text("SELECT v FROM t")).scalars().all() == [1]


def test_in_memory_database() -> None:
    engine = make_engine("sqlite://")
    assert engine.dialect.name == "sqlite"
    assert pragma(engine, "foreign_keys") == 1
    assert sqlite_path("sqlite://") is None and sqlite_path("sqlite:///:memory:") is None


@pytest.mark.parametrize("url", ["not a url", "evolve.db"])
def test_bad_url_is_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="database URL"):
        make_engine(url)


def test_unknown_dialect_is_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot create a database engine"):
        make_engine("nosuchdb://user@host/db")


def test_a_missing_postgres_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the pg extra were not installed
    with pytest.raises(ConfigError, match=r"driver .* not installed \(pip install 'evolve\[pg\]'\)"):
        make_engine("postgresql+psycopg://user@/evolve?host=/tmp")


def test_default_database_lives_in_evolve_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOLVE_HOME", str(tmp_path / "home"))
    assert evolve_home() == tmp_path / "home"
    assert not (tmp_path / "home").exists()  # asking creates nothing
    assert default_url() == f"sqlite:///{tmp_path / 'home' / 'evolve.db'}"
    make_engine()
    assert (tmp_path / "home").is_dir()
    monkeypatch.delenv("EVOLVE_HOME")
    assert evolve_home() == Path.home() / ".evolve"
