"""The store's SQL side: the engine for a URL, and for a SQLite file one connection kept open.

A file store keeps one connection for its whole life (the store serialises every use under its lock),
which saves a pool checkout and reset per call and lets the connection carry a bigger page cache;
server databases (PostgreSQL) and in-memory SQLite check a connection out per transaction.

Example:
    >>> db = Database("sqlite://")
    >>> with db.transaction() as conn:
    ...     conn.exec_driver_sql("SELECT 1").scalar_one()
    1
    >>> db.close()
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from sqlalchemy import Connection, Engine
from sqlalchemy.pool import StaticPool

from connectors.db import make_engine, sqlite_path
from connectors.errors import ConfigError
from connectors.redact import redact_url
from memory.config import SERVER_INDEX_KINDS, IndexKind
from memory.sync import MirrorSet

SQLITE_CACHE_KIB = 65536


class Database:
    """An engine plus, once ``keep_connection`` is called on a SQLite file, its one kept connection."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = engine_for(url)
        self._conn: Connection | None = None

    def keep_connection(self) -> None:
        """Hold one connection for a SQLite file (no-op for other databases)."""
        if not (self.url.startswith("sqlite") and sqlite_path(self.url) is not None):
            return
        self._conn = self.engine.connect()
        raw = self._conn.connection.dbapi_connection
        assert raw is not None
        # A bigger page cache for this connection: inserts land in the id index at random places.
        raw.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")  # type: ignore[attr-defined]
        raw.execute("PRAGMA wal_autocheckpoint=10000")  # type: ignore[attr-defined]

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction (the caller serialises use of the kept connection)."""
        if self._conn is None:
            with self.engine.begin() as conn:
                yield conn
        else:
            with self._conn.begin():
                yield self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.engine.dispose()


def engine_for(url: str) -> Engine:
    if url.startswith("sqlite") and sqlite_path(url) is None:
        # One shared connection, or every thread would see its own empty in-memory database.
        return make_engine(url, poolclass=StaticPool)
    return make_engine(url)


def resolve_index(kind: IndexKind, db: Database) -> IndexKind:
    """The index kind a store on ``db`` uses: ``"auto"`` is ``"pgvector"`` on PostgreSQL (the database
    answers phase A, no process builds an index) and ``"flat"`` elsewhere."""
    postgres = db.engine.dialect.name == "postgresql"
    if kind == "auto":
        return "pgvector" if postgres else "flat"
    if kind in SERVER_INDEX_KINDS and not postgres:
        raise ConfigError(
            f"MemoryConfig.index={kind!r} needs a PostgreSQL database with pgvector (postgresql+psycopg://…), "
            f"got {redact_url(db.url)!r}; use 'auto', 'flat', 'hnsw' or 'ivf' here"
        )
    return kind


def mirror_set(db: Database, *, dim: int, kind: str, index_path: str | Path | None) -> MirrorSet:
    """The store's mirrors: with an in-process index (saved beside a SQLite file), or with one the
    database serves (``"pgvector"``)."""
    served = None
    if kind == "pgvector":
        from memory.pgvector import PgVectorIndex

        served = partial(PgVectorIndex, db.transaction, dim=dim)
    return MirrorSet(dim=dim, kind=kind, index_dir=index_dir(db.url, index_path), served_index=served)


def index_dir(url: str, index_path: str | Path | None) -> Path | None:
    """Where saved vector indexes live: ``index_path``, else ``<db file>.faiss`` beside a SQLite file."""
    if index_path is not None:
        return Path(index_path)
    path = sqlite_path(url) if url.startswith("sqlite") else None
    return path.with_name(path.name + ".faiss") if path is not None else None
