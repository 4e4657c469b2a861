"""Back up and restore a whole Evolve database: memories, recall log, feedback ledger, prompt versions,
runs, jobs and adapter records (they share one database, so one backup holds them all).

SQLite uses the sqlite3 online backup API: one consistent snapshot taken while other processes keep
writing (WAL readers do not block writers), written to a single self-contained file. PostgreSQL uses
``pg_dump --format=custom`` and ``pg_restore --single-transaction``, so a user's own ``pg_dump`` /
``pg_restore`` read and write the same files.

Not in a backup: the saved FAISS index beside a SQLite file (``<db>.faiss/``) is derived from the
database and rebuilt on open, so restore deletes the target's stale copy; adapter weight folders live
under ``$EVOLVE_HOME/adapters`` (the database holds their records and checksums), copy those yourself.

Example:
    >>> info = backup("sqlite:///evolve.db", "evolve-backup.db")      # doctest: +SKIP
    >>> restore("evolve-backup.db", "sqlite:///restored.db").counts   # doctest: +SKIP
    {'memory_items': 120, ...}
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Connection, create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from connectors.db import default_url, sqlite_path
from connectors.errors import ConfigError, StoreError
from connectors.redact import redact_url
from evolve.backup import postgres

log = logging.getLogger(__name__)

SQLITE_MAGIC = b"SQLite format 3\x00"
MEMORY_TABLES = ("memory_items", "memory_intents", "memory_state")
EVOLVE_PREFIXES = ("memory_", "prompt_", "evolve_", "adapter_")


@dataclass(frozen=True)
class BackupInfo:
    """What a backup or restore did: the file, its size, and the rows per table it holds."""

    path: Path
    backend: str  # "sqlite" or "postgresql"
    size: int
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def summary(self) -> str:
        """One line for people: size and the main counts."""
        c = self.counts
        parts = [
            f"{c.get('memory_items', 0)} memories",
            f"{c.get('memory_recalls', 0)} recalls",
            f"{c.get('memory_feedback', 0)} feedback",
            f"{c.get('prompt_versions', 0)} prompt versions",
            f"{c.get('adapter_versions', 0)} adapter versions",
        ]
        return f"{self.size / 1e6:.2f} MB, {sum(c.values())} rows in {len(c)} tables ({', '.join(parts)})"


def backup(url: str | None, dest: str | Path, *, pg_bin: str | Path | None = None) -> BackupInfo:
    """Write a consistent backup of the database at ``url`` to ``dest`` (replaced atomically).

    Safe while other processes write: the backup is one snapshot, and every transaction committed before
    it started is in it. ``pg_bin`` is the folder (or the ``pg_dump`` file) of the PostgreSQL client
    tools; by default they are looked up on PATH.

    Raises:
        StoreError: the database is missing or unreadable, or the dump failed.
        ConfigError: no ``pg_dump`` was found (the message says how to get one).
    """
    url, dest, start = url or default_url(), Path(dest), time.perf_counter()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        if _is_sqlite(url):
            counts = _sqlite_backup(_sqlite_file(url, must_exist=True), tmp)
            backend = "sqlite"
        else:
            counts = postgres.dump(url, tmp, pg_bin=pg_bin, count=count_rows)
            postgres.check_archive(tmp, pg_bin=pg_bin)
            backend = "postgresql"
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return BackupInfo(dest, backend, dest.stat().st_size, counts, time.perf_counter() - start)


def restore(src: str | Path, url: str | None, *, force: bool = False, pg_bin: str | Path | None = None) -> BackupInfo:
    """Restore the backup ``src`` into the database at ``url``; all of it or nothing.

    The target must be empty (no tables) unless ``force``; then everything the backup holds replaces
    what is there. SQLite restores into a temporary file first and checks it (``integrity_check``, the
    memory tables, the recorded embedder) before it takes the target's place; PostgreSQL restores in one
    transaction (``pg_restore --single-transaction``) and is checked the same way afterwards.

    Raises:
        StoreError: ``src`` is missing or not a backup of this kind, the target is not empty, or the
            restored database fails its checks.
    """
    url, src, start = url or default_url(), Path(src), time.perf_counter()
    magic = _magic(src)
    if _is_sqlite(url):
        if magic != SQLITE_MAGIC:
            raise StoreError(f"restore: {src} is not a SQLite backup (it starts with {magic[:8]!r}){_hint(magic)}")
        counts = _sqlite_restore(src, _sqlite_file(url, must_exist=False), force=force)
        backend = "sqlite"
    else:
        if not magic.startswith(postgres.MAGIC):
            raise StoreError(
                f"restore: {src} is not a pg_dump custom-format archive (it starts with {magic[:8]!r}){_hint(magic)}"
            )
        postgres.check_archive(src, pg_bin=pg_bin)
        counts = postgres.load(src, url, force=force, pg_bin=pg_bin, count=_checked_counts)
        backend = "postgresql"
    return BackupInfo(src, backend, src.stat().st_size, counts, time.perf_counter() - start)


# ---- SQLite -----------------------------------------------------------------------------------------


def _sqlite_backup(path: Path, tmp: Path) -> dict[str, int]:
    try:
        with closing(_connect(path)) as source, closing(_connect(tmp)) as copy:
            source.backup(copy)  # pages=-1: one step, so one read snapshot of the source (WAL-aware)
            copy.execute("PRAGMA journal_mode=DELETE")  # a single self-contained file, no -wal beside it
        return _sqlite_check(tmp, where=f"the backup of {path}")
    except sqlite3.Error as e:
        raise StoreError(f"backup: cannot copy the SQLite database {path}: {e}") from e


def _sqlite_restore(src: Path, target: Path, *, force: bool) -> dict[str, int]:
    _sqlite_check(src, where=f"backup {src}")
    if target.exists() and _sqlite_tables(target) and not force:
        raise StoreError(
            f"restore: {target} already holds a database ({len(_sqlite_tables(target))} tables); "
            "restore into a new path, or pass force=True (--force) to replace it"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.restore-{os.getpid()}.tmp")
    try:
        with closing(_connect(src)) as source, closing(_connect(tmp)) as copy:
            source.backup(copy)
            copy.execute("PRAGMA journal_mode=DELETE")
        counts = _sqlite_check(tmp, where=f"the restored copy of {src}")
        if target.exists():
            # Renaming over a live WAL database would pair the new file with the old -wal file. The
            # backup API writes the checked copy into the target in one transaction instead: atomic,
            # WAL-aware, and other connections see either the old or the new database.
            with closing(_connect(tmp)) as source, closing(_connect(target)) as dest:
                _match_page_size(source, dest)
                source.backup(dest)
        else:
            os.replace(tmp, target)
    except sqlite3.Error as e:
        raise StoreError(f"restore: cannot write the SQLite database {target}: {e}") from e
    finally:
        tmp.unlink(missing_ok=True)
    # The saved vector index describes the old database and could match the new one's ids: drop it.
    shutil.rmtree(target.with_name(target.name + ".faiss"), ignore_errors=True)
    log.info("restored %s into %s (%d tables)", src, target, len(counts))
    return _sqlite_check(target, where=f"restored database {target}")


def _match_page_size(source: sqlite3.Connection, dest: sqlite3.Connection) -> None:
    """Give ``source`` (the restored copy, not in WAL mode) ``dest``'s page size: SQLite cannot back up into a
    WAL database whose page size differs ("attempt to write a readonly database"), and the page size of new
    files changed (4 KiB before ``connectors.db.PAGE_SIZE``), so a backup and its target may differ."""
    size = dest.execute("PRAGMA page_size").fetchone()[0]
    if source.execute("PRAGMA page_size").fetchone()[0] != size:
        source.execute(SET_PAGE_SIZE[int(size)])
        source.execute("VACUUM")  # rewrites the copy with the new page size


SET_PAGE_SIZE = {
    512: "PRAGMA page_size=512", 1024: "PRAGMA page_size=1024", 2048: "PRAGMA page_size=2048",
    4096: "PRAGMA page_size=4096", 8192: "PRAGMA page_size=8192", 16384: "PRAGMA page_size=16384",
    32768: "PRAGMA page_size=32768", 65536: "PRAGMA page_size=65536",
}  # fmt: skip
"""Every page size SQLite has, its statement written out (no SQL built from values)."""


def _sqlite_check(path: Path, *, where: str) -> dict[str, int]:
    """integrity_check, then the Evolve checks; the rows per table."""
    try:
        with closing(_connect(path)) as conn:
            result = [row[0] for row in conn.execute("PRAGMA integrity_check")]
    except sqlite3.DatabaseError as e:
        raise StoreError(f"{where} is not a readable SQLite database: {e}") from e
    if result != ["ok"]:
        raise StoreError(f"{where} failed SQLite's integrity_check: {'; '.join(result[:5])}")
    # A plain engine: connectors.db's would switch the file to WAL, and a backup stays one self-contained file.
    engine = create_engine(f"sqlite:///{path}", poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return _checked_counts(conn, where)
    finally:
        engine.dispose()


def _sqlite_tables(path: Path) -> list[str]:
    with closing(_connect(path)) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(str(path), timeout=30, isolation_level=None)


def _sqlite_file(url: str, *, must_exist: bool) -> Path:
    path = sqlite_path(url)
    if path is None:
        raise ConfigError(f"backup/restore needs a SQLite file or a PostgreSQL URL, got the in-memory {url!r}")
    if must_exist and not path.is_file():
        raise StoreError(f"backup: there is no database at {path} (from {url!r})")
    return path


def _is_sqlite(url: str) -> bool:
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(
            f"database URL must look like 'sqlite:///path.db' or 'postgresql+psycopg://…', got {redact_url(url)!r}"
        )
    return make_url(url).get_backend_name() == "sqlite"


# ---- shared checks ----------------------------------------------------------------------------------


def count_rows(conn: Connection) -> dict[str, int]:
    """Rows per Evolve table in the database ``conn`` is connected to (its default schema)."""
    quote = conn.dialect.identifier_preparer.quote
    names = sorted(n for n in inspect(conn).get_table_names() if n.startswith(EVOLVE_PREFIXES))
    return {n: int(conn.execute(text(f"SELECT count(*) FROM {quote(n)}")).scalar_one()) for n in names}


def _checked_counts(conn: Connection, where: str) -> dict[str, int]:
    """The row counts, after checking that this is an Evolve database with an intact memory store."""
    counts = count_rows(conn)
    if not counts:
        raise StoreError(f"{where} holds no Evolve tables (memory_*, prompt_*, evolve_*); is it an Evolve backup?")
    if any(n.startswith("memory_") for n in counts):
        missing = [n for n in MEMORY_TABLES if n not in counts]
        if missing:
            raise StoreError(f"{where} lacks the memory tables {missing}; it holds {sorted(counts)}")
        embedder = conn.execute(text("SELECT embedder FROM memory_state WHERE id = 1")).first()
        if embedder is None or embedder[0] is None:
            raise StoreError(
                f"{where} has no embedder recorded in memory_state; expected the one the store was built with"
            )
    return counts


def _magic(src: Path) -> bytes:
    if not src.is_file():
        raise StoreError(f"restore: there is no backup file at {src}")
    with src.open("rb") as f:
        return f.read(len(SQLITE_MAGIC))


def _hint(magic: bytes) -> str:
    if magic == SQLITE_MAGIC:
        return (
            "; it is a SQLite backup: restore it into a sqlite:/// URL (export/import moves memories across backends)"
        )
    if magic.startswith(postgres.MAGIC):
        return "; it is a PostgreSQL backup: restore it into a postgresql+psycopg:// URL"
    if magic.startswith(b"{"):
        return "; it looks like a JSONL export: use `evolve memory import`"
    return ""
