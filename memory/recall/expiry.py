"""Retention for the recall log: recalls older than ``ForgetConfig.recall_retention`` leave the log.

Every logged recall costs about a kilobyte (its packed candidates, ``memory.recall.log``, its query and
settings) and each reward a ``memory_feedback`` row; without retention the log grows with every
recall. ``expire`` (run by ``MemoryStore.prune`` and ``evolve job``'s upkeep) removes, per namespace,
the recalls made before ``now - recall_retention`` together with their feedback rows, keeping what the
rest of the store still reads from them, folded into ``memory_recall_summary``:

- the Q a memory earned in a context (``RetrievalConfig.context_q``) and in a tenant's overlay on shared
  memories (``memory.recall.context_q``): the rewards applied up to the cutoff are folded in the order applied,
  from what earlier expiries folded, with the store's α; later rewards go on folding from there, so
  rankings are exactly what they would be with the whole log;
- when each memory was last selected (eviction's staleness, ``memory.upkeep.pruning.last_recalls``).

The trade-off: an expired recall can no longer be explained or reinforced by its id (a ``StoreError``
says it expired, and when the log's window begins), its feedback ids are forgotten (the same feedback
sent again is refused as expired, not skipped), and a memory written later that names it in its
provenance gets no edge to what it selected. A ``Recall`` object still reinforces its memories from the
selection it carries, as one made with ``record=False`` does (its reward moves stored Q, not a context's
or an overlay's). A recall rewarded after the cutoff as well (feedback that came late) stays until a
later expiry finds all its rewards before the cutoff. Expiring every namespace (``prune()`` without one)
also drops the feedback rows, older than the cutoff, of recalls that were never logged. Choose a
retention longer than rewards take to arrive (a served rating, a job's queue); None (the default) keeps
every recall.

Example:
    >>> import time
    >>> from connectors import HashEmbedder
    >>> from memory import ForgetConfig, MemoryStore
    >>> with MemoryStore("sqlite://", embedder=HashEmbedder()) as store:
    ...     _ = store.add("book a flight", "search by date first")
    ...     recall = store.retrieve("book a flight")
    ...     store.prune(config=ForgetConfig(recall_retention=0.0), now=time.time() + 1).recalls_expired
    1
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, and_, bindparam, delete, exists, insert, select

from memory.recall.context_q import fold, folded
from memory.recall.log import candidates_of, expired_through, recalled_at
from memory.storage.schema import bump, feedback, recall_items, recall_summary, recalls
from memory.storage.statements import chunks, execute_many

SUMMARY_INSERT = insert(recall_summary)
SUMMARY_DELETE = delete(recall_summary).where(
    recall_summary.c.namespace == bindparam("b_ns"),
    recall_summary.c.kind == bindparam("b_kind"),
    recall_summary.c.key == bindparam("b_key"),
    recall_summary.c.item_id == bindparam("b_item"),
)


def expire(
    conn: Connection, namespaces: Sequence[str] | None, *, before: float, alpha: float, dry_run: bool = False
) -> int:
    """Expire the recalls made at or before ``before`` in ``namespaces`` (None: every namespace with a
    logged recall) inside the caller's write transaction; returns how many recalls left (or would)."""
    names = (
        namespaces if namespaces is not None else sorted(conn.execute(select(recalls.c.namespace).distinct()).scalars())
    )
    expired = sum(_expire(conn, ns, before, alpha, dry_run) for ns in names)
    if names and not dry_run:
        bump(conn)  # what Q in context folds from changed: values kept for the last generation are stale
    if namespaces is None and not dry_run:  # rewards to recalls never logged (record=False) or gone before
        orphan = ~exists().where(recalls.c.id == feedback.c.recall_id)
        conn.execute(delete(feedback).where(feedback.c.applied_at <= before, orphan))
    return expired


def _expire(conn: Connection, namespace: str, before: float, alpha: float, dry_run: bool) -> int:
    through = expired_through(conn, namespace)
    if through is not None and before <= through:
        return 0
    r, f = recalls.c, feedback.c
    late = exists().where(f.recall_id == r.id, f.applied_at > before)
    gone = conn.execute(
        select(r.id, r.created_at, r.shared, r.candidates).where(
            r.namespace == namespace, r.created_at <= before, ~late
        )
    ).all()
    if dry_run:
        return len(gone)
    _fold_rewards(conn, namespace, through, before, alpha)
    _keep_last_recalls(conn, namespace, gone)
    ids = [row[0] for row in gone]
    for part in chunks(ids):
        conn.execute(delete(feedback).where(feedback.c.recall_id.in_(part)))
        conn.execute(delete(recall_items).where(recall_items.c.recall_id.in_(part)))
        conn.execute(delete(recalls).where(recalls.c.id.in_(part)))
    _replace(conn, namespace, "expired", {("", ""): before})
    return len(ids)


def _fold_rewards(conn: Connection, namespace: str, through: float | None, before: float, alpha: float) -> None:
    """Fold the rewards applied after ``through`` and up to ``before`` to recalls of ``namespace`` made for
    a context or over a shared namespace into the summary (``memory.recall.context_q`` reads it)."""
    r, f = recalls.c, feedback.c
    window = and_(f.applied_at <= before, f.applied_at > through) if through is not None else f.applied_at <= before
    query = (
        select(r.context, r.shared, r.id, f.reward, r.candidates)
        .select_from(recalls.join(feedback, f.recall_id == r.id))
        .where(r.namespace == namespace, window, (r.context.is_not(None)) | (r.shared.is_not(None)))
        .order_by(f.applied_at, f.id)
    )
    rows = conn.execute(query).all()
    found = candidates_of(conn, list({row[2]: row[4] for row in rows}.items()))
    for kind, key_at, shared in (("context", 0, None), ("overlay", 1, True)):
        steps = [
            (row[key_at], item, q, float(row[3]))
            for row in rows
            if row[key_at] is not None
            for item, q in found[row[2]].selected_where(shared)
        ]
        if steps:
            start = folded(conn, namespace, kind, sorted({s[0] for s in steps}))
            values = fold(steps, alpha=alpha, start=start)
            _replace(conn, namespace, kind, {(k, i): q for k, items in values.items() for i, q in items.items()})


def _keep_last_recalls(conn: Connection, namespace: str, gone: Sequence[Any]) -> None:
    """Keep when each memory was last selected by the recalls about to go: their own memories under
    ``namespace``, the shared ones they selected under the shared namespace (``last_recalls`` reads both)."""
    found = candidates_of(conn, [(row[0], row[3]) for row in gone])
    last: dict[str, dict[str, float]] = {}
    for recall_id, at, shared, _ in gone:
        for lent in (False, True):
            owner = shared if lent else namespace
            if owner is None:
                continue
            mine = last.setdefault(owner, {})
            for item, _ in found[recall_id].selected_where(lent):
                mine[item] = max(mine.get(item, at), float(at))
    for owner, values in last.items():
        before = recalled_at(conn, owner)
        newer = {("", i): at for i, at in values.items() if at > before.get(i, float("-inf"))}
        _replace(conn, owner, "recalled", newer)


def _replace(conn: Connection, namespace: str, kind: str, values: dict[tuple[str, str], float]) -> None:
    """Set summary values ((key, item) → value) of one namespace and kind."""
    keys = [{"b_ns": namespace, "b_kind": kind, "b_key": k, "b_item": i} for k, i in values]
    execute_many(conn, SUMMARY_DELETE, keys)
    execute_many(conn, SUMMARY_INSERT, [
        {"namespace": namespace, "kind": kind, "key": k, "item_id": i, "value": v} for (k, i), v in values.items()
    ])  # fmt: skip
