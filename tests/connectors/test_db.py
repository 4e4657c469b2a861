"""make_engine: SQLite pragmas, durability, read transactions, in-memory databases, bad URLs, where
Evolve keeps its files, and storage faults as ``StoreError``."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

import connectors.db
from connectors import ConfigError, StoreError, evolve_home, make_engine
from connectors.db import BUSY_TIMEOUT_MS, default_url, read_only_url, sqlite_path, storage_fault, storage_faults


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
    with pytest.raises(ConfigError, match=r"driver .* not installed \(pip install -e '\.\[pg\]'"):
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


def test_sqlite_path_reads_the_uri_form_and_ignores_the_query(tmp_path: Path) -> None:
    path = tmp_path / "a b.db"
    assert sqlite_path(f"sqlite:///{path}?timeout=5") == path
    assert sqlite_path(f"sqlite:///file:{path}?mode=ro&uri=true") == path
    assert sqlite_path(read_only_url(path, immutable=True)) == path  # percent-encoded
    assert sqlite_path("sqlite:///file:mem?mode=memory&uri=true") is None


@pytest.mark.parametrize(("durability", "level"), [("normal", 1), ("full", 2)])
def test_durability_sets_sqlite_synchronous(tmp_path: Path, durability: str, level: int) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'd.db'}", durability=durability)  # type: ignore[arg-type]
    assert pragma(engine, "synchronous") == level


def test_a_new_sqlite_file_gets_the_larger_pages_and_an_existing_one_keeps_its_own(tmp_path: Path) -> None:
    assert pragma(make_engine(f"sqlite:///{tmp_path / 'new.db'}"), "page_size") == connectors.db.PAGE_SIZE == 8192
    with sqlite3.connect(tmp_path / "old.db") as conn:  # written before: 4 KiB pages
        conn.execute("PRAGMA page_size=4096")
        conn.execute("CREATE TABLE t (x)")
    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
    assert (pragma(engine, "page_size"), pragma(engine, "journal_mode")) == (4096, "wal")


def test_an_unknown_durability_is_config_error() -> None:
    with pytest.raises(ConfigError, match=r"durability must be one of \('normal', 'full'\), got 'off'"):
        make_engine("sqlite://", durability="off")  # type: ignore[arg-type]


@pytest.mark.postgres
@pytest.mark.parametrize(("durability", "setting"), [("normal", "off"), ("full", "on")])
def test_full_durability_turns_synchronous_commit_on_for_postgres(pg_url: str, durability: str, setting: str) -> None:
    engine = make_engine(pg_url, durability=durability)  # type: ignore[arg-type]
    try:  # the test server runs with synchronous_commit=off; "normal" leaves the server's setting
        for _ in range(2):  # and a pooled connection handed out again keeps it
            with engine.connect() as conn:
                assert conn.exec_driver_sql("SHOW synchronous_commit").scalar_one() == setting
    finally:
        engine.dispose()


def test_a_deferred_read_does_not_wait_for_a_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connectors.db, "BUSY_TIMEOUT_MS", 100)
    url = f"sqlite:///{tmp_path / 'lock.db'}"
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (v INTEGER)"))
        conn.execute(text("INSERT INTO t VALUES (1)"))
    writer = sqlite3.connect(tmp_path / "lock.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO t VALUES (2)")
    try:
        with engine.execution_options(sqlite_begin="DEFERRED").begin() as conn:
            assert conn.execute(text("SELECT v FROM t")).scalars().all() == [1]  # the last commit
        with pytest.raises(StoreError, match="locked"), storage_faults(url):
            with engine.begin() as conn:  # a write transaction waits for the lock, then gives up
                pass
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    with pytest.raises(ConfigError, match="sqlite_begin"):
        with engine.execution_options(sqlite_begin="EXCLUSIVE-ish").begin():
            pass


def _db_error(**attrs: object) -> DBAPIError:
    orig = type("DriverError", (Exception,), attrs)("driver says no")
    return OperationalError("SELECT 1", {}, orig)


@pytest.mark.parametrize(
    ("attrs", "cause"),
    [
        ({"sqlite_errorcode": 13}, "disk full"),
        ({"sqlite_errorcode": 8 | (1 << 8)}, "read-only"),  # SQLITE_READONLY_RECOVERY: an extended code
        ({"sqlite_errorcode": 5}, "locked"),
        ({"sqlite_errorcode": 6}, "locked"),
        ({"sqlite_errorcode": 1}, None),  # SQLITE_ERROR: a bad statement is not a storage fault
        ({"sqlstate": "53100"}, "disk full"),
        ({"sqlstate": "25006"}, "read-only"),
        ({"sqlstate": "55P03"}, "locked"),
        ({"pgcode": "53100"}, "disk full"),  # psycopg2 names it pgcode
        ({"sqlstate": "23505"}, None),  # a unique violation
        ({}, None),
    ],
)
def test_storage_fault_reads_sqlite_codes_and_postgres_sqlstates(attrs: dict[str, object], cause: str | None) -> None:
    assert storage_fault(_db_error(**attrs)) == cause


def test_storage_faults_name_the_cause_and_the_database_without_its_password() -> None:
    url = "postgresql+psycopg://evolve:hunter2@db.internal/runs"
    with pytest.raises(StoreError) as info, storage_faults(url):
        raise _db_error(sqlstate="53100")
    message = str(info.value)
    assert message.startswith("disk full: the database 'postgresql+psycopg://evolve:***@db.internal/runs'")
    assert "hunter2" not in message and "driver says no" in message
    assert isinstance(info.value.__cause__, DBAPIError)
    with pytest.raises(DBAPIError), storage_faults(url):  # not a storage fault: unchanged
        raise _db_error(sqlstate="23505")
