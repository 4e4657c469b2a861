"""PostgreSQL advisory locks: a named lock that lives exactly as long as the connection holding it.

``pg_try_advisory_lock`` takes a session-level lock owned by one database connection; the server
frees it on ``pg_advisory_unlock``, when the connection closes, and when the holding process dies
(its socket closes), so a crashed holder never makes the next one wait. A host that vanishes without
closing its socket keeps the lock until the server notices the dead connection: set TCP keepalives
(``keepalives_idle`` in the URL's query) or ``idle_session_timeout`` to bound that.

Names map to a stable signed 64-bit key (``advisory_key``); locks are per database.

Example:
    >>> advisory_key("lease:nightly") == advisory_key("lease:nightly")
    True
    >>> -(2**63) <= advisory_key("anything") < 2**63
    True
"""

from __future__ import annotations

import hashlib
import logging
import threading

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger(__name__)

KEY_PREFIX = "evolve:"
_THE_LOCK = (
    "locktype = 'advisory' AND granted AND objsubid = 1 AND classid = CAST(:hi AS oid)"
    " AND objid = CAST(:lo AS oid) AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
HOLDERS_SQL = text(f"SELECT pid FROM pg_locks WHERE {_THE_LOCK}")
HELD_HERE_SQL = text(f"SELECT EXISTS (SELECT 1 FROM pg_locks WHERE {_THE_LOCK} AND pid = pg_backend_pid())")


def advisory_key(name: str) -> int:
    """The lock key of ``name``: the first 8 bytes of sha256("evolve:" + name), as a signed bigint."""
    digest = hashlib.sha256((KEY_PREFIX + name).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def is_postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


class AdvisoryLock:
    """A session-level advisory lock on a connection of its own (detached from the engine's pool, so
    a dropped lock object never leaves a pooled connection holding the lock).

    Args:
        engine: a PostgreSQL engine.
        name: what the lock guards; equal names on one database exclude each other.

    Example:
        >>> lock = AdvisoryLock(engine, "lease:nightly")  # doctest: +SKIP
        >>> lock.try_acquire(), AdvisoryLock(engine, "lease:nightly").try_acquire()  # doctest: +SKIP
        (True, False)
    """

    def __init__(self, engine: Engine, name: str) -> None:
        self.engine = engine
        self.name = name
        self.key = advisory_key(name)
        unsigned = self.key & 0xFFFFFFFFFFFFFFFF  # pg_locks shows the key as two unsigned 32-bit halves
        self._hi, self._lo = unsigned >> 32, unsigned & 0xFFFFFFFF
        self._conn: Connection | None = None
        self._mutex = threading.Lock()  # a heartbeat thread checks while the owner may release

    def try_acquire(self) -> bool:
        """Take the lock without waiting; True when it is now held here (also when it already was)."""
        with self._mutex:
            if self._conn is not None:
                if self._still_held():
                    return True
                self._close()
            conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            conn.detach()  # closing it closes the database session, which frees the lock
            try:
                got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": self.key}).scalar_one())
            except BaseException:
                conn.close()
                raise
            if not got:
                conn.close()
                return False
            self._conn = conn
            return True

    def held(self) -> bool:
        """Whether this object's connection still holds the lock (False once the connection is lost)."""
        with self._mutex:
            if self._conn is None:
                return False
            if self._still_held():
                return True
            self._close()
            return False

    def release(self) -> bool:
        """Give the lock up and close its connection; True when it was held here."""
        with self._mutex:
            if self._conn is None:
                return False
            try:
                was = bool(self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self.key}).scalar_one())
            except SQLAlchemyError as e:  # the connection is gone, and with it the lock
                log.warning("advisory lock %s: unlock failed (%s); closing its connection frees it", self.name, e)
                was = False
            self._close()
            return was

    def holders(self, conn: Connection) -> list[int]:
        """Server process ids of the sessions holding this lock now (any connection of the database)."""
        return [int(r[0]) for r in conn.execute(HOLDERS_SQL, {"hi": self._hi, "lo": self._lo})]

    def _still_held(self) -> bool:
        assert self._conn is not None
        try:
            return bool(self._conn.execute(HELD_HERE_SQL, {"hi": self._hi, "lo": self._lo}).scalar_one())
        except SQLAlchemyError as e:
            log.warning("advisory lock %s: its connection failed (%s); the lock is lost", self.name, e)
            return False

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except SQLAlchemyError:
                pass
            self._conn = None

    def __repr__(self) -> str:
        return f"AdvisoryLock({self.name!r}, key={self.key}, held={self._conn is not None})"


__all__ = ["AdvisoryLock", "advisory_key", "is_postgres"]
