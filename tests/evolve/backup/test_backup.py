"""Backups and exports give back exactly what was stored (evolve.backup.database, memory.storage.jsonl).

The harness (populate, snapshot, differences, ...) is tests/reliability/backup.py's, so the tests and the
reliability figures check the same thing.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from connectors.errors import ConfigError, StoreError
from evolve.backup.database import backup, restore
from evolve.backup.postgres import find_tool
from memory.store import MemoryStore
from tests.reliability.backup import (
    backup_while_writing,
    differences,
    embedder,
    field_differences,
    item_fields,
    pg_bin,
    populate,
    replayed_feedback,
    snapshot,
)

N = 120


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def test_sqlite_backup_then_restore_keeps_every_row_of_every_table_exactly(tmp_path: Path) -> None:
    source, target = sqlite_url(tmp_path / "src.db"), sqlite_url(tmp_path / "restored" / "dst.db")
    populate(source, n=N, root=tmp_path)
    before = snapshot(source)
    made = backup(source, tmp_path / "backup.db")
    assert made.backend == "sqlite" and made.counts["memory_items"] == N + 2
    assert {"memory_feedback", "memory_recalls", "prompt_versions", "adapter_versions"} <= set(made.counts)
    back = restore(made.path, target)
    after = snapshot(target)
    assert differences(before, after) == 0
    assert after["memory_items"] and after["prompt_heads"] and after["adapter_heads"]  # the compare saw data
    assert back.counts == made.counts
    assert replayed_feedback(target) == 0  # an old feedback id applies nothing after the restore
    with MemoryStore(target, embedder=embedder()) as store:
        assert len(store.retrieve("default task 3 about topic 3").items) > 0  # index rebuilt from SQL


def test_a_backup_is_one_self_contained_file(tmp_path: Path) -> None:
    source = sqlite_url(tmp_path / "src.db")
    populate(source, n=20, root=tmp_path)
    backup(source, tmp_path / "b.db")
    assert not (tmp_path / "b.db-wal").exists()
    with sqlite3.connect(tmp_path / "b.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_restore_refuses_a_database_that_is_not_empty_unless_forced(tmp_path: Path) -> None:
    a, b = sqlite_url(tmp_path / "a.db"), sqlite_url(tmp_path / "b.db")
    populate(a, n=20, root=tmp_path / "a")
    backup(a, tmp_path / "a-backup.db")
    with MemoryStore(b, embedder=embedder()) as store:
        store.add("other", "kept until forced")
    with pytest.raises(StoreError, match="already holds a database.*force"):
        restore(tmp_path / "a-backup.db", b)
    assert [it.intent for it in MemoryStore(b, embedder=embedder()).items()] == ["other"]
    (tmp_path / "b.db.faiss").mkdir(exist_ok=True)  # a stale saved index beside the target
    restore(tmp_path / "a-backup.db", b, force=True)
    assert differences(snapshot(a), snapshot(b)) == 0
    assert not (tmp_path / "b.db.faiss").exists()


@pytest.mark.parametrize(("backup_pages", "target_pages"), [(4096, 8192), (8192, 4096)])
def test_a_forced_restore_works_across_page_sizes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backup_pages: int, target_pages: int
) -> None:
    """Stores made before ``connectors.db.PAGE_SIZE`` have 4 KiB pages; SQLite cannot back up into a WAL
    database of another page size, so a backup of one restored over the other has to be converted first."""
    a, b = sqlite_url(tmp_path / "a.db"), sqlite_url(tmp_path / "b.db")
    monkeypatch.setattr("connectors.db.PAGE_SIZE", backup_pages)
    populate(a, n=20, root=tmp_path / "a")
    backup(a, tmp_path / "a-backup.db")
    monkeypatch.setattr("connectors.db.PAGE_SIZE", target_pages)
    with MemoryStore(b, embedder=embedder()) as store:
        store.add("other", "replaced by the restore")
    restore(tmp_path / "a-backup.db", b, force=True)
    assert differences(snapshot(a), snapshot(b)) == 0
    with sqlite3.connect(tmp_path / "b.db") as conn:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == target_pages


def test_restore_says_what_is_wrong_with_the_file(tmp_path: Path) -> None:
    target = sqlite_url(tmp_path / "t.db")
    with pytest.raises(StoreError, match="no backup file"):
        restore(tmp_path / "missing.db", target)
    (tmp_path / "export.jsonl").write_text('{"format": "evolve.memory"}\n')
    with pytest.raises(StoreError, match="not a SQLite backup.*memory import"):
        restore(tmp_path / "export.jsonl", target)
    (tmp_path / "torn.db").write_bytes(b"SQLite format 3\x00" + b"\x01" * 200)
    with pytest.raises(StoreError, match="not a readable SQLite database|integrity"):
        restore(tmp_path / "torn.db", target)
    sqlite3.connect(tmp_path / "foreign.db").execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(StoreError, match="no Evolve tables"):
        restore(tmp_path / "foreign.db", target)
    assert not (tmp_path / "t.db").exists()  # nothing half-restored is left behind
    assert not list(tmp_path.glob(".t.db.*"))
    with pytest.raises(StoreError, match="no database at"):
        backup(sqlite_url(tmp_path / "nothing.db"), tmp_path / "x.db")
    with pytest.raises(ConfigError, match="in-memory"):
        backup("sqlite://", tmp_path / "x.db")


def test_a_backup_taken_while_another_writer_commits_holds_everything_committed_before(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "live.db")
    populate(url, n=20, root=tmp_path)
    before, _ = backup_while_writing(url, tmp_path / "live-backup.db")
    restored = sqlite_url(tmp_path / "restored.db")
    restore(tmp_path / "live-backup.db", restored)  # integrity_check and the store checks pass
    assert len(before) >= 50 and before <= set(item_fields(restored))


def test_a_missing_pg_dump_names_how_to_get_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("evolve.backup.postgres.bundled_bin", lambda: None)
    with pytest.raises(ConfigError, match="pg_dump was not found on PATH.*postgresql-client.*pg_bin"):
        find_tool("pg_dump", None)
    with pytest.raises(ConfigError, match="pg_restore is not in"):
        find_tool("pg_restore", tmp_path)


def test_export_then_import_into_a_fresh_store_keeps_every_memory_field_exactly(tmp_path: Path) -> None:
    source, target = sqlite_url(tmp_path / "a.db"), sqlite_url(tmp_path / "b.db")
    populate(source, n=N, root=tmp_path)
    with MemoryStore(source, embedder=embedder()) as store:
        assert store.export(tmp_path / "m.jsonl") == N + 2
    with MemoryStore(target, embedder=embedder()) as store:
        assert store.import_(tmp_path / "m.jsonl") == N + 2
        assert store.import_(tmp_path / "m.jsonl") == 0  # ids already there are skipped
    fields = item_fields(source)
    assert any(f[5] > 0 for f in fields.values())  # visits were learned, so the compare covers them
    assert field_differences(fields, item_fields(target)) == 0


@pytest.mark.postgres
def test_postgres_pg_dump_then_pg_restore_keeps_every_row_exactly(pg_url: str, pg_server: str, tmp_path: Path) -> None:
    from tests.support.postgres import create_database, drop_database

    populate(pg_url, n=N, root=tmp_path)
    before = snapshot(pg_url)
    made = backup(pg_url, tmp_path / "pg.dump", pg_bin=pg_bin())
    assert made.backend == "postgresql" and made.counts["memory_items"] == N + 2
    assert (tmp_path / "pg.dump").read_bytes()[:5] == b"PGDMP"  # pg_dump's custom format
    name = "evolve_backup_target"
    target = create_database(pg_server, name)
    try:
        restore(made.path, target, pg_bin=pg_bin())
        assert differences(before, snapshot(target)) == 0
        assert replayed_feedback(target) == 0
        with pytest.raises(StoreError, match="not empty.*force"):
            restore(made.path, target, pg_bin=pg_bin())
        restore(made.path, target, force=True, pg_bin=pg_bin())
        assert differences(before, snapshot(target)) == 0
        populate(sqlite_url(tmp_path / "s.db"), n=5, root=tmp_path / "s")
        backup(sqlite_url(tmp_path / "s.db"), tmp_path / "s.bak")
        with pytest.raises(StoreError, match="SQLite backup: restore it into a sqlite"):
            restore(tmp_path / "s.bak", target, force=True, pg_bin=pg_bin())
    finally:
        drop_database(pg_server, name)
