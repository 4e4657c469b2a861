"""Provenance edges in SQL: which memories were in context when a memory was written (``memory_links``).

Writing: a memory whose ``meta["provenance"]["recalls"]`` names recall ids (the loop's episodes do,
``evolve.evolver``) gets a ``"context"`` edge to every memory those recalls *selected* from its own
namespace, recorded in the transaction that inserts it (``record_context``, called by
``memory.write.inserts.insert_items``). A memory a recall drew from a shared namespace gets no edge: rewards
never move shared memories (``MemoryStore.retrieve_many``), so credit has nowhere to go there.

Reading: ``ancestors`` returns the parents of the memories a recall selected, level by level up to a
depth, as the ``parents`` mapping ``memory.learn.credit.traced_credit`` takes (``memory.learn.rewards.plan_updates``).

Example:
    >>> recalls_named({"provenance": {"episode": "ep-7", "recalls": ["r1", "r2", "r1"]}})
    ['r1', 'r2']
    >>> recalls_named({"provenance": {"via": "mcp"}})  # names no recall: the memory gets no edge
    []
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, insert, select

from memory.recall.log import candidates_of
from memory.recall.planning import RECENT
from memory.storage.items import ID_SELECT, by_key
from memory.storage.schema import links, memory_items, recalls
from memory.storage.statements import chunks, execute_many

CONTEXT = "context"
"""The relation of an edge ``child → parent`` whose parent was recalled for the attempt that wrote the child."""
LINK_INSERT = insert(links)
# Constant statements for ``memory.storage.items.by_key`` (straight to SQLite's cursor: these run in every write of the loop).
RECALL_IDS = select(recalls.c.id)
RECALL_HEADS = select(recalls.c.id, recalls.c.candidates)
EDGES = select(links.c.child_id, links.c.parent_id, links.c.relation)


def recalls_named(meta: Mapping[str, Any]) -> list[str]:
    """The recall ids a memory's ``meta["provenance"]["recalls"]`` names, in order, without repeats.

    Provenance is free-form metadata: anything but a list of strings there names no recall (no error,
    so that a caller's own provenance shape keeps working; it just records no edges).
    """
    provenance = meta.get("provenance")
    named = provenance.get("recalls") if isinstance(provenance, Mapping) else None
    if not isinstance(named, (list, tuple)):
        return []
    return list(dict.fromkeys(r for r in named if isinstance(r, str)))


def record_context(conn: Connection, namespace: str, ids: Sequence[str], metas: Sequence[Mapping[str, Any]]) -> int:
    """Record the ``"context"`` edges of rows just inserted into ``namespace`` (inside the caller's
    transaction); returns how many edges were added.

    Parents are the memories of ``namespace`` that the rows' named recalls selected (``rank`` not NULL),
    not the ones they drew from a shared namespace, never the row itself. Edges already stored are
    skipped, so recording the same rows again adds nothing. Costs no query when no row names a recall.
    """
    named = {item_id: recalls_named(meta) for item_id, meta in zip(ids, metas, strict=True)}
    named = {item_id: recall_ids for item_id, recall_ids in named.items() if recall_ids}
    if not named:
        return 0
    picked = selected_own(conn, sorted({r for rs in named.values() for r in rs}), namespace)
    have = stored_edges(conn, list(named), CONTEXT)
    now = time.time()
    rows: list[dict[str, Any]] = []
    for child, recall_ids in named.items():
        parents = dict.fromkeys(p for r in recall_ids for p in picked.get(r, ()))
        rows.extend(
            {"child_id": child, "parent_id": p, "relation": CONTEXT, "namespace": namespace, "created_at": now}
            for p in parents
            if p != child and (child, p) not in have
        )
    execute_many(conn, LINK_INSERT, rows)
    return len(rows)


def selected_own(conn: Connection, recall_ids: Sequence[str], namespace: str) -> dict[str, list[str]]:
    """Recall id → the memories of ``namespace`` it selected (best first; shared ones left out). A recall
    the log's retention expired (``memory.recall.expiry``) selected nothing any more.

    A recall this process made recently is taken from ``memory.recall.planning.RECENT`` once the log is seen to hold
    it (a read of ids only); any other is read from the log and unpacked.
    """
    memo = {rid: None if (r := RECENT.get(rid)) is None else r.own for rid in recall_ids}
    remembered = [rid for rid, own in memo.items() if own is not None]
    logged = {r[0] for r in by_key(conn, RECALL_IDS, recalls.c.id, remembered)} if remembered else set()
    picked = {rid: list(own) for rid, own in memo.items() if own is not None and rid in logged}
    unknown = [rid for rid, own in memo.items() if own is None]
    if unknown:
        heads = [(r[0], r[1]) for r in by_key(conn, RECALL_HEADS, recalls.c.id, unknown)]
        picked.update(
            (rid, [item for item, _ in c.selected_where(False)]) for rid, c in candidates_of(conn, heads).items()
        )
    wanted = sorted({i for ids in picked.values() for i in ids})
    # The namespace is compared here: asked in SQL, SQLite scans the namespace's index instead.
    mine = {r[0] for r in by_key(conn, ID_SELECT, memory_items.c.id, wanted) if r[1] == namespace} if wanted else set()
    return {rid: own for rid, ids in picked.items() if (own := [i for i in ids if i in mine])}


def stored_edges(conn: Connection, children: Sequence[str], relation: str) -> set[tuple[str, str]]:
    """The ``(child, parent)`` edges of ``relation`` already stored for these children."""
    return {(r[0], r[1]) for r in by_key(conn, EDGES, links.c.child_id, list(children)) if r[2] == relation}


def parents_of(conn: Connection, ids: Sequence[str], namespace: str) -> dict[str, list[str]]:
    """Memory id → its ``"context"`` parents in ``namespace`` (ids without any are left out)."""
    out: dict[str, list[str]] = {}
    for part in chunks(list(ids)):
        query = (
            select(links.c.child_id, links.c.parent_id)
            .where(links.c.child_id.in_(part), links.c.relation == CONTEXT, links.c.namespace == namespace)
            .order_by(links.c.child_id, links.c.created_at, links.c.parent_id)
        )
        for child, parent in conn.execute(query):
            out.setdefault(child, []).append(parent)
    return out


def ancestors(conn: Connection, ids: Sequence[str], namespace: str, *, depth: int) -> dict[str, list[str]]:
    """The provenance above ``ids`` up to ``depth`` edges: memory id → its parents, for every memory
    reached fewer than ``depth`` edges from ``ids`` that has parents (``traced_credit``'s ``parents``).

    One query per level (and per 5,000 ids); each memory's parents are read once, so a cycle in bad
    data ends too. Every path of at most ``depth`` edges from any of ``ids`` lies in the result: a
    memory on one is reached at most as far from ``ids`` as its position on the path.
    """
    parents: dict[str, list[str]] = {}
    seen = set(ids)
    frontier = list(dict.fromkeys(ids))
    for _ in range(depth):
        if not frontier:
            break
        found = parents_of(conn, frontier, namespace)
        parents.update(found)
        frontier = list(dict.fromkeys(p for ps in found.values() for p in ps if p not in seen))
        seen.update(frontier)
    return parents
