"""Leases: a row in the database that one holder at a time may own, for a while.

A lease stops two processes doing the same work at once (two ``evolve job`` runs evolving one agent).

SQLite: taking one is atomic because every transaction begins IMMEDIATE (see ``connectors.db``):
insert the row (a unique-key violation means someone has it), else take it with a conditional
``UPDATE … WHERE name = :n AND (expires_at < :now OR holder = :me)`` and check the row count. A
holder that dies stops renewing, its lease expires after ``ttl`` seconds, and the next ``acquire``
takes it over.

PostgreSQL: the lease is a session-level advisory lock (``connectors.pglock``) held on a connection
of the lease's own, so a holder that dies frees it at once — its connection closes — with no ``ttl``
wait; the row is still written and renewed, as the ledger of who holds it. A holder that hangs with
its connection open keeps the lease (its heartbeat stops, and ``state()`` shows it going stale).

Clocks are the hosts' wall clocks: hosts sharing a server database should keep them in sync (NTP) to
well under ``ttl``.

Example:
    >>> from connectors import make_engine
    >>> engine = make_engine("sqlite://")
    >>> a, b = Lease(engine, "nightly", holder="a", ttl=60), Lease(engine, "nightly", holder="b", ttl=60)
    >>> a.acquire(), b.acquire()
    (True, False)
    >>> a.release(), b.acquire()
    (True, True)
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Column, Engine, Float, MetaData, String, Table, delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError, SQLAlchemyError

from connectors import ConfigError, StoreError
from connectors.db import for_reads
from connectors.pglock import AdvisoryLock, is_postgres

log = logging.getLogger(__name__)

DEFAULT_TTL = 300.0
"""Seconds a lease lasts unrenewed: how long a killed job can block the next one."""

metadata = MetaData()

leases = Table(
    "evolve_leases",
    metadata,
    Column("name", String(300), primary_key=True),
    Column("holder", String(200), nullable=False),
    Column("acquired_at", Float, nullable=False),
    Column("renewed_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
)


@dataclass(frozen=True)
class LeaseState:
    """A lease row as stored: who holds it, since when, and until when unless renewed."""

    name: str
    holder: str
    acquired_at: float
    renewed_at: float
    expires_at: float


def default_holder() -> str:
    """``host:pid:random``: names the process in the ledger, and differs between two jobs in one process."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def when(t: float) -> str:
    """A timestamp as local time, to the second, for messages."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def create_tables(engine: Engine, meta: MetaData) -> None:
    """Create ``meta``'s tables if missing; safe when several processes start on a new database at once."""
    for attempt in range(3):
        try:
            with engine.begin() as conn:
                meta.create_all(conn, checkfirst=True)
            return
        except (OperationalError, ProgrammingError, IntegrityError) as e:  # another process created them first
            if attempt == 2:
                raise StoreError(f"cannot create the tables {sorted(meta.tables)} in {engine.url!r}: {e}") from e


class Lease:
    """A named lease in ``engine``'s database, held by ``holder`` for ``ttl`` seconds at a time.

    Args:
        engine: the database (the lease table is created on first use).
        name: what the lease guards (``evolve:<run>`` for jobs).
        holder: who takes it (default ``host:pid:random``); a holder may re-acquire its own lease.
        ttl: seconds until an unrenewed lease may be taken over.
        clock: the time source (tests move it to expire a lease without waiting).

    Example:
        >>> from connectors import make_engine
        >>> lease = Lease(make_engine("sqlite://"), "evolve:support", ttl=30)
        >>> lease.acquire() and lease.renew()
        True
    """

    def __init__(
        self,
        engine: Engine,
        name: str,
        *,
        holder: str | None = None,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(name, str) or not name or len(name) > 300:
            raise ConfigError(f"a lease name is a string of 1-300 characters, got {name!r:.80}")
        if not isinstance(ttl, (int, float)) or not (ttl > 0 and math.isfinite(ttl)):
            raise ConfigError(f"a lease ttl is a positive number of seconds, got {ttl!r}")
        holder = default_holder() if holder is None else holder
        if not isinstance(holder, str) or not holder or len(holder) > 200:
            raise ConfigError(f"a lease holder is a string of 1-200 characters, got {holder!r:.80}")
        self.engine = engine
        self.name = name
        self.holder = holder
        self.ttl = float(ttl)
        self.clock = clock
        self._lock = AdvisoryLock(engine, f"lease:{name}") if is_postgres(engine) else None
        create_tables(engine, metadata)

    def acquire(self) -> bool:
        """Take the lease if it is free, expired or already ours; False when someone else holds it.

        On PostgreSQL "free" means no live connection holds its advisory lock; a row left by a dead
        holder is taken over whatever its expiry says.
        """
        if self._lock is not None:
            return self._acquire_advisory(self._lock)
        for _ in range(2):  # a second try covers a lease released between our insert and our update
            now = self.clock()
            row = {"holder": self.holder, "acquired_at": now, "renewed_at": now, "expires_at": now + self.ttl}
            try:
                with self.engine.begin() as conn:
                    conn.execute(insert(leases).values(name=self.name, **row))
                return True
            except IntegrityError:
                pass  # the row exists: take it only if it expired or is ours
            mine_or_expired = or_(leases.c.expires_at < now, leases.c.holder == self.holder)
            with self.engine.begin() as conn:
                taken = conn.execute(update(leases).where(leases.c.name == self.name, mine_or_expired).values(**row))
            if taken.rowcount == 1:
                return True
            if self.state() is not None:
                return False
        return False

    def _acquire_advisory(self, lock: AdvisoryLock) -> bool:
        if not lock.try_acquire():
            return False
        now = self.clock()
        row = {"holder": self.holder, "acquired_at": now, "renewed_at": now, "expires_at": now + self.ttl}
        with self.engine.begin() as conn:  # the lock is ours: any row left belongs to a holder that is gone
            if conn.execute(update(leases).where(leases.c.name == self.name).values(**row)).rowcount == 0:
                conn.execute(insert(leases).values(name=self.name, **row))
        return True

    def renew(self) -> bool:
        """Push the expiry ``ttl`` seconds on; False when the lease is no longer ours (it was taken over,
        or on PostgreSQL its connection, and with it the lock, was lost)."""
        if self._lock is not None and not self._lock.held():
            return False
        now = self.clock()
        with self.engine.begin() as conn:
            done = conn.execute(
                update(leases)
                .where(leases.c.name == self.name, leases.c.holder == self.holder)
                .values(renewed_at=now, expires_at=now + self.ttl)
            )
        return done.rowcount == 1

    def release(self) -> bool:
        """Give the lease up if it is ours (another holder's lease is left alone); True when it was."""
        if self._lock is not None:
            self._lock.release()
        with self.engine.begin() as conn:
            done = conn.execute(delete(leases).where(leases.c.name == self.name, leases.c.holder == self.holder))
        return done.rowcount == 1

    def state(self) -> LeaseState | None:
        """The lease row as it is now (whoever holds it), or None when nobody does.

        On PostgreSQL a row whose advisory lock no connection holds is a dead holder's: None.
        """
        with for_reads(self.engine).connect() as conn:
            row = conn.execute(select(leases).where(leases.c.name == self.name)).mappings().first()
            if row is not None and self._lock is not None and not self._lock.holders(conn):
                return None
        return LeaseState(**row) if row is not None else None

    def heartbeat(self, interval: float | None = None) -> Heartbeat:
        """A ``Heartbeat`` that renews this lease every ``interval`` seconds (default ``ttl / 3``)."""
        return Heartbeat(self, interval=interval)

    def __repr__(self) -> str:
        return f"Lease({self.name!r}, holder={self.holder!r}, ttl={self.ttl})"


class Heartbeat:
    """Renews a held lease on a daemon thread while work runs; notices when it was taken over.

    A renewal that fails on a database error is logged and retried at the next beat; one that finds
    another holder sets ``lost`` and stops (the work is not interrupted: the caller decides).

    Example:
        >>> from connectors import make_engine
        >>> lease = Lease(make_engine("sqlite:///:memory:"), "demo", ttl=30)
        >>> lease.acquire()
        True
        >>> with lease.heartbeat() as beat:
        ...     pass  # the work
        >>> beat.lost
        False
    """

    def __init__(self, lease: Lease, *, interval: float | None = None) -> None:
        self.lease = lease
        self.interval = lease.ttl / 3 if interval is None else float(interval)
        if not self.interval > 0:
            raise ConfigError(f"a heartbeat interval is a positive number of seconds, got {interval!r}")
        self.lost_at: float | None = None
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat {lease.name}", daemon=True)

    @property
    def lost(self) -> bool:
        """Whether a renewal found the lease held by someone else."""
        return self._lost.is_set()

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block until the lease is found lost (True) or ``timeout`` seconds pass (False)."""
        return self._lost.wait(timeout)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                held = self.lease.renew()
            except SQLAlchemyError as e:
                log.warning("lease %s: renewal failed (%s); retrying in %.1f s", self.lease.name, e, self.interval)
                continue
            if not held:
                self.lost_at = time.time()
                self._lost.set()
                log.warning("lease %s was lost: %s no longer holds it", self.lease.name, self.lease.holder)
                return


__all__ = ["DEFAULT_TTL", "Heartbeat", "Lease", "LeaseState", "create_tables", "default_holder", "when"]
