"""Storage faults, locks and durability: what a caller sees when the disk or the database says no.

A full disk, read-only media and a held lock reach the caller as a ``StoreError`` naming the cause
and the database, with the driver's error chained; ``close`` releases the database even when the
index cannot be saved; reads never wait for another process's write; ``durability`` reaches the
database's own setting. Faults are real where SQLite can make them (``max_page_count`` fills the
"disk", ``mode=ro`` opens read-only, another process holds the write lock); the index save is made to
fail with the error faiss raises.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

import connectors.db
from connectors.errors import ConfigError, StoreError
from memory.config import MemoryConfig
from memory.store import MemoryStore
from tests.memory.conftest import sqlite_only

Opener = Callable[..., MemoryStore]
FAISS_FULL = (
    "Error in void faiss::write_index(const Index*, IOWriter*, int) at index_write.cpp:499: Error: "
    "'ret == (size * 4)' failed: write error in {path}: 1048494 != 5120000 (No space left on device)"
)


def _filled(store: MemoryStore, n: int = 20) -> list[str]:
    ids = [m.id for m in store.add_many([(f"chore number {i}", f"how to do chore {i}") for i in range(n)])]
    store.reinforce(store.retrieve("chore number 3"), 1.0)
    return ids


def _db_file(url: str) -> Path:
    path = connectors.db.sqlite_path(url)
    assert path is not None
    return path


# -- disk full -----------------------------------------------------------------------------------
@sqlite_only
def test_a_full_disk_is_a_store_error_naming_it_and_nothing_is_written(store: MemoryStore, db_url: str) -> None:
    _filled(store)
    before = store.stats()["count"]
    with store._db.transaction() as conn:  # SQLite's own "disk full": the file may not grow any more
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
        conn.exec_driver_sql(f"PRAGMA max_page_count={pages}")
    with pytest.raises(StoreError, match="disk full") as info:
        store.add_many([(f"long task {i}", "x" * 4000) for i in range(200)])
    assert str(_db_file(db_url)) in str(info.value) and "free space" in str(info.value).lower()
    assert isinstance(info.value.__cause__, DBAPIError)
    assert store.stats()["count"] == before  # the transaction rolled back; the store still reads
    with store._db.transaction() as conn:
        conn.exec_driver_sql("PRAGMA max_page_count=1073741823")
    store.add("after the disk was freed", "writes again")
    assert store.stats()["count"] == before + 1


# -- read-only media -----------------------------------------------------------------------------
def _read_only_checks(ro: MemoryStore, ids: list[str], out: Path) -> None:
    """Every read works on a read-only store; every write says read-only."""
    assert ro.get(ids[0]).intent == "chore number 0"
    assert len(ro.items()) == len(ids) and ro.stats()["count"] == len(ids)
    recall = ro.retrieve("chore number 5", record=False)
    assert recall.items and recall.items[0].intent == "chore number 5"
    assert ro.export(out) == len(ids)
    assert ro.index_status() in ("loaded", "caught_up", "built", "rebuilt", "database")
    for write in (
        lambda: ro.add("new", "refused"),
        lambda: ro.reinforce(ro.retrieve("chore number 1"), 1.0),
        lambda: ro.remove(ids[:1]),
    ):
        with pytest.raises(StoreError, match="read-only"):
            write()
    assert len(ro.items()) == len(ids)


@sqlite_only
def test_a_read_only_uri_opens_for_reads_and_refuses_writes(
    open_store: Opener, db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _db_file(db_url)
    with open_store() as store:
        ids = _filled(store)
    ro = open_store(url=f"sqlite:///file:{path}?mode=ro&uri=true")
    assert ro._db.read_only
    _read_only_checks(ro, ids, tmp_path / "out.jsonl")
    with caplog.at_level(logging.WARNING):
        ro.close()  # nothing to save and nothing raised
    assert not (tmp_path / "file:").exists()  # the URI is not taken for a folder name


@sqlite_only
def test_a_read_catches_up_with_another_writer_without_writing(open_store: Opener, db_url: str) -> None:
    """A read transaction that catches the mirror up only reads: on a read-only connection a write
    would raise."""
    writer = open_store()
    ids = _filled(writer)
    ro = open_store(url=f"sqlite:///file:{_db_file(db_url)}?mode=ro&uri=true")
    ro.index_status()  # the namespace is loaded
    new = writer.add("a brand new chore", "done")
    writer.reinforce(writer.retrieve("chore number 7"), 1.0)
    assert ro.index_status() == "built"  # a read transaction: catches up with both writes
    mirror = ro._mirrors.loaded("default")
    assert mirror is not None and len(mirror) == len(ids) + 1 and new.id in set(mirror.ids)
    assert ro.get(new.id).intent == "a brand new chore"


@sqlite_only
@pytest.mark.parametrize("folder_writable", [True, False])
def test_a_file_that_cannot_be_written_is_opened_read_only(
    open_store: Opener, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder_writable: bool
) -> None:
    """As on a read-only mount (or a file without write permission): the store opens for reads.

    Root writes through permissions, so "cannot be written" is what ``writable`` answers; SQLite then
    really opens the file read-only (``immutable=1`` when its folder takes no -shm file).
    """
    path = _db_file(db_url)
    with open_store() as store:
        ids = _filled(store)
    monkeypatch.setattr(connectors.db, "writable", lambda p: folder_writable and p != path)
    ro = open_store()
    assert ro._db.read_only
    assert ("immutable=1" in str(ro.engine.url)) is not folder_writable
    _read_only_checks(ro, ids, tmp_path / "out.jsonl")


@sqlite_only
def test_a_missing_database_opened_read_only_says_so(db_url: str, embedder: Any) -> None:
    url = f"sqlite:///file:{_db_file(db_url)}?mode=ro&uri=true"
    with pytest.raises(StoreError, match="read-only") as info:
        MemoryStore(url, embedder=embedder)
    assert "cannot create the memory tables" not in str(info.value)
    assert info.value.__cause__ is not None


@pytest.mark.postgres
def test_a_read_only_postgres_database_opens_for_reads(pg_url: str, embedder: Any, tmp_path: Path) -> None:
    with MemoryStore(pg_url, embedder=embedder) as store:
        ids = _filled(store)
        with store.engine.connect() as conn:
            name = conn.exec_driver_sql("SELECT current_database()").scalar_one()
            conn.exec_driver_sql(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
            conn.commit()
    with MemoryStore(pg_url, embedder=embedder) as ro:
        _read_only_checks(ro, ids, tmp_path / "out.jsonl")


# -- the vector index ----------------------------------------------------------------------------
def _failing_write_index(monkeypatch: pytest.MonkeyPatch) -> None:
    faiss = pytest.importorskip("faiss")

    def write_index(index: Any, path: str) -> None:
        Path(path).write_bytes(b"torn")  # faiss leaves what it wrote before the disk filled
        raise RuntimeError(FAISS_FULL.format(path=path))

    monkeypatch.setattr(faiss, "write_index", write_index)


@sqlite_only
def test_save_index_on_a_full_disk_is_a_store_error(
    store: MemoryStore, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _filled(store)
    _failing_write_index(monkeypatch)
    with pytest.raises(StoreError, match="disk full") as info:
        store.save_index()
    assert isinstance(info.value.__cause__, RuntimeError)
    folder = _db_file(db_url).with_name(_db_file(db_url).name + ".faiss")
    assert not list(folder.glob("*.tmp"))  # the torn temporary file is removed


@sqlite_only
def test_close_during_a_failed_index_save_warns_and_releases_the_database(
    open_store: Opener, db_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store()
    ids = _filled(store)
    _failing_write_index(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="memory.store"):
        store.close()  # does not raise
    assert "disk full" in caplog.text
    with pytest.raises(StoreError, match="closed"):
        store.items()
    path = _db_file(db_url)
    assert not path.with_name(path.name + "-wal").exists()  # the last connection closed: WAL checkpointed
    monkeypatch.undo()
    with open_store() as again:  # the index is rebuilt from SQL
        assert again.index_status() in ("built", "rebuilt") and len(again.items()) == len(ids)


# -- locks ---------------------------------------------------------------------------------------
def _hold_write_lock(url: str, locked: Any, release: Any) -> None:
    """Another process: begin a write transaction (SQLite: the write lock; PostgreSQL: row locks on the
    state and the items), change every Q, and hold it until told to commit."""
    engine = connectors.db.make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE memory_items SET q = 0.5"))
        conn.execute(text("UPDATE memory_state SET generation = generation + 1"))
        locked.set()
        release.wait(120)
    engine.dispose()


def _lock_is_held(url: str) -> bool:
    """Whether a write would have to wait now (asked without waiting)."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(_db_file(url), timeout=0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            conn.close()
    engine = connectors.db.make_engine(url)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1 FROM memory_state FOR UPDATE NOWAIT")
        return False
    except DBAPIError:
        return True
    finally:
        engine.dispose()


def test_reads_do_not_wait_for_another_process_writing(store: MemoryStore, db_url: str) -> None:
    ids = _filled(store)
    recall = store.retrieve("chore number 2")
    q = store.get(ids[0]).q
    ctx = mp.get_context("spawn")
    locked, release = ctx.Event(), ctx.Event()
    writer = ctx.Process(target=_hold_write_lock, args=(db_url, locked, release))
    writer.start()
    try:
        assert locked.wait(120), "the writer did not start"
        assert store.get(ids[0]).q == q  # the last committed state, without waiting
        assert len(store.items()) == len(ids)
        assert store.stats()["count"] == len(ids)
        assert store.explain(recall.id)["query"] == "chore number 2"
        assert store.index_status() in ("built", "database")
        assert _lock_is_held(db_url), "the reads finished while the writer held its lock"
    finally:
        release.set()
        writer.join(60)
    assert writer.exitcode == 0
    assert store.get(ids[0]).q == 0.5  # and once it commits, the reads see it


@sqlite_only
def test_a_write_waiting_past_the_busy_timeout_is_a_store_error_naming_the_lock(
    open_store: Opener, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connectors.db, "BUSY_TIMEOUT_MS", 200)
    store = open_store()
    _filled(store)
    holder = sqlite3.connect(_db_file(db_url), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="locked") as info:
            store.add("blocked", "by another writer")
        assert isinstance(info.value.__cause__, DBAPIError)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store.add("no longer blocked", "written")


# -- durability ----------------------------------------------------------------------------------
@pytest.mark.parametrize("durability", ["normal", "full"])
def test_durability_reaches_every_connection_of_the_store(open_store: Opener, durability: str) -> None:
    store = open_store(MemoryConfig(durability=durability))  # type: ignore[arg-type]
    _filled(store, 3)
    with store._db.transaction(write=False) as kept, store.engine.connect() as pooled:
        for conn in (kept, pooled):
            if store.engine.dialect.name == "sqlite":
                assert conn.exec_driver_sql("PRAGMA synchronous").scalar_one() == {"normal": 1, "full": 2}[durability]
            else:  # the test server runs with synchronous_commit=off; "normal" leaves it alone
                want = {"normal": "off", "full": "on"}[durability]
                assert conn.exec_driver_sql("SHOW synchronous_commit").scalar_one() == want


def test_an_unknown_durability_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"durability must be one of \('normal', 'full'\), got 'fast'"):
        MemoryConfig(durability="fast")  # type: ignore[arg-type]
