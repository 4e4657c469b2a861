"""One SQLAlchemy engine factory for every store.

SQLite (the embedded default) gets WAL, a busy timeout and foreign keys on every connection, so
several processes can share one file; any other SQLAlchemy URL (``postgresql+psycopg://…``, with the
``pg`` extra) is passed through.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event

from connectors.errors import ConfigError
from connectors.redact import redact, redact_url

BUSY_TIMEOUT_MS = 30_000


def evolve_home() -> Path:
    """Where Evolve keeps its files: ``$EVOLVE_HOME``, else ``~/.evolve``. Nothing is created here."""
    return Path(os.environ.get("EVOLVE_HOME") or Path.home() / ".evolve")


def default_url() -> str:
    return f"sqlite:///{evolve_home() / 'evolve.db'}"


def make_engine(url: str | None = None, **kwargs: Any) -> Engine:
    """An engine for ``url`` (default: ``sqlite:///<EVOLVE_HOME>/evolve.db``).

    Example:
        >>> engine = make_engine("sqlite://")   # in memory
        >>> engine.dialect.name
        'sqlite'
    """
    url = url or default_url()
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(
            f"database URL must look like 'sqlite:///path.db' or 'postgresql+psycopg://…', got {redact_url(url)!r}"
        )
    if url.startswith("sqlite"):
        return _sqlite_engine(url, **kwargs)
    try:
        return create_engine(url, pool_pre_ping=True, **kwargs)
    except ImportError as e:  # the driver is imported here, not when the module is
        extra = " (pip install 'evolve[pg]')" if url.startswith("postgresql") else ""
        raise ConfigError(f"the database driver for {redact_url(url)!r} is not installed{extra}: {redact(e)}") from None
    except Exception as e:
        # from None: SQLAlchemy's own message may quote the URL with its password
        raise ConfigError(f"cannot create a database engine for {redact_url(url)!r}: {redact(e)}") from None


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL, or None for an in-memory database."""
    path = url.split(":///", 1)[1] if ":///" in url else ""
    return Path(path) if path and path != ":memory:" else None


def _sqlite_engine(url: str, **kwargs: Any) -> Engine:
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    connect_args = {"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False}
    connect_args.update(kwargs.pop("connect_args", {}))
    engine = create_engine(url, connect_args=connect_args, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # pysqlite's own transaction handling is turned off so that the "begin" hook below decides.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        if path is not None:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # IMMEDIATE takes the write lock up front (waiting up to busy_timeout), so a transaction that
        # reads then writes never fails half-way with SQLITE_BUSY when another process wrote first.
        # Hot reads are served from the in-memory mirror, so serialising transactions costs little.
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
