"""The store's SQL side: the engine for a URL, and for a SQLite file one connection kept open.

A file store keeps one connection for its whole life (the store serialises every use under its lock),
which saves a pool checkout and reset per call and lets the connection carry a bigger page cache;
server databases (PostgreSQL) and in-memory SQLite check a connection out per transaction. Every
transaction turns storage faults (disk full, read-only, locked) into ``StoreError``; a read
transaction (``write=False``) takes no write lock on SQLite.

Example:
    >>> db = Database("sqlite://")
    >>> with db.transaction(write=False) as conn:
    ...     conn.exec_driver_sql("SELECT 1").scalar_one()
    1
    >>> db.close()
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Engine, Executable
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

from connectors.db import Durability, make_engine, opened_read_only, server_read_only, sqlite_path, storage_faults
from connectors.errors import ConfigError, StoreError
from connectors.redact import redact, redact_url
from memory.config import SERVER_INDEX_KINDS, IndexKind, MemoryConfig
from memory.mirror.adaptive import AdaptiveIndex
from memory.mirror.pgvector import PgVectorIndex
from memory.mirror.sync import MirrorSet
from memory.storage.schema import create_schema
from memory.storage.statements import GENERATION_SQL, execute_many
from memory.write.checks import check_embedder

if TYPE_CHECKING:
    from memory.mirror.arrays import NamespaceMirror

log = logging.getLogger(__name__)
T = TypeVar("T")

SQLITE_CACHE_KIB = 65536
MAX_DEFERRED = 512  # deferred rows that make the background writer commit at once
RETRY_S = 0.5  # seconds before the background writer tries again after a failure
BULK_PAUSE = 0.05  # seconds the write lock stays free between two chunks on SQLite (waiters poll every few ms)
WORKING = (AdaptiveIndex, PgVectorIndex)  # indexes with background work (the graph's, a tuning): ``wait``, ``close``


_OPEN: dict[str, weakref.WeakSet[Database]] = {}
"""The databases open in this process by URL: a transaction commits what the others deferred on its URL first."""


def _write_rows(conn: Connection, taken: dict[Executable, list[dict[str, Any]]]) -> None:
    for statement, rows in taken.items():
        execute_many(conn, statement, rows)


class Database:
    """An engine plus, once ``keep_connection`` is called on a SQLite file, its one kept connection.

    ``read_only`` is true when the SQLite file is opened read-only (``mode=ro`` in the URL, or a file
    that cannot be written): reads work, a write raises ``StoreError`` naming read-only.
    """

    def __init__(self, url: str, *, durability: Durability = "normal") -> None:
        self.url = url
        self.engine = engine_for(url, durability=durability)
        self.read_only = opened_read_only(self.engine)
        self._reads = self.engine.execution_options(sqlite_begin="DEFERRED")
        self._conn: Connection | None = None
        self._deferred: dict[Executable, list[dict[str, Any]]] = {}
        self.deferred = 0
        """How many rows wait for their group commit (``defer``)."""
        self._buffer = threading.Lock()  # guards the deferred rows
        self._writing = threading.RLock()  # held by every write transaction here and while deferred rows are written
        self._committing = threading.Lock()  # held only while ``write_deferred`` takes and commits rows: what
        # another store of this process waits for before its transaction (it never waits on ``_writing``, which a
        # write transaction holds throughout and a wait on which could close a cycle)
        _OPEN.setdefault(url, weakref.WeakSet()).add(self)

    @property
    def separate_writes(self) -> bool:
        """Whether ``write_deferred`` may run beside the kept connection: it takes a connection of its own (not
        an in-memory SQLite database, whose one connection is the kept one)."""
        return not (self.url.startswith("sqlite") and sqlite_path(self.url) is None)

    def defer(self, statement: Executable, rows: list[dict[str, Any]]) -> None:
        """Rows to write with the next transaction, whatever it is, or by ``write_deferred``: a group commit for
        rows nobody waits on. A transaction that fails keeps them waiting."""
        with self._buffer:
            self._deferred.setdefault(statement, []).extend(rows)
            self.deferred += len(rows)

    def flush(self) -> int:
        """Commit the deferred rows now, in one write transaction; returns how many there were."""
        count = self.deferred
        if count:
            with self.transaction():
                pass
        return count

    def write_deferred(self) -> int:
        """Commit the deferred rows in a transaction on a connection of this call's own (``separate_writes``), so the
        caller needs no lock of the store's: a background writer. Returns how many rows were written."""
        with self._writing, self._committing:
            taken, count = self._take()
            if count:
                with self._put_back_on_failure(taken, count), storage_faults(self.url), self.engine.begin() as conn:
                    _write_rows(conn, taken)
            return count

    def _take(self) -> tuple[dict[Executable, list[dict[str, Any]]], int]:
        with self._buffer:
            taken, self._deferred, count, self.deferred = self._deferred, {}, self.deferred, 0
        return taken, count

    @contextmanager
    def _put_back_on_failure(self, taken: dict[Executable, list[dict[str, Any]]], count: int) -> Iterator[None]:
        """Rows taken for a transaction that did not commit wait again, ahead of those deferred since."""
        try:
            yield
        except BaseException:
            with self._buffer:
                for statement, rows in self._deferred.items():
                    taken.setdefault(statement, []).extend(rows)
                self._deferred, self.deferred = taken, self.deferred + count
            raise

    def keep_connection(self) -> None:
        """Hold one connection for a SQLite file (no-op for other databases)."""
        if not (self.url.startswith("sqlite") and sqlite_path(self.url) is not None):
            return
        with storage_faults(self.url):
            self._conn = self.engine.connect()
        raw = self._conn.connection.dbapi_connection
        assert raw is not None
        # A bigger page cache for this connection: inserts land in the id index at random places.
        raw.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")  # type: ignore[attr-defined]
        raw.execute("PRAGMA wal_autocheckpoint=10000")  # type: ignore[attr-defined]

    @contextmanager
    def transaction(self, *, write: bool = True, deferred: bool = True) -> Iterator[Connection]:
        """One transaction (the caller serialises use of the kept connection).

        A write begins ``IMMEDIATE`` on SQLite (the write lock up front, waiting up to the busy
        timeout); a read (``write=False``) begins ``DEFERRED``: it takes no lock, so another process's
        long write does not hold it up, and it sees the last commit. Elsewhere both are plain
        transactions. A storage fault raised inside is a ``StoreError`` naming its cause.

        Rows ``defer``red before are written first: in a write, as its first statements (committed with it);
        before a read, in a write of their own, so that the read sees them. ``deferred=False`` leaves them
        waiting (a recall's read: what it reads never depends on them).
        """
        if deferred:  # what other stores of this process deferred on the same database is committed first
            for other in list(_OPEN.get(self.url, ())):
                if other is not self:
                    if other.deferred:
                        other.write_deferred()
                    with other._committing:  # and wait for those its background writer is committing now
                        pass
        if not write and deferred:  # the rows deferred so far, committed first (waiting for those being written)
            try:
                self.flush()
            except StoreError as e:  # the read goes on without them; they wait (close says if they are lost)
                log.warning("memory database %s: %d deferred rows could not be written (%s)", redact_url(self.url),
                            self.deferred, e)  # fmt: skip
            with self._writing:  # and those a background writer is committing now
                pass
        with self._writing if write else nullcontext():
            taken, count = self._take() if write else ({}, 0)
            with self._put_back_on_failure(taken, count), storage_faults(self.url), self._begin(write) as conn:
                _write_rows(conn, taken)
                yield conn

    def outside_transaction(self) -> Connection | None:
        """The kept connection for reads of one autocommit statement each through the driver (no lock, no
        transaction of SQLAlchemy's: ``generation_now``, ``memory.storage.items.by_key``); None where no connection
        is kept (server databases, in-memory SQLite) or it is inside a transaction."""
        conn = self._conn
        return None if conn is None or conn.in_transaction() else conn

    def generation_now(self) -> int | None:
        """The generation committed now, read ``outside_transaction``. None where that has no connection or the
        read failed: the caller takes a transaction instead."""
        conn = self.outside_transaction()
        if conn is None:
            return None
        try:
            row = conn.connection.dbapi_connection.execute(GENERATION_SQL).fetchone()  # type: ignore[union-attr]
        except self.engine.dialect.loaded_dbapi.Error:
            return None
        return None if row is None else int(row[0])

    @contextmanager
    def _begin(self, write: bool) -> Iterator[Connection]:
        """A transaction on the kept connection (else a pooled one): ``IMMEDIATE`` for a write on SQLite."""
        if self._conn is None:
            with (self.engine if write else self._reads).begin() as conn:
                yield conn
        else:
            self._conn.execution_options(sqlite_begin="IMMEDIATE" if write else "DEFERRED")  # in place
            with self._conn.begin():
                yield self._conn

    def close(self) -> None:
        """Release the kept connection and the pool; a connection that fails to close is logged, not raised."""
        conn, self._conn = self._conn, None
        try:
            if conn is not None:
                conn.close()
        except DBAPIError as e:
            log.warning("memory database %s: closing its connection failed: %s", redact_url(self.url), redact(e.orig))
        finally:
            self.engine.dispose()


def open_database(url: str, config: MemoryConfig, *, embedder: str, dim: int) -> tuple[Database, MemoryConfig]:
    """A store's database, its schema created or upgraded and its embedder recorded (or checked: a store
    keeps the embedder it was built with), and ``config`` with its index kind resolved (``resolve_index``)."""
    db = Database(url, durability=config.durability)
    try:
        config = replace(config, index=resolve_index(config.index, db))
        create_schema(db.engine, dim=dim, vector_index=config.index == "pgvector")
        with storage_faults(url):
            db.read_only = db.read_only or server_read_only(db.engine)
        with db.transaction() as conn:
            check_embedder(conn, embedder, dim, url)
        db.keep_connection()  # every use is under the store's lock
    except BaseException:
        db.close()
        raise
    return db, config


def engine_for(url: str, *, durability: Durability = "normal") -> Engine:
    if url.startswith("sqlite") and sqlite_path(url) is None:
        # One shared connection, or every thread would see its own empty in-memory database.
        return make_engine(url, durability=durability, poolclass=StaticPool)
    return make_engine(url, durability=durability)


def resolve_index(kind: IndexKind, db: Database) -> IndexKind:
    """The index kind a store on ``db`` uses: ``"auto"`` is ``"pgvector"`` on PostgreSQL (the database
    answers phase A, no process builds an index) and ``"adaptive"`` elsewhere (exact while small)."""
    postgres = db.engine.dialect.name == "postgresql"
    if kind == "auto":
        return "pgvector" if postgres else "adaptive"
    if kind in SERVER_INDEX_KINDS and not postgres:
        raise ConfigError(
            f"MemoryConfig.index={kind!r} needs a PostgreSQL database with pgvector (postgresql+psycopg://…), "
            f"got {redact_url(db.url)!r}; use 'auto', 'flat', 'hnsw' or 'ivf' here"
        )
    return kind


def mirror_set(db: Database, *, dim: int, kind: str, index_path: str | Path | None) -> MirrorSet:
    """The store's mirrors: with an in-process index (saved beside a SQLite file unless the database is
    read-only), or with one the database serves (``"pgvector"``)."""
    served = None
    if kind == "pgvector":
        served = partial(
            PgVectorIndex, db.transaction, dim=dim, read=partial(db.transaction, write=False, deferred=False)
        )
    folder = index_dir(db.url, index_path)
    return MirrorSet(dim=dim, kind=kind, index_dir=folder, served_index=served, read_only=db.read_only)


def index_dir(url: str, index_path: str | Path | None) -> Path | None:
    """Where saved vector indexes live: ``index_path``, else ``<db file>.faiss`` beside a SQLite file."""
    if index_path is not None:
        return Path(index_path)
    path = sqlite_path(url) if url.startswith("sqlite") else None
    return path.with_name(path.name + ".faiss") if path is not None else None


class OpenStore:
    """What an open ``MemoryStore`` holds: its database, its mirrors, the lock that serialises every use
    in this process, and whether it was closed.

    ``locked`` is the lock on an open store; ``write`` a write transaction whose mirrors were caught
    up under the database's write lock; ``read`` one read transaction (no write lock).
    """

    def __init__(self, db: Database, mirrors: MirrorSet, *, log_delay: float = 0.0) -> None:
        self.db, self.mirrors = db, mirrors
        self.lock = threading.RLock()
        self.closed = False
        self.log_delay = log_delay
        self._due: float | None = None  # when the rows deferred first must be committed
        # The writer waits on the store's lock: tried on a lock of its own, it ran beside recalls instead of between
        # them, and a recall took 0.10 ms longer (p50 at 30k, same run; measured against this design).
        self._wake = threading.Condition(self.lock)
        self._writer: threading.Thread | None = None

    def defer(self, statement: Executable, rows: list[dict[str, Any]]) -> None:
        """Rows for the group commit (hold ``locked``): committed by a background writer on a connection of its
        own within ``log_delay`` seconds (at once past ``MAX_DEFERRED`` rows), or sooner by any transaction of this
        store, or by ``close``."""
        self.db.defer(statement, rows)
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_deferred, name="evolve-recall-log", daemon=True)
            self._writer.start()
        if self._due is None:
            self._due = time.monotonic() + self.log_delay
            self._wake.notify()
        elif self.db.deferred >= MAX_DEFERRED:
            self._wake.notify()

    def _write_deferred(self) -> None:
        """The background writer: waits under the store's lock until rows are due, writes them without it (recalls
        go on meanwhile; a write transaction of the store waits for it, ``Database.transaction``); a failure is
        logged and tried again."""
        while True:
            with self.lock:
                while not self.closed:
                    if not self.db.deferred:  # none, or written meanwhile by another transaction
                        self._due = None
                        self._wake.wait()
                        continue
                    left = (self._due or 0.0) - time.monotonic()
                    if left <= 0 or self.db.deferred >= MAX_DEFERRED:
                        break
                    self._wake.wait(left)
                if self.closed:
                    return
            try:
                self.db.write_deferred()
                retry = 0.0
            except Exception as e:  # the rows wait on; any transaction or close writes them (or says why not)
                log.warning("memory store: %d recall log rows could not be written yet (%s)", self.db.deferred, e)
                retry = RETRY_S
            with self.lock:
                self._due = time.monotonic() + max(self.log_delay, retry) if self.db.deferred else None

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The lock, on a store that is still open (else ``StoreError``)."""
        with self.lock:
            if self.closed:
                raise StoreError(f"this MemoryStore ({redact_url(self.db.url)}) is closed")
            yield

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction with the mirrors caught up inside it; hold ``locked`` around it."""
        with self.db.transaction() as conn:
            self.mirrors.sync(conn, lock=True)
            yield conn

    def read(self, query: Callable[[Connection], T]) -> T:
        """``query`` in one read transaction (no write lock), under the lock, on an open store."""
        with self.locked(), self.db.transaction(write=False) as conn:
            return query(conn)

    def mirror(self, namespace: str) -> NamespaceMirror:
        """The namespace's mirror as this process last saw it; loaded from SQL on first use."""
        loaded = self.mirrors.loaded(namespace)
        if loaded is not None:
            return loaded
        with self.db.transaction(write=False) as conn:
            self.mirrors.sync(conn)
            return self.mirrors.get(conn, namespace)

    def index_status(self, namespace: str, *, of: str = "index") -> str:
        """How the namespace's vector index (``of="index"``) or mirror (``"mirror"``) was obtained
        (``MemoryStore.index_status``, ``MemoryStore.mirror_status``)."""
        with self.locked():
            with self.db.transaction(write=False) as conn:
                self.mirrors.sync(conn)
                self.mirrors.get(conn, namespace)
            return (self.mirrors.index_state if of == "index" else self.mirrors.mirror_state)[namespace]

    def index_details(self, namespace: str) -> dict[str, Any]:
        """What the namespace's index holds now (``MemoryStore.index_details``)."""
        with self.locked():
            mirror = self.mirror(namespace)
            index = mirror.index
            state = self.mirrors.index_state.get(namespace)
            if isinstance(index, AdaptiveIndex):
                return {**index.status(), "obtained": state}
            details = {"kind": index.kind, "holds": "graph" if index.approximate else "exact", "items": len(mirror),
                       "working": False, "obtained": state}  # fmt: skip
            return {**details, **index.status()} if isinstance(index, PgVectorIndex) else details

    def wait_for_index(self, timeout: float | None) -> bool:
        """Wait for every loaded namespace's background index work; false when ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for mirror in self.mirrors.all():
            if isinstance(mirror.index, WORKING):
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not mirror.index.wait(left):
                    return False
        return True

    def resync(self) -> None:
        """Catch the mirrors up after another process wrote between this one's write and its apply."""
        with self.db.transaction(write=False) as conn:
            self.mirrors.sync(conn)

    def yield_to_writers(self) -> None:
        """Between two chunks of a bulk load on SQLite, leave the write lock free long enough for the
        other processes waiting for it (``connectors.db.begin_immediate`` polls every few milliseconds)
        to take their turns; PostgreSQL queues lock waiters in order, so it needs no pause."""
        if self.db.engine.dialect.name == "sqlite":
            time.sleep(BULK_PAUSE)

    def close(self) -> None:
        """Commit the deferred recall log rows, save changed indexes and mirror snapshots, and release the
        database. Idempotent. Rows that cannot be written are said in a ``StoreError``, after the rest is closed."""
        lost: Exception | None = None
        with self.lock:
            if self.closed:
                return
            waiting = self.db.deferred
            try:
                self.db.flush()
            except Exception as e:
                lost = e
            self.closed = True
            self._wake.notify_all()
            for mirror in self.mirrors.all():  # background index work stops at its next step
                if isinstance(mirror.index, WORKING):
                    mirror.index.close()
            try:
                self.mirrors.save(restamp=True)
            except Exception as e:  # derived data: losing it costs a rebuild, not memories
                log.warning("memory store: could not save the vector index or mirror (%s); rebuilt on open", e)
            finally:
                self.db.close()
        if lost is not None:
            raise StoreError(
                f"closing the memory store {redact_url(self.db.url)}: {waiting} recall log rows could not be written "
                f"({lost}); those recalls cannot be rated or explained (their memories and Q are unchanged)"
            ) from lost
