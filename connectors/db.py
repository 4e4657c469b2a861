"""One SQLAlchemy engine factory for every store, and what a storage fault means to its caller.

SQLite (the embedded default) gets WAL, a busy timeout and foreign keys on every connection, so
several processes can share one file, and a new file 8 KiB pages (``PAGE_SIZE``). A transaction begins
``IMMEDIATE`` (it takes the write lock up front) unless its connection carries the execution option
``sqlite_begin="DEFERRED"``: such a read takes no lock and never waits for a writer (under WAL it sees
the last commit). A file that cannot be written (read-only media, no permission) is opened read-only.
Any other SQLAlchemy URL (``postgresql+psycopg://…``, with the ``pg`` extra) is passed through.

``storage_faults`` turns a full disk, a read-only database, a lock held too long, an I/O error or a
file that cannot be opened into a ``StoreError`` that names the cause and the database.
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, unquote

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError

from connectors.errors import ConfigError, StoreError
from connectors.install import extra_hint
from connectors.redact import redact, redact_url

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000
POLL_BUSY_MS = 1  # SQLite's own wait inside one try of BEGIN IMMEDIATE (begin_immediate polls around it)
POLL_SECONDS = 0.003  # the mean pause between two tries
SQLITE_BUSY, SQLITE_LOCKED = 5, 6
Durability = Literal["normal", "full"]
DURABILITY_LEVELS: tuple[str, ...] = ("normal", "full")
BEGIN_MODES: tuple[str, ...] = ("IMMEDIATE", "DEFERRED")
# The page size of a new SQLite file (an existing one keeps its own). An intent key's row (a 384-d float32
# vector, 1,536 bytes, plus ~90) fits twice in 4,096 bytes, leaving a fifth of the memory_intents table
# empty; five rows fill 8,192 to 99% (bench.memory_speed at 10k: database 2,519 -> 2,117 bytes per item).
PAGE_SIZE = 8192

# What failed when the storage, not the call, failed: SQLite primary result codes
# (https://sqlite.org/rescode.html) and PostgreSQL SQLSTATEs (errcodes-appendix.html).
SQLITE_FAULTS = {13: "disk full", 8: "read-only", 5: "locked", 6: "locked", 10: "I/O error", 14: "cannot open"}
POSTGRES_FAULTS = {"53100": "disk full", "25006": "read-only", "55P03": "locked", "58030": "I/O error"}
FAULT_ADVICE = {
    "disk full": "cannot grow; the transaction was rolled back. Free space on its disk (or raise its quota), then retry",
    "read-only": (
        "cannot be written: it is on read-only media, lacks write permission, or the server refuses writes; "
        "reads still work. Open a writable copy to change it"
    ),
    "locked": (
        "stayed locked by another writer longer than the wait allows; the transaction was rolled back. Retry, "
        "or find the process holding a long write transaction"
    ),
    "I/O error": (
        "hit an I/O error on its disk. Check the device and the file (PRAGMA integrity_check on SQLite); "
        "restore a backup if it is damaged"
    ),
    "cannot open": (
        "cannot be opened. Check that the file and its folder exist and can be read; a WAL database on "
        "read-only media whose -wal file holds commits also needs its -shm file"
    ),
}


def evolve_home() -> Path:
    """Where Evolve keeps its files: ``$EVOLVE_HOME``, else ``~/.evolve``. Nothing is created here."""
    return Path(os.environ.get("EVOLVE_HOME") or Path.home() / ".evolve")


def default_url() -> str:
    return f"sqlite:///{evolve_home() / 'evolve.db'}"


def make_engine(url: str | None = None, *, durability: Durability = "normal", **kwargs: Any) -> Engine:
    """An engine for ``url`` (default: ``sqlite:///<EVOLVE_HOME>/evolve.db``).

    Args:
        url: a SQLAlchemy URL; ``"sqlite://"`` is in memory, ``sqlite:///file:PATH?mode=ro&uri=true`` read-only.
        durability: what a commit survives. ``"normal"``: SQLite runs ``synchronous=NORMAL`` under WAL
            (an application or process crash loses nothing; a power loss or OS crash may lose the last
            commits, never corrupts); PostgreSQL keeps the server's ``synchronous_commit``. ``"full"``:
            SQLite ``synchronous=FULL`` and PostgreSQL ``synchronous_commit=on`` for this engine's
            sessions: a committed transaction survives a power loss. Other servers keep their settings.
        kwargs: passed to ``sqlalchemy.create_engine``.

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
    if durability not in DURABILITY_LEVELS:
        raise ConfigError(f"durability must be one of {DURABILITY_LEVELS}, got {durability!r}")
    if url.startswith("sqlite"):
        return _sqlite_engine(url, durability, **kwargs)
    try:
        engine = create_engine(url, pool_pre_ping=True, **kwargs)
    except ImportError as e:  # the driver is imported here, not when the module is
        extra = f" ({extra_hint('pg')})" if url.startswith("postgresql") else ""
        raise ConfigError(f"the database driver for {redact_url(url)!r} is not installed{extra}: {redact(e)}") from None
    except Exception as e:
        # from None: SQLAlchemy's own message may quote the URL with its password
        raise ConfigError(f"cannot create a database engine for {redact_url(url)!r}: {redact(e)}") from None
    if durability == "full" and engine.dialect.name == "postgresql":
        event.listen(engine, "connect", _synchronous_commit_on)
    return engine


def _synchronous_commit_on(dbapi_conn: Any, _record: Any) -> None:
    # Outside any transaction, so the setting holds for the session (a pool reset only rolls back).
    autocommit = dbapi_conn.autocommit
    dbapi_conn.autocommit = True
    cur = dbapi_conn.cursor()
    cur.execute("SET synchronous_commit = on")
    cur.close()
    dbapi_conn.autocommit = autocommit


def for_reads(engine: Engine) -> Engine:
    """``engine`` for reads only: on SQLite its transactions begin DEFERRED, so a read takes no lock and never
    queues behind a writer (under WAL it sees the last commit); a plain ``engine.connect()`` begins IMMEDIATE,
    and each read would wait for every write. Other databases: the same engine's behaviour."""
    return engine.execution_options(sqlite_begin="DEFERRED")


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL (``sqlite:///PATH`` or ``sqlite:///file:PATH?…&uri=true``), or None
    for an in-memory database."""
    rest = url.split(":///", 1)[1] if ":///" in url else ""
    path, _, query = rest.partition("?")  # SQLAlchemy reads what follows "?" as the URL's query
    if path.startswith("file:") and "uri=true" in query:
        if "mode=memory" in query:
            return None
        path = unquote(path[len("file:") :])
        if path.startswith("//"):  # file://host/path: drop the (empty or local) authority
            path = path[path.find("/", 2) :] if "/" in path[2:] else ""
    return Path(path) if path and path != ":memory:" else None


def writable(path: Path) -> bool:
    """Whether this process may write ``path`` (false on read-only media, for root too)."""
    return os.access(path, os.W_OK)


def read_only_url(path: Path, *, immutable: bool = False) -> str:
    """A URL that opens the SQLite file at ``path`` read-only. ``immutable`` also tells SQLite that nobody
    changes the file, so it needs no -shm file (for read-only media, whose folder cannot hold one)."""
    return f"sqlite:///file:{quote(str(path))}?mode=ro{'&immutable=1' if immutable else ''}&uri=true"


def opened_read_only(engine: Engine) -> bool:
    """Whether ``engine`` opens its SQLite file read-only (``mode=ro`` or ``immutable=1``)."""
    query = engine.url.query
    return engine.dialect.name == "sqlite" and (query.get("mode") == "ro" or query.get("immutable") == "1")


def server_read_only(engine: Engine) -> bool:
    """Whether a PostgreSQL server refuses this engine's writes (a read-only database, a standby); False for
    any other database."""
    if engine.dialect.name != "postgresql":
        return False
    with engine.connect() as conn:
        return str(conn.exec_driver_sql("SHOW transaction_read_only").scalar_one()) == "on"


def _sqlite_engine(url: str, durability: Durability, **kwargs: Any) -> Engine:
    path = sqlite_path(url)
    if path is not None and "uri=true" not in url and path.exists() and not (writable(path) and writable(path.parent)):
        url = read_only_url(path, immutable=not writable(path.parent) and not _in_use(path))
        log.info("memory database %s cannot be written: opened read-only", path)
    elif path is not None and "mode=ro" not in url:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(
                f"cannot create the folder {str(path.parent)!r} for the database {redact_url(url)!r}: {e.strerror}; "
                "create it or choose a writable place"
            ) from e
    connect_args = {"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False}
    connect_args.update(kwargs.pop("connect_args", {}))
    engine = create_engine(url, connect_args=connect_args, **kwargs)
    pragmas = (
        []
        if path is None or opened_read_only(engine)
        else [f"page_size={PAGE_SIZE}", "journal_mode=WAL", f"synchronous={durability.upper()}"]
    )  # page_size before WAL: a WAL file's page size can no longer change
    pragmas += [f"busy_timeout={BUSY_TIMEOUT_MS}", "foreign_keys=ON"]

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # pysqlite's own transaction handling is turned off so that the "begin" hook below decides.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        for pragma in pragmas:
            cur.execute(f"PRAGMA {pragma}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # IMMEDIATE takes the write lock up front (waiting up to the busy timeout), so a transaction that
        # reads then writes never fails half-way with SQLITE_BUSY when another process wrote first.
        # A read says DEFERRED: it takes no lock, so a long write elsewhere does not hold it up.
        mode = conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")
        if mode not in BEGIN_MODES:
            raise ConfigError(f"the execution option sqlite_begin must be one of {BEGIN_MODES}, got {mode!r}")
        if mode == "IMMEDIATE":
            begin_immediate(conn.connection.dbapi_connection, BUSY_TIMEOUT_MS / 1000)
        else:
            conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


def begin_immediate(raw: Any, timeout: float) -> None:
    """``BEGIN IMMEDIATE`` on a pysqlite connection, waiting for the write lock up to ``timeout`` seconds
    in polls a few milliseconds apart.

    SQLite's own busy handler backs off to one try per 100 ms, so a waiter would miss a lock that a
    long writer (a bulk load between two chunks) leaves free for less than that, and several waiters
    miss it in turn; polling this often, every waiter gets its turn in a short gap.
    """
    deadline = time.monotonic() + timeout
    raw.execute(f"PRAGMA busy_timeout={POLL_BUSY_MS}")
    try:
        while True:
            try:
                raw.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as e:
                busy = (getattr(e, "sqlite_errorcode", 0) & 0xFF) in (SQLITE_BUSY, SQLITE_LOCKED)
                if not busy or time.monotonic() >= deadline:  # the same exception type as through Core
                    raise DBAPIError.instance("BEGIN IMMEDIATE", (), e, sqlite3.Error) from e
                time.sleep(random.uniform(0.5, 1.5) * POLL_SECONDS)
    finally:
        raw.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")


def _in_use(path: Path) -> bool:
    """Whether a WAL database may be open elsewhere or hold commits outside the file: its -shm file
    exists, or a non-empty -wal. Only a database in neither state may be opened ``immutable``."""
    wal, shm = path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")
    return shm.exists() or (wal.exists() and wal.stat().st_size > 0)


def storage_fault(error: BaseException) -> str | None:
    """What storage condition a database error reports: ``"disk full"``, ``"read-only"``, ``"locked"``,
    ``"I/O error"``, ``"cannot open"``, or None when it is not a storage fault (a bad statement, a
    constraint)."""
    orig = error.orig if isinstance(error, DBAPIError) else error
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int):
        return SQLITE_FAULTS.get(code & 0xFF)  # an extended code carries the primary one in its low byte
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return POSTGRES_FAULTS.get(state) if isinstance(state, str) else None


def storage_error(error: DBAPIError, url: object) -> StoreError | None:
    """The ``StoreError`` a storage fault becomes (its cause, the database, what to do), else None."""
    cause = storage_fault(error)
    if cause is None:
        return None
    return StoreError(f"{cause}: the database {redact_url(url)!r} {FAULT_ADVICE[cause]} ({redact(error.orig)})")


@contextmanager
def storage_faults(url: object) -> Iterator[None]:
    """Raise a storage fault inside the block as a ``StoreError`` (the driver's error chained); any
    other error passes unchanged.

    Example:
        >>> with storage_faults("sqlite:///x.db"):
        ...     pass
    """
    try:
        yield
    except DBAPIError as e:
        error = storage_error(e, url)
        if error is None:
            raise
        raise error from e


def check_chars(name: str, value: str) -> str:
    """``value`` unchanged when every database can store it: no NUL and no lone surrogate.

    PostgreSQL refuses NUL in text and JSON, and a lone surrogate (``"\\ud800"``) has no UTF-8
    encoding, so both are refused on every backend (a store behaves the same on SQLite and PostgreSQL).
    """
    if "\x00" in value:
        raise ConfigError(f"{name} must not contain NUL characters (\\x00), got {value!r:.120}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ConfigError(
            f"{name} must be valid Unicode text, got a lone surrogate {value[e.start]!r} at position {e.start}"
        ) from None
    return value
