"""Reading the store back: items, the recall log (``explain``), statistics, and feedback lookups.

Functions here take an open connection and return plain values; ``MemoryStore`` wraps them in its
lock and transaction.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sqlalchemy import Column, Connection, Select, bindparam, func, insert, select
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError

from connectors.errors import ConfigError, StoreError
from memory.config import RetrievalConfig
from memory.mirror.arrays import NamespaceMirror
from memory.mirror.sync import MirrorSet
from memory.recall_log import candidates_of, gone_message, pack_plan
from memory.records import ItemCache, MemoryItem, Recall, item_from_row
from memory.retrieval import Plan, Planner
from memory.schema import feedback, intents, memory_items, recalls
from memory.statements import chunks, execute_many

SELECT_ATTEMPTS = 3  # catch-ups before a recall whose memories keep disappearing gives up
RECALL_INSERT = insert(recalls)
ITEM_FIELDS = [c for c in memory_items.c if c.name not in ("embedding", "updated_gen")]
HISTOGRAM_BINS = 10
# Constant statements ``by_key`` runs (constants, so each is compiled once per dialect).
ITEM_SELECT = select(*ITEM_FIELDS)
ID_SELECT = select(memory_items.c.id, memory_items.c.namespace)
VALUES_SELECT = select(
    memory_items.c.id, memory_items.c.seq, memory_items.c.namespace, memory_items.c.q, memory_items.c.visits
)
FEEDBACK_SELECT = select(feedback.c.id)
LOGGED_SELECT = select(recalls.c.id, recalls.c.namespace, recalls.c.candidates)
HEAD_FIELDS = [c for c in recalls.c if c.name != "candidates"]
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


def feedback_applied(conn: Connection, feedback_ids: Sequence[str]) -> set[str]:
    """Which of these feedback ids were applied before (one query per 5,000 ids)."""
    return {r[0] for r in by_key(conn, FEEDBACK_SELECT, feedback.c.id, list(dict.fromkeys(feedback_ids)))}


def recall_targets(
    conn: Connection, recall: Recall | str, namespace: str | None
) -> tuple[str, str, list[str], np.ndarray]:
    """The recall's id and namespace, and its selected item ids (best first) with their selection
    scores, checked to belong
    to ``namespace``: a recall id is looked up in the log of that namespace (``None``: ``"default"``); a
    ``Recall`` object must be its own namespace's (and ``namespace``'s when given) and match the log.

    A ``Recall`` made with ``record=False`` has no log: its items must then all be memories of its
    namespace (items removed since are skipped later, as for any recall).
    """
    if isinstance(recall, Recall):
        if namespace is not None and recall.namespace != namespace:
            raise StoreError(
                f"recall {recall.id!r} was made in namespace {recall.namespace!r}, not {namespace!r}; "
                "a recall can only reinforce memories of the namespace it was made in"
            )
        logged = logged_recall(conn, recall.id, recall.namespace)
        if logged is not None:
            if tuple(logged[0]) != recall.ids:
                raise StoreError(
                    f"recall {recall.id!r} lists memories {list(recall.ids)!r:.200} but the log selected "
                    f"{logged[0]!r:.200}; pass the Recall that retrieve returned, or its id"
                )
            return recall.id, recall.namespace, logged[0], logged[1]
        foreign = foreign_ids(conn, recall.ids, recall.namespace)
        if foreign:
            raise StoreError(
                f"recall {recall.id!r} (namespace {recall.namespace!r}) lists memories outside its namespace: "
                f"{sorted(foreign)!r:.200}"
            )
        return recall.id, recall.namespace, list(recall.ids), np.asarray(recall.scores, dtype=np.float64)
    if not isinstance(recall, str):
        raise ConfigError(f"reinforce takes a Recall or a recall id (str), got {type(recall).__name__}")
    ns = namespace if namespace is not None else "default"
    logged = logged_recall(conn, recall, ns)
    if logged is None:
        raise StoreError(
            gone_message(conn, recall, ns, "reinforced")
            or f"unknown recall id {recall!r} in namespace {ns!r}: no recall with this id was logged there "
            "(pass namespace= for another namespace; recalls made with record=False must be passed as Recall objects)"
        )
    return recall, ns, logged[0], logged[1]


def logged_recall(conn: Connection, recall_id: str, namespace: str) -> tuple[list[str], np.ndarray] | None:
    """The logged selection of a recall of ``namespace`` (ids best first, scores), or None when the
    log has no recall with this id in this namespace."""
    head = [r for r in by_key(conn, LOGGED_SELECT, recalls.c.id, [recall_id]) if r[1] == namespace]
    if not head:
        return None
    return candidates_of(conn, [(recall_id, head[0][2])])[recall_id].selection()


def foreign_ids(conn: Connection, ids: Sequence[str], namespace: str) -> set[str]:
    """Which of these ids belong to memories of another namespace (unknown ids are not foreign)."""
    return {r[0] for r in by_key(conn, ID_SELECT, memory_items.c.id, list(dict.fromkeys(ids))) if r[1] != namespace}


def recall_row(
    recall: Recall, plan: Plan, cfg: RetrievalConfig, now: float, generation: int, as_of: float | None = None
) -> dict[str, Any]:
    """The ``memory_recalls`` row of one recall (its config names ``as_of`` when it was an audit's)."""
    config: dict[str, Any] = {
        f: getattr(cfg, f) for f in ("k1", "k2", "delta", "lam", "epsilon", "z_clip", "context_q")
    }
    if cfg.context_q and cfg.context_start != "global":  # logged only where it differs from before it existed
        config["context_start"] = cfg.context_start
    if as_of is not None:
        config["as_of"] = as_of
    return {
        "id": recall.id,
        "namespace": recall.namespace,
        "candidates": pack_plan(plan),
        "query": recall.query,
        "created_at": now,
        "config": config,
        "pool_size": recall.pool_size,
        "filtered": plan.filtered,
        "explored": recall.explored,
        "generation": generation,
        "context": recall.context,
        "shared": recall.shared,
    }


def log_recalls(
    conn: Connection,
    out: list[Recall],
    plans: list[Plan],
    cfg: RetrievalConfig,
    generation: int,
    *,
    as_of: float | None = None,
) -> None:
    """Log recalls, one row each with every candidate's numbers packed (what ``explain`` and ``reinforce``
    by id read; ``memory.recall_log``)."""
    now = time.time()
    rows = [recall_row(r, p, cfg, now, generation, as_of) for r, p in zip(out, plans, strict=True)]
    execute_many(conn, RECALL_INSERT, rows)


def explain(conn: Connection, recall_id: str, namespace: str) -> dict[str, Any]:
    """Everything logged about one recall of ``namespace``, candidates in similarity order; each
    candidate's ``source`` is the namespace it came from (``namespace``, or the recall's ``shared`` one)."""
    query = select(*HEAD_FIELDS, recalls.c.candidates).where(recalls.c.id == recall_id)
    head = conn.execute(query).mappings().first()
    if head is None or head["namespace"] != namespace:
        raise StoreError(
            gone_message(conn, recall_id, namespace, "explained")
            or f"unknown recall id {recall_id!r} in namespace {namespace!r}: nothing was logged under it there "
            "(was record=False, or was it made in another namespace?)"
        )
    candidates = candidates_of(conn, [(recall_id, head["candidates"])])[recall_id].explain_rows()
    for c in candidates:
        c["source"] = head["shared"] if c.pop("shared") else namespace
    applied = [
        {"id": r["id"], "reward": r["reward"], "applied_at": r["applied_at"], "items": r["items"]}
        for r in conn.execute(
            select(feedback).where(feedback.c.recall_id == recall_id).order_by(feedback.c.applied_at)
        ).mappings()
    ]
    replaced = superseded(conn, [c["id"] for c in candidates])
    for c in candidates:
        c["superseded"], c["superseded_by"] = c["id"] in replaced, replaced.get(c["id"])
    out = {c.name: head[c.name] for c in HEAD_FIELDS}
    out["selected"] = [c["id"] for c in sorted((c for c in candidates if c["selected"]), key=lambda c: c["rank"])]
    out["candidates"] = candidates
    out["feedback"] = applied
    return out


def superseded(conn: Connection, ids: Sequence[str]) -> dict[str, str | None]:
    """Which of these memories a newer one superseded since: id → the superseding id."""
    out: dict[str, str | None] = {}
    for part in chunks(list(dict.fromkeys(ids))):
        query = select(memory_items.c.id, memory_items.c.superseded_by).where(
            memory_items.c.id.in_(part), memory_items.c.valid_to.is_not(None)
        )
        out.update((r[0], r[1]) for r in conn.execute(query))
    return out


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


def selected_items(
    conn: Connection, plans: list[Plan], namespaces: tuple[str, str | None], texts: ItemCache
) -> dict[str, MemoryItem]:
    """The selected memories with the Q and visits that scored them; texts from ``texts`` or SQL.

    ``namespaces`` are the recall's own and shared one (or None): each memory is read from the one its
    plan says it came from. Items read from SQL are used as read, then offered to the cache: the cache
    is bounded, so reading them back from it would lose those it evicted at once (any batch larger than
    the cache). A selected memory SQL no longer holds is left out (the caller re-plans).
    """
    values: dict[str, tuple[float, int, bool]] = {}
    for p in plans:
        for i in p.selected:
            values[str(p.ids[i])] = (float(p.stored_q[i]), int(p.visits[i]), bool(p.shared[i]))
    base: dict[str, MemoryItem] = {}
    for item_id in values:
        cached = texts.get(item_id)
        if cached is not None:
            base[item_id] = cached
    for shared, namespace in ((False, namespaces[0]), (True, namespaces[1])):
        missing = [i for i, v in values.items() if i not in base and v[2] == shared]
        if missing and namespace is not None:
            fetched = fetch_items(conn, missing, namespace)
            base.update((item.id, item) for item in fetched)
            texts.put(fetched)
    return {
        item_id: revalued(base[item_id], q, visits) for item_id, (q, visits, _) in values.items() if item_id in base
    }


def revalued(item: MemoryItem, q: float, visits: int) -> MemoryItem:
    """``item`` with ``q`` and ``visits`` and a meta of its own (``dataclasses.replace`` at a third of its cost)."""
    return MemoryItem(**{**item.__dict__, "q": q, "visits": visits, "meta": dict(item.meta)})


def select_memories(
    conn: Connection,
    mirrors: MirrorSet,
    namespaces: tuple[str, str | None],
    planner: Planner,
    plans: list[Plan] | None,
    texts: ItemCache,
    *,
    view: Callable[[Connection, str], NamespaceMirror] | None = None,
) -> tuple[list[Plan], dict[str, MemoryItem]]:
    """Catch the mirrors up, plan again when another process wrote since ``plans`` were made (or when there
    are none yet), and read every selected memory: the plans and the memories a recall returns.
    ``namespaces`` are the recall's own namespace and the shared one it searches too (or None); ``view``
    gives the mirror searched for a namespace (default: the store's own; ``MirrorSet.snapshot`` for an audit).

    A recall returns exactly what it selected: when a selected memory is gone from SQL (removed by
    another process after the catch-up, possible under READ COMMITTED), the mirrors catch up again and
    the queries are planned again.
    """
    namespace, shared = namespaces
    view = view or mirrors.get
    for attempt in range(SELECT_ATTEMPTS):
        seen = mirrors.generation
        mirrors.sync(conn)
        if plans is None or attempt or mirrors.generation != seen:
            plans = planner(view(conn, namespace), None if shared is None else view(conn, shared))
        found = selected_items(conn, plans, namespaces, texts)
        if all(i in found for p in plans for i in p.selected_ids):
            return plans, found
    raise StoreError(
        f"recall in namespace {namespace!r}: selected memories kept being removed by other processes "
        f"({SELECT_ATTEMPTS} attempts); try again"
    )
