"""The one HEAD ledger under every versioned thing: prompt graphs and LoRA adapters.

Versions are immutable and content-addressed (:func:`content_address`); what changes is HEAD, a pointer
per key (``{"graph": …}`` for a prompt graph, ``{"run": …, "agent": …}`` for an agent's adapter). A
:class:`Ledger` names the three tables of one kind of version (its versions, its heads, its moves) and
does what both kinds do alike: read HEAD (under a row lock when a move follows), move it and record the
move with its reason, roll back to a target the caller picks, list the moves, and find the versions an
id prefix names. What differs stays with the caller: how a version is stored and loaded, where a
rollback goes by default, and what an unknown reference says.

Every method runs inside the caller's transaction; :func:`transaction` opens the write transaction and
runs it once more when a concurrent first write lost a unique-key race. The tables' names and columns
are those of existing databases (``prompt_heads``, ``adapter_head_moves``, …): :func:`head_tables`
builds them, so a backup or an older database reads the same.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Engine,
    Float,
    Integer,
    MetaData,
    Row,
    String,
    Table,
    Text,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from connectors.errors import ConfigError

log = logging.getLogger(__name__)

ID_CHARS = 16  # hex chars of the sha256 kept as the id: 64 bits, and a collision is checked on write
HEX = frozenset("0123456789abcdef")
NAME_CHARS = 200  # longest key value (a graph, run or agent name)
T = TypeVar("T")
Target = TypeVar("Target", bound="str | None")  # a rollback target: a version id, or None (an empty HEAD)
Key = Mapping[str, str]  # key column -> value, e.g. {"run": "nightly", "agent": "solver"}


def canonical_json(value: Any) -> str:
    """The one JSON spelling of ``value``: sorted keys, no spaces, ASCII only (lone surrogates survive)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def content_address(value: Any) -> str:
    """The id of a version whose content is ``value``: the first ``ID_CHARS`` hex digits of the sha256 of
    its canonical JSON, so the same content always gets the same id."""
    return hashlib.sha256(canonical_json(value).encode("ascii")).hexdigest()[:ID_CHARS]


def head_tables(metadata: MetaData, prefix: str, key: Sequence[str], *, may_be_empty: bool) -> tuple[Table, Table]:
    """The ``<prefix>_heads`` and ``<prefix>_head_moves`` tables of one kind of version.

    ``key`` names the columns that say whose HEAD a row is; the moves table indexes the first of them.
    ``may_be_empty`` lets HEAD point at no version (an adapter HEAD of None is the bare base model).
    """
    heads = Table(
        f"{prefix}_heads",
        metadata,
        *(Column(name, String(NAME_CHARS), primary_key=True) for name in key),
        Column("version", String(64), nullable=may_be_empty),
        Column("moved_at", Float, nullable=False),
    )
    moves = Table(
        f"{prefix}_head_moves",
        metadata,
        Column("seq", Integer, primary_key=True, autoincrement=True),  # ascending = older first
        *(
            Column(name, String(NAME_CHARS), nullable=False, index=True if i == 0 else None)
            for i, name in enumerate(key)
        ),
        Column("from_version", String(64), nullable=True),  # None: no HEAD before (or an empty one)
        Column("to_version", String(64), nullable=may_be_empty),
        Column("reason", Text, nullable=False),
        Column("at", Float, nullable=False),
    )
    return heads, moves


@dataclass(frozen=True)
class Ledger:
    """Where one kind of version keeps its HEADs and the record of every move.

    Example:
        >>> from sqlalchemy import MetaData, Table, Column, Integer, String
        >>> from connectors import make_engine
        >>> md = MetaData()
        >>> notes = Table("note_versions", md, Column("seq", Integer, primary_key=True),
        ...               Column("book", String(200)), Column("id", String(64)))
        >>> heads, moves = head_tables(md, "note", ["book"], may_be_empty=False)
        >>> ledger = Ledger(notes, heads, moves, noun="notes")
        >>> engine = make_engine("sqlite://")
        >>> md.create_all(engine)
        >>> key = {"book": "Carnet de bord — équipe de nuit"}
        >>> with engine.begin() as conn:
        ...     ledger.move(conn, key, None, "aaaa", "init")
        ...     ledger.move(conn, key, ledger.head(conn, key, lock=True), "bbbb", "commit")
        True
        True
        >>> with engine.connect() as conn:
        ...     [(m["from"], m["to"], m["reason"]) for m in ledger.history(conn, key)]
        [('aaaa', 'bbbb', 'commit'), (None, 'aaaa', 'init')]
    """

    versions: Table  # holds an ``id`` column, a ``seq`` column (ascending = older) and the key columns
    heads: Table  # from head_tables
    moves: Table  # from head_tables
    noun: str  # what the log lines call this kind of version: "prompt graph", "adapters"
    empty: str = "none"  # what the log lines call an empty HEAD: "base" for adapters

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The columns that say whose HEAD a row is, in table order."""
        return tuple(c.name for c in self.heads.primary_key.columns)

    def head(self, conn: Connection, key: Key, *, lock: bool = False) -> str | None:
        """HEAD's version id, or None when there is no HEAD yet (or an empty one).

        ``lock=True`` reads it ``FOR UPDATE`` (PostgreSQL), so a move decided on it cannot interleave
        with another writer's; SQLite's ``BEGIN IMMEDIATE`` (connectors.db) already serialises writers.
        """
        query = select(self.heads.c.version).where(*self._where(self.heads, self._full(key)))
        return conn.execute(query.with_for_update() if lock else query).scalar()

    def move(self, conn: Connection, key: Key, frm: str | None, to: str | None, reason: str) -> bool:
        """Point HEAD at ``to`` and record the move from ``frm`` (HEAD as read under the lock) with
        ``reason``; False, and nothing written, when HEAD is there already."""
        if frm == to:
            return False
        key, now = self._full(key), time.time()
        h = self.heads.c
        # Compare and set: HEAD must still be ``frm``. A row read as absent cannot be locked, so on PostgreSQL a
        # racing first move may have committed since; then this matches nothing, the insert collides on the
        # primary key, and ``transaction`` runs the move again from the HEAD the winner left.
        still = h.version.is_(None) if frm is None else h.version == frm
        moved = conn.execute(
            update(self.heads).where(*self._where(self.heads, key), still).values(version=to, moved_at=now)
        )
        if moved.rowcount == 0:  # the first move of this key (or a lost race: the insert below fails)
            conn.execute(insert(self.heads).values(**key, version=to, moved_at=now))
        conn.execute(insert(self.moves).values(**key, from_version=frm, to_version=to, reason=reason, at=now))
        log.info("%s: HEAD %s -> %s (%s)", self.label(key), frm or self.empty, to or self.empty, reason)
        return True

    def rollback(self, conn: Connection, key: Key, pick: Callable[[str | None], Target], reason: str) -> Target:
        """Move HEAD to ``pick(current HEAD)`` and return that target.

        ``pick`` is the caller's rule (a named version, HEAD's parent, the base model) and raises when
        there is nowhere to go; HEAD stays locked from the read to the move.
        """
        current = self.head(conn, key, lock=True)
        target = pick(current)
        self.move(conn, key, current, target, reason)
        return target

    def history(self, conn: Connection, key: Key, limit: int | None = None) -> list[dict[str, Any]]:
        """HEAD moves, newest first: ``{"from": id | None, "to": id | None, "reason": str, "at": unix time}``."""
        m = self.moves.c
        query = select(m.from_version, m.to_version, m.reason, m.at).where(*self._where(self.moves, self._full(key)))
        query = query.order_by(m.seq.desc())
        if limit is not None:
            query = query.limit(check_limit(limit))
        return [{"from": r[0], "to": r[1], "reason": r[2], "at": r[3]} for r in conn.execute(query)]

    def matches(self, conn: Connection, key: Key, prefix: str, *, limit: int) -> list[Row[Any]]:
        """Up to ``limit`` versions under ``key`` (which may name only some key columns) whose id starts
        with ``prefix`` (from :func:`id_prefix`), as rows of the key columns and ``id``, oldest first."""
        v = self.versions.c
        columns = [v[name] for name in self.key_columns] + [v.id]
        query = select(*columns).where(*self._where(self.versions, key), v.id.startswith(prefix))
        return list(conn.execute(query.order_by(v.seq).limit(limit)))

    def label(self, key: Key) -> str:
        """``noun`` and the key's values, as log lines name a HEAD: ``adapters 'nightly'/'solver'``."""
        return f"{self.noun} " + "/".join(repr(key[name]) for name in self.key_columns if name in key)

    def _full(self, key: Key) -> Key:
        if set(key) != set(self.key_columns):
            raise ConfigError(f"a {self.noun} HEAD is keyed by {list(self.key_columns)}, got {sorted(key)}")
        return key

    @staticmethod
    def _where(table: Table, key: Key) -> list[ColumnElement[bool]]:
        return [table.c[name] == value for name, value in key.items()]


def transaction(engine: Engine, fn: Callable[[Connection], T]) -> T:
    """``fn(conn)`` inside one write transaction, run once more when it lost a unique-key race.

    SQLite serialises writers (``BEGIN IMMEDIATE``); on PostgreSQL two first writes of one HEAD or one
    version can both find no row and both insert, and the loser's retry then sees the winner's rows.
    ``fn`` must be safe to run again (every write in this module is: content addresses, HEAD moves
    decided under the lock).
    """
    try:
        with engine.begin() as conn:
            return fn(conn)
    except IntegrityError:
        log.debug("a concurrent first write won a unique-key race; running the transaction again")
    with engine.begin() as conn:
        return fn(conn)


def id_prefix(ref: Any, what: str) -> str | None:
    """``ref`` as a lowercase id prefix, or None when it cannot name a version (empty, not hex).

    Raises:
        ConfigError: ``ref`` is not a str (``what`` names it: "a version id").
    """
    if not isinstance(ref, str):
        raise ConfigError(f"{what} is a str, got {type(ref).__name__}")
    key = ref.strip().lower()
    return key if key and set(key) <= HEX else None


def check_limit(limit: Any) -> int:
    """``limit`` for a listing: an int >= 0."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigError(f"limit must be an int >= 0, got {limit!r}")
    return limit


def check_text(value: Any, what: str) -> str:
    """``value`` when it is a str (a message or a reason); ConfigError names ``what`` otherwise."""
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a str, got {type(value).__name__}")
    return value
