"""Undoing removals from the removal log, and reading it (docs/design/decisions.md, "The removal log"; issue 24;
``memory.upkeep.pruning`` writes it).

``restore`` puts removed memories back exactly (id, texts, Q, visits, meta, validity, kind; a new ``seq``; the
intent key re-created from a record's vector if it is gone) and marks each record restored, so restoring
again changes nothing. Records older than the retention period are not restored (``prune`` purges them).

**Undoing a merge** hands back what the merge gave the keeper: its visits drop by the restored memory's
visits and its Q moves back by the amount the merge moved it (``merged Q - kept_q``); rewards it earned
since the merge stay with it. When the keeper has not changed since the merge, that is exactly its Q and
visits before it (``kept_q``, ``kept_visits``). Why not the alternatives: refusing when the keeper changed
since would mean a memory can never come back once its keeper was recalled again, which is what keepers are
for; re-deriving Q from the pooled evidence (un-pooling, ``(V·Q - v·q) / (V - v)``) amplifies what the keeper
learned since by ``V / (V - v)``, far outside the reward range for a keeper with few visits of its own.
Records restored in one call are undone newest first, so undoing a whole prune in one call brings every
keeper back exactly; a keeper no longer stored is left as it is.

Example:
    >>> from connectors import HashEmbedder
    >>> from memory import MemoryStore
    >>> with MemoryStore("sqlite://", embedder=HashEmbedder()) as store:
    ...     item = store.add("Torcode Lager Nord?", "4471")
    ...     _ = store.remove([item.id])
    ...     store.history()[0].removal.reason, store.restore([item.id]).restored == (item.id,)
    ('removed by the caller', True)
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, insert, select, update

from connectors.errors import StoreError
from memory.config import check_int
from memory.storage.records import MemoryItem, item_from_row
from memory.storage.schema import bump, intents, memory_items, removals
from memory.storage.statements import chunks, execute_many
from memory.upkeep.forgetting import Removal, merged_values, restorable
from memory.upkeep.removals import SET_VALUES
from memory.write.checks import check_moment, check_namespace, check_texts

if TYPE_CHECKING:
    from memory.config import MemoryConfig
    from memory.storage.database import OpenStore


@dataclass(frozen=True)
class RestoreReport:
    """What ``restore`` did with the ids it was given.

    Attributes:
        restored: the memories put back (item ids), newest removal first.
        keepers: the memories that handed back what a merge gave them (the module docstring).
        already: ids whose record was restored before, or whose memory is stored: nothing to do.
        refused: ``(id, why)`` for ids not found among the namespace's records, or past retention.

    Example:
        >>> RestoreReport(("m2",), ("m1",), (), ()).restored
        ('m2',)
    """

    restored: tuple[str, ...]
    keepers: tuple[str, ...]
    already: tuple[str, ...]
    refused: tuple[tuple[str, str], ...]


def _records(conn: Connection, ids: Sequence[str], namespace: str) -> dict[str, dict[str, Any]]:
    """Asked id -> its record: a removal id's, else the item's latest record in ``namespace``."""
    rc, out = removals.c, dict[str, dict[str, Any]]()
    for part in chunks(list(ids)):
        out.update(
            (r["id"], dict(r))
            for r in conn.execute(select(removals).where(rc.id.in_(part), rc.namespace == namespace)).mappings()
        )
    for part in chunks([i for i in ids if i not in out]):
        for r in conn.execute(select(removals).where(rc.item_id.in_(part), rc.namespace == namespace)).mappings():
            prev = out.get(r["item_id"])
            if prev is None or (r["removed_at"], r["id"]) > (prev["removed_at"], prev["id"]):
                out[r["item_id"]] = dict(r)
    return out


def restore(
    conn: Connection, ids: Sequence[str], namespace: str, *, now: float, retention: float | None
) -> RestoreReport:
    """Put removed memories back inside the caller's write transaction (the module docstring says how)."""
    ids = list(dict.fromkeys(ids))
    found = _records(conn, ids, namespace)
    c = memory_items.c
    stored = {
        r[0]
        for part in chunks([r["item_id"] for r in found.values()])
        for r in conn.execute(select(c.id).where(c.id.in_(part)))
    }
    todo: dict[str, dict[str, Any]] = {}
    already, refused = [], [(i, f"no removal of {namespace!r} has this id or item id") for i in ids if i not in found]
    for asked, rec in sorted(found.items(), key=lambda kv: (kv[1]["removed_at"], kv[1]["id"]), reverse=True):
        if rec["restored_at"] is not None or rec["item_id"] in stored or rec["item_id"] in todo:
            already.append(asked)
        elif not restorable(_removal(rec), now, retention):
            refused.append((asked, f"removed more than the retention period ({retention} s) ago"))
        else:
            todo[rec["item_id"]] = rec
    if not todo:
        return RestoreReport((), (), tuple(already), tuple(refused))
    recs = sorted(todo.values(), key=lambda rec: (rec["record"]["created_at"], rec["item_id"]))  # seqs: older first
    keys = _missing_keys(conn, recs)
    generation, first = bump(conn, seqs=len(keys) + len(recs))
    execute_many(conn, insert(intents), [
        {"id": k, "seq": first + j, "namespace": namespace, "text": text, "embedding": vec, "created_at": now, "gen": generation}
        for j, (k, (text, vec)) in enumerate(keys.items())
    ])  # fmt: skip
    execute_many(conn, insert(memory_items), [
        {**{col.name: rec["record"].get(col.name) for col in memory_items.c}, "seq": first + len(keys) + j, "updated_gen": generation}
        for j, rec in enumerate(recs)
    ])  # fmt: skip
    keepers = _hand_back(conn, list(todo.values()), namespace, generation, now)
    marked = update(removals).where(removals.c.id == bindparam("b_id")).values(restored_at=bindparam("b_at"))
    execute_many(conn, marked, [{"b_id": rec["id"], "b_at": now} for rec in recs])
    return RestoreReport(tuple(todo), keepers, tuple(already), tuple(refused))


def _missing_keys(conn: Connection, recs: list[dict[str, Any]]) -> dict[str, tuple[str, bytes]]:
    """The intent keys of ``recs`` that are gone, with their text and the vector a record kept for them."""
    keys = {str(rec["intent_id"]) for rec in recs}
    for part in chunks(sorted(keys)):
        keys -= {r[0] for r in conn.execute(select(intents.c.id).where(intents.c.id.in_(part)))}
    out: dict[str, tuple[str, bytes]] = {}
    rc = removals.c
    for part in chunks(sorted(keys)):
        query = select(rc.intent_id, rc.vector, rc.record).where(rc.intent_id.in_(part), rc.vector.is_not(None))
        out.update((k, (record["intent"], bytes(vec))) for k, vec, record in conn.execute(query))
    if keys - out.keys():  # only a key deleted by hand: every record of a key's last memory carries its vector
        raise StoreError(
            f"cannot restore: the intent keys {sorted(keys - out.keys())!r:.200} are gone and no record kept their vectors"
        )
    return out


def _hand_back(
    conn: Connection, recs: list[dict[str, Any]], namespace: str, generation: int, now: float
) -> tuple[str, ...]:
    """Undo the merges among ``recs`` (newest first) on the keepers still stored; the keepers changed."""
    merges = [rec for rec in recs if rec["merged_into"] is not None]
    c = memory_items.c
    values: dict[str, tuple[float, int]] = {}
    for part in chunks(sorted({rec["merged_into"] for rec in merges})):
        query = select(c.id, c.q, c.visits, c.namespace).where(c.id.in_(part))  # by primary key (see reads)
        values.update((r[0], (float(r[1]), int(r[2]))) for r in conn.execute(query) if r[3] == namespace)
    changed: dict[str, tuple[float, int]] = {}
    for rec in merges:
        k = rec["merged_into"]
        if k not in values:
            continue
        kept = (float(rec["kept_q"]), int(rec["kept_visits"]))
        gave = int(rec["record"]["visits"])
        after = merged_values(*kept, float(rec["record"]["q"]), gave)
        q, v = values[k]
        values[k] = changed[k] = kept if (q, v) == after else (q - (after[0] - kept[0]), max(v - gave, 0))
    execute_many(conn, SET_VALUES, [
        {"b_id": k, "b_q": q, "b_visits": v, "b_gen": generation, "b_at": now} for k, (q, v) in changed.items()
    ])  # fmt: skip
    return tuple(changed)


@dataclass(frozen=True)
class LoggedRemoval:
    """One entry of the removal log: the ``Removal`` (what, why, when), its id, when it was undone, and
    whether ``restore`` can still undo it (not restored, and within the retention period)."""

    id: str
    removal: Removal
    restored_at: float | None
    restorable: bool


def _removal(rec: Mapping[Any, Any]) -> Removal:
    kept = None if rec["merged_into"] is None else (float(rec["kept_q"]), int(rec["kept_visits"]))
    vector = None if rec["vector"] is None else bytes(rec["vector"])
    item: MemoryItem = item_from_row(rec["record"])
    return Removal(item, rec["reason"], float(rec["removed_at"]), vector, rec["intent_id"], rec["merged_into"], kept)


def history(
    conn: Connection, namespace: str | None, *, limit: int, since: float | None, now: float, retention: float | None
) -> list[LoggedRemoval]:
    """The removal log (of ``namespace``, or all), newest first, from ``since`` on (Unix time) when given."""
    rc = removals.c
    query = select(removals).order_by(rc.removed_at.desc(), rc.id.desc()).limit(limit)
    if namespace is not None:
        query = query.where(rc.namespace == namespace)
    if since is not None:
        query = query.where(rc.removed_at >= since)
    out = []
    for rec in conn.execute(query).mappings():
        removal = _removal(rec)
        undo = rec["restored_at"] is None and restorable(removal, now, retention)
        out.append(LoggedRemoval(rec["id"], removal, rec["restored_at"], undo))
    return out


def restore_store(
    opened: OpenStore, config: MemoryConfig, ids: Sequence[str], *, namespace: str, now: float | None
) -> RestoreReport:
    """``MemoryStore.restore``: ``restore`` in one write transaction under the store's lock (records past
    ``config.forget.retention`` at ``now``, default the clock, refused), the mirrors read back from SQL after."""
    asked = check_texts(ids, "restore: ids", single="wrap it in a list")
    namespace, at = check_namespace(namespace), check_moment(now, "restore")
    with opened.locked():
        with opened.write() as conn:
            report = restore(conn, asked, namespace, now=at, retention=config.forget.retention)
        if report.restored:
            opened.resync()  # the restored memories and the keepers' values, from SQL
        return report


def read_history(
    opened: OpenStore, config: MemoryConfig, namespace: str | None, *, limit: int, since: float | None
) -> list[LoggedRemoval]:
    """``MemoryStore.history``: ``history`` in one read transaction, measured against the clock."""
    namespace = None if namespace is None else check_namespace(namespace)
    check_int("history", "limit", limit, 1)
    start = None if since is None else check_moment(since, "history: since")
    retention = config.forget.retention
    query = partial(history, namespace=namespace, limit=limit, since=start, retention=retention)
    return opened.read(lambda conn: query(conn, now=time.time()))
