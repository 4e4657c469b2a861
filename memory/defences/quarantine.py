"""Holding back untrusted writers' memories: the trust policy applied to every write, the quarantine, release.

``screen`` runs inside the write transaction of every insert that goes through ``MemoryStore``'s write paths
(``add``, ``add_many``, ``write_many``, ``import_``; promotion is an ``add``), before ``insert_batches``:

- an id already held in quarantine (in its namespace) is returned as stored, never written twice, whatever
  the policy says now (a repeated promotion or import is idempotent, held or not);
- under ``TrustPolicy(mode="neutral")`` an untrusted writer's rows start at ``q_init`` with no visits;
- under ``"quarantine"`` they go into ``memory_quarantine`` instead of ``memory_items`` (an id already in
  ``memory_items`` stays where it is: ``insert_batches`` returns it as stored). Nothing else changes: no
  generation is bumped, no mirror moves, no recall finds them.

A release (``memory.write.adding.release``) moves held memories into the memory: ``releasable`` gives them at
``q_init`` with no visits, to be grouped with the intents they meet there (the vector kept with each is
reused: nothing is embedded), and ``unhold`` deletes them from the quarantine. ``drop``/``undrop`` are the
distrust of a writer and its undoing (``memory.defences.distrust``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Connection, and_, delete, insert, select, update
from sqlalchemy.sql.elements import ColumnElement

from memory.config import MemoryConfig
from memory.storage.items import existing_ids
from memory.storage.records import MemoryItem, item_from_row
from memory.storage.schema import from_blobs, quarantine, to_blob
from memory.storage.statements import chunks, execute_many
from memory.write.batch import NewItems
from memory.write.checks import check_namespace, check_owner, check_writer

if TYPE_CHECKING:
    from memory.storage.database import OpenStore


def screen(
    conn: Connection, batches: Mapping[str, NewItems], config: MemoryConfig, *, skip_existing: bool
) -> tuple[dict[str, NewItems], dict[str, MemoryItem]]:
    """Apply ``config.trust`` to per-namespace batches about to be inserted (the module docstring): the
    batches left to insert, and the memories held (or already held) in quarantine, by id."""
    out: dict[str, NewItems] = {}
    held: dict[str, MemoryItem] = {}
    for ns, batch in batches.items():
        if skip_existing:
            found = {item.id: check_owner(item, ns) for item in held_items(conn, batch.ids)}
            held.update(found)
            if found:
                batch = batch.take(np.array([i not in found for i in batch.ids], dtype=bool))
        out[ns] = batch
        if config.trust.mode == "open":
            continue  # every writer alike: not even the writers are read
        untrusted = config.trust.untrusted([m.get("writer") for m in batch.metas])
        if untrusted.any():
            sent = batch
            batch = replace(
                batch, q=np.where(untrusted, config.q_init, batch.q), visits=np.where(untrusted, 0, batch.visits)
            )
            if config.trust.mode == "quarantine":
                if skip_existing:  # a row stored before the policy held its writer stays stored
                    stored = existing_ids(conn, [i for i, u in zip(batch.ids, untrusted, strict=True) if u])
                    untrusted &= np.array([i not in stored for i in batch.ids], dtype=bool)
                held.update(hold(conn, ns, batch.take(untrusted), sent=sent.take(untrusted)))
                batch = batch.take(~untrusted)
            out[ns] = batch
    return out, held


def hold(conn: Connection, namespace: str, batch: NewItems, *, sent: NewItems) -> dict[str, MemoryItem]:
    """Insert ``batch``'s rows into the quarantine (``sent``: the same rows as the writer sent them, whose Q
    and visits the record keeps as ``claimed_q`` and ``claimed_visits``); the memories held, by id."""
    if not len(batch):
        return {}
    items, now = batch.items(namespace), time.time()
    rows = []
    for i, item in enumerate(items):
        record = {
            "intent": item.intent, "experience": item.experience, "q": item.q, "visits": item.visits,
            "success": batch.success[i], "created_at": item.created_at, "updated_at": float(batch.updated[i]),
            "meta": batch.metas[i], "valid_from": item.valid_from, "valid_to": item.valid_to,
            "superseded_by": item.superseded_by, "kind": item.kind,
            "claimed_q": float(sent.q[i]), "claimed_visits": int(sent.visits[i]),
        }  # fmt: skip
        rows.append({
            "id": item.id, "namespace": namespace, "writer": str(batch.metas[i].get("writer", "")), "held_at": now,
            "task": None if batch.groups is None else batch.groups[i], "record": record,
            "vector": to_blob(batch.vecs[i]), "dropped_at": None, "dropped_by": None,
        })  # fmt: skip
    execute_many(conn, insert(quarantine), rows)
    return {item.id: item for item in items}


def _item(row: Mapping[Any, Any]) -> MemoryItem:
    return item_from_row({**row["record"], "id": row["id"], "namespace": row["namespace"]})


def held_items(conn: Connection, ids: list[str]) -> list[MemoryItem]:
    """The memories with these ids in the quarantine, dropped ones too (their ids stay taken)."""
    out: list[MemoryItem] = []
    for part in chunks(ids):
        query = select(quarantine.c.id, quarantine.c.namespace, quarantine.c.record).where(quarantine.c.id.in_(part))
        out.extend(_item(r) for r in conn.execute(query).mappings())
    return out


def where(
    *, writer: str | None = None, namespace: str | None = None, ids: Sequence[str] | None = None, dropped: bool = False
) -> ColumnElement[bool]:
    """The held rows of ``writer``, ``namespace`` and ``ids`` (each None: any), dropped or not."""
    c = quarantine.c
    test: list[ColumnElement[bool]] = [c.dropped_at.is_not(None) if dropped else c.dropped_at.is_(None)]
    test += [] if writer is None else [c.writer == writer]
    test += [] if namespace is None else [c.namespace == namespace]
    test += [] if ids is None else [c.id.in_(ids)]
    return and_(*test)


def listed(conn: Connection, *, namespace: str | None, writer: str | None) -> list[MemoryItem]:
    """The held memories (not dropped) of ``namespace`` and ``writer`` (None: any), oldest first."""
    c = quarantine.c
    query = select(c.id, c.namespace, c.record).where(where(writer=writer, namespace=namespace))
    return [_item(r) for r in conn.execute(query.order_by(c.held_at, c.id)).mappings()]


def quarantined(opened: OpenStore, namespace: str | None, writer: str | None) -> list[MemoryItem]:
    """``MemoryStore.quarantined``: ``listed`` in one read transaction, the arguments checked."""
    namespace = None if namespace is None else check_namespace(namespace)
    writer = None if writer is None else check_writer(writer)
    return opened.read(partial(listed, namespace=namespace, writer=writer))


def releasable(
    conn: Connection, q_init: float, dim: int, *, writer: str | None, ids: list[str] | None, namespace: str | None
) -> tuple[list[str], dict[str, NewItems]]:
    """The held memories that match (not dropped), oldest first: their ids, and the rows they become in the
    memory (at ``q_init``, no visits), one batch per namespace (``memory.write.adding.release`` inserts them)."""
    rows: list[dict[str, Any]] = []
    for part in [None] if ids is None else chunks(ids):
        query = select(quarantine).where(where(writer=writer, namespace=namespace, ids=part))
        rows.extend(dict(r) for r in conn.execute(query.order_by(quarantine.c.held_at, quarantine.c.id)).mappings())
    by_ns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_ns[r["namespace"]].append(r)
    return [r["id"] for r in rows], {ns: _batch(group, q_init, dim) for ns, group in by_ns.items()}


def unhold(conn: Connection, ids: list[str]) -> None:
    """Take these memories out of the quarantine (released: they are in the memory now)."""
    for part in chunks(ids):
        conn.execute(delete(quarantine).where(quarantine.c.id.in_(part)))


def _batch(rows: list[dict[str, Any]], q_init: float, dim: int) -> NewItems:
    recs = [r["record"] for r in rows]
    return NewItems.build(
        [r["intent"] for r in recs], [r["experience"] for r in recs], from_blobs([bytes(r["vector"]) for r in rows], dim),
        q=q_init, success=[r["success"] for r in recs], meta=[r["meta"] for r in recs], ids=[r["id"] for r in rows],
        created=[r["created_at"] for r in recs], updated=[r["updated_at"] for r in recs],
        groups=[r["task"] for r in rows], valid_from=[r["valid_from"] for r in recs],
        valid_to=[r["valid_to"] for r in recs], superseded_by=[r["superseded_by"] for r in recs],
        kinds=[r["kind"] for r in recs],
    )  # fmt: skip


def drop(conn: Connection, *, writer: str, namespace: str | None, reason: str, now: float) -> int:
    """Drop the writer's held memories (a distrust): no release moves them; ``undrop`` puts them back."""
    stmt = update(quarantine).where(where(writer=writer, namespace=namespace)).values(dropped_at=now, dropped_by=reason)
    return int(conn.execute(stmt).rowcount)


def undrop(conn: Connection, *, writer: str, namespace: str | None, reason: str) -> int:
    """Hold again the memories the distrust of ``reason`` dropped."""
    test = and_(where(writer=writer, namespace=namespace, dropped=True), quarantine.c.dropped_by == reason)
    return int(conn.execute(update(quarantine).where(test).values(dropped_at=None, dropped_by=None)).rowcount)
