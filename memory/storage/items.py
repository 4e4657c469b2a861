"""Reading memories back from SQL: by id (the hot reads of a recall and a reward), all of them, and statistics.

Functions here take an open connection and return plain values; ``MemoryStore`` wraps them in its
lock and transaction. The recall log is read by ``memory.recall.log``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import Column, Connection, Select, bindparam, func, select
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError

from memory.storage.records import MemoryItem, item_from_row
from memory.storage.schema import intents, memory_items
from memory.storage.statements import chunks

ITEM_FIELDS = [c for c in memory_items.c if c.name not in ("embedding", "updated_gen")]
HISTOGRAM_BINS = 10
# Constant statements ``by_key`` runs (constants, so each is compiled once per dialect).
ITEM_SELECT = select(*ITEM_FIELDS)
ID_SELECT = select(memory_items.c.id, memory_items.c.namespace)
VALUES_SELECT = select(
    memory_items.c.id, memory_items.c.seq, memory_items.c.namespace, memory_items.c.q, memory_items.c.visits
)
ITEM_NAMES = tuple(c.name for c in ITEM_FIELDS)


def by_key(conn: Connection, stmt: Select[Any], key: Column[Any], values: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The rows of ``stmt`` (a constant SELECT without WHERE) whose ``key`` is one of ``values``, as plain
    tuples (JSON and booleans as stored: text and 0/1 on SQLite); one query per 5,000 values.

    On SQLite the SQL goes straight to the DB-API cursor: through SQLAlchemy Core a lookup of five rows
    by primary key costs ten times what SQLite spends on it (the hot reads of ``retrieve`` and ``reinforce``).
    """
    out: list[tuple[Any, ...]] = []
    if not (conn.dialect.name == "sqlite" and conn.dialect.positional):
        for part in chunks(list(values)):
            out.extend(tuple(r) for r in conn.execute(stmt.where(key.in_(part))))
        return out
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        for part in chunks(list(values)):
            sql = _in_sql(stmt, key, len(part), conn.dialect)
            out.extend(cursor.execute(sql, tuple(part)))
    except conn.dialect.loaded_dbapi.Error as e:  # the same exception types as through Core
        raise DBAPIError.instance(sql, tuple(part), e, conn.dialect.loaded_dbapi.Error) from e
    finally:
        cursor.close()
    return out


_IN_SQL: dict[tuple[int, int, int, str], tuple[str, Select[Any], Column[Any]]] = {}


def _in_sql(stmt: Select[Any], key: Column[Any], n: int, dialect: Dialect) -> str:
    """``stmt WHERE key IN (?, …)`` with ``n`` positional parameters, compiled by SQLAlchemy once per shape
    (no SQL text is assembled here; the statement and column are kept alive with their entry)."""
    cache_key = (id(stmt), id(key), n, dialect.name)
    found = _IN_SQL.get(cache_key)
    if found is None:
        where = stmt.where(key.in_([bindparam(f"k{i}") for i in range(n)]))
        found = (str(where.compile(dialect=dialect)), stmt, key)
        if len(_IN_SQL) < 1024:
            _IN_SQL[cache_key] = found
    return found[0]


def item_from_tuple(row: tuple[Any, ...]) -> MemoryItem:
    """A ``MemoryItem`` from an ``ITEM_SELECT`` row read by ``by_key`` (JSON and booleans either way)."""
    values = dict(zip(ITEM_NAMES, row, strict=True))
    if isinstance(values["meta"], str):
        values["meta"] = json.loads(values["meta"])
    values["success"] = None if values["success"] is None else bool(values["success"])
    return item_from_row(values)


def fetch_items(conn: Connection, ids: Sequence[str], namespace: str | None = None) -> list[MemoryItem]:
    """The memories with these ids (of ``namespace`` when given; others are left out), in the order asked."""
    # The namespace is checked here, not in SQL: given both, SQLite (3.40) picks the namespace index and
    # scans the whole namespace (70 ms at 100k) instead of looking up the few ids by primary key.
    found = {item.id: item for item in map(item_from_tuple, by_key(conn, ITEM_SELECT, memory_items.c.id, ids))}
    return [found[i] for i in ids if i in found and (namespace is None or found[i].namespace == namespace)]


def all_items(conn: Connection, namespace: str | None, *, valid_only: bool = False) -> list[MemoryItem]:
    """Every memory (of ``namespace``), oldest first; ``valid_only``: none that was superseded."""
    query = select(*ITEM_FIELDS).order_by(memory_items.c.seq)
    if namespace is not None:
        query = query.where(memory_items.c.namespace == namespace)
    if valid_only:
        query = query.where(memory_items.c.valid_to.is_(None))
    return [item_from_row(row) for row in conn.execute(query).mappings()]


def existing_ids(conn: Connection, ids: Sequence[str]) -> set[str]:
    return {r[0] for r in by_key(conn, ID_SELECT, memory_items.c.id, ids)}


def read_values(conn: Connection, ids: Sequence[str]) -> list[Any]:
    """``(id, seq, namespace, q, visits)`` rows, to refresh the mirror after an update."""
    return by_key(conn, VALUES_SELECT, memory_items.c.id, ids)


def stats(conn: Connection, namespace: str | None) -> dict[str, Any]:
    """Size, Q distribution, visits and intent groups of one namespace (or of all)."""
    query = select(memory_items.c.q, memory_items.c.visits, memory_items.c.valid_to.is_not(None))
    n_intents = select(func.count()).select_from(intents)
    if namespace is not None:
        query = query.where(memory_items.c.namespace == namespace)
        n_intents = n_intents.where(intents.c.namespace == namespace)
    rows = conn.execute(query).all()
    q = np.array([r[0] for r in rows], dtype=np.float64)
    visits = np.array([r[1] for r in rows], dtype=np.int64)
    namespaces = conn.execute(select(func.count(func.distinct(memory_items.c.namespace)))).scalar_one()
    out: dict[str, Any] = {
        "namespace": namespace,
        "count": len(rows),
        "intents": int(conn.execute(n_intents).scalar_one()),
        "namespaces": int(namespaces) if namespace is None else 1,
        "superseded": sum(bool(r[2]) for r in rows),
        "q": {"mean": None, "std": None, "min": None, "max": None, "histogram": {"edges": [], "counts": []}},
        "visits": {"total": int(visits.sum()), "mean": None, "max": None, "never_visited": int((visits == 0).sum())},
    }
    if len(rows):
        counts, edges = np.histogram(q, bins=HISTOGRAM_BINS)
        out["q"] = {
            "mean": float(q.mean()),
            "std": float(q.std()),
            "min": float(q.min()),
            "max": float(q.max()),
            "histogram": {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]},
        }
        out["visits"].update(mean=float(visits.mean()), max=int(visits.max()))
    return out
