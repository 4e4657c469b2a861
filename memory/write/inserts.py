"""Inserting new memories: intent grouping, one INSERT per table, capacity eviction, bulk chunks, removal (each
removal recorded by ``memory.upkeep.removals.delete_items``).

``insert_items`` runs inside the store's write transaction and returns what the mirror must append
once the transaction has committed (the mirror never runs ahead of SQL).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import Connection, insert, select

from memory.config import MemoryConfig
from memory.learn.provenance import record_context
from memory.mirror.adaptive import GROUPING_EF, AdaptiveIndex
from memory.mirror.arrays import Inserted, NamespaceMirror, Rows, kind_codes
from memory.mirror.keyrows import pair_sims
from memory.mirror.pgvector import PgVectorIndex
from memory.storage.items import fetch_items
from memory.storage.records import MemoryItem
from memory.storage.schema import bump, intents, memory_items
from memory.storage.statements import execute_many
from memory.upkeep.removals import delete_items
from memory.upkeep.supersession import Supersession, mark_superseded, supersessions
from memory.write.batch import NewItems
from memory.write.checks import check_namespace, check_owner, new_ids
from memory.write.grouping import assign_groups

if TYPE_CHECKING:
    from memory.mirror.sync import MirrorSet

GROUPING_CANDIDATES = 4  # keys an approximate index proposes for each new intent, scored exactly
SHALLOW = (AdaptiveIndex, PgVectorIndex)  # tuned graphs searched at GROUPING_EF for grouping, not at their depth
BULK_CHUNK = 10_000  # rows of a bulk load's first transaction; later ones are sized to take BULK_SECONDS
BULK_SECONDS = 0.8  # how long one chunk of a bulk load may hold the write lock
INTENT_INSERT = insert(intents)
ITEM_INSERT = insert(memory_items)


def chunk_size(rows: int, seconds: float) -> int:
    """Rows for the next chunk of a bulk load: as many as take ``BULK_SECONDS`` at the rate the last
    chunk of ``rows`` rows ran at, within [1,000, 200,000]."""
    return int(min(200_000, max(1_000, rows * BULK_SECONDS / max(seconds, 1e-3))))


def eviction_rows(
    mirror: NamespaceMirror, incoming: int, capacity: int | None, leaving: np.ndarray | None = None
) -> np.ndarray:
    """Mirror rows to drop so the namespace holds ``capacity`` valid items after ``incoming`` arrive.

    Lowest Q goes first; at equal Q a never-visited item before a visited one, then the oldest. The
    incoming items are never evicted by their own insert, nor the rows ``leaving`` the mirror (superseded
    by it: they stay in SQL and hold no place).
    """
    if capacity is None:
        return np.zeros(0, dtype=np.int64)
    rows = (
        np.arange(len(mirror)) if leaving is None or not len(leaving) else np.setdiff1d(np.arange(len(mirror)), leaving)
    )
    excess = min(len(rows) + incoming - capacity, len(rows))
    if excess <= 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((mirror.seqs[rows], mirror.visits[rows] > 0, mirror.q[rows]))
    return np.sort(rows[order[:excess]]).astype(np.int64)


@dataclass(frozen=True)
class Grouping:
    """Which intent key each new item joins (``labels``: positions in the mirror's keys followed by
    the new keys), which rows found new keys, and each item's stored vector and intent id."""

    labels: np.ndarray
    new_rows: np.ndarray
    key_ids: np.ndarray
    emb: np.ndarray
    intent_ids: np.ndarray


def group_items(
    mirror: NamespaceMirror,
    vecs: np.ndarray,
    *,
    threshold: float,
    group: bool,
    tasks: Sequence[str | None] | None = None,
) -> Grouping:
    """Intent grouping against the namespace's keys; grouped items take their key's vector.

    A row with a task (``tasks[i]``) joins that task's intent, whose id is derived from the namespace and
    the task, and never another: look-alike questions about different tasks stay apart however close
    their embeddings. Rows without one are grouped by similarity (``threshold``), as before.
    """
    n, n_old = len(vecs), len(mirror.key_ids)
    keyed = np.array([t is not None for t in tasks], dtype=bool) if tasks is not None else np.zeros(n, dtype=bool)
    free = np.flatnonzero(~keyed)
    if group and len(free):
        nearest = nearest_by_index(mirror, vecs[free]) if mirror.index.approximate and len(mirror) else None
        free_labels, free_new = assign_groups(vecs[free], mirror.keys, threshold, nearest=nearest)
    else:
        free_labels, free_new = n_old + np.arange(len(free), dtype=np.int64), np.arange(len(free), dtype=np.int64)
    labels = np.empty(n, dtype=np.int64)
    labels[free] = free_labels
    new_rows = [int(r) for r in free[free_new]]
    key_ids = new_ids(len(new_rows))
    if keyed.any():
        known = {str(k): i for i, k in enumerate(mirror.key_ids)}
        for i in np.flatnonzero(keyed).tolist():
            key = task_intent_id(mirror.namespace, str(tasks[i]))  # type: ignore[index]
            if key not in known:
                known[key] = n_old + len(new_rows)
                new_rows.append(i)
                key_ids.append(key)
            labels[i] = known[key]
    new = np.array(new_rows, dtype=np.int64)
    keys_out = np.array(key_ids, dtype=object)
    old = labels < n_old
    emb = np.empty((n, mirror.dim), dtype=np.float32)
    emb[old] = mirror.key_rows(labels[old])
    emb[~old] = vecs[new[labels[~old] - n_old]]
    intent_ids = np.empty(n, dtype=object)
    intent_ids[old] = mirror.key_ids[labels[old]]
    intent_ids[~old] = keys_out[labels[~old] - n_old]
    return Grouping(labels, new, keys_out, emb, intent_ids)


def task_intent_id(namespace: str, task: str) -> str:
    """The intent id of ``task``'s memories in ``namespace``: the same on every write, in every process."""
    return "task-" + hashlib.sha256(f"{namespace}\x00{task}".encode()).hexdigest()[:40]


def nearest_by_index(mirror: NamespaceMirror, vecs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each vector's best existing key found through the (approximate) index: the key of its
    nearest item, whose vector is that key's. O(rows × log n) instead of O(rows × keys); a key
    the index misses only means a new group where an exact scan might have joined one. An index whose
    similarities are approximate (the adaptive graph's 8-bit codes) is asked for a few, scored exactly."""
    index = mirror.index
    few = 1 if getattr(index, "exact_scores", True) else GROUPING_CANDIDATES
    sims, seqs = index.search(vecs, few, ef=GROUPING_EF) if isinstance(index, SHALLOW) else index.search(vecs, few)
    width = seqs.shape[1]  # wider than asked where the graph holds copies of one vector
    rows = mirror.rows_of_seqs(seqs.ravel())  # flat: vector i's candidates at i * width to (i + 1) * width
    found = rows >= 0
    codes = np.where(found, mirror.intent_codes[np.maximum(rows, 0)], -1).astype(np.int64)
    if few == 1:  # exact similarities, best first
        return codes[::width], np.where(found, sims.ravel(), -np.inf)[::width].astype(np.float32)
    at = np.arange(len(vecs)).repeat(width)
    exact = np.where(found, pair_sims(mirror.key_rows, np.maximum(codes, 0), vecs, at), -np.inf)
    best = exact.reshape(-1, width).argmax(axis=1) + width * np.arange(len(vecs))  # the first of equals
    return codes[best], exact[best].astype(np.float32)


def insert_items(
    conn: Connection, mirror: NamespaceMirror, batch: NewItems, *, threshold: float, group: bool, capacity: int | None
) -> Inserted:
    """Group, supersede, insert and evict inside the caller's transaction (the mirror is current and locked).

    A batch that states facts (``NewItems.facts``: a write with ``MemoryConfig.supersede``) supersedes the
    memories of its groups that they contradict (``memory.upkeep.supersession``), in this same transaction.
    """
    n, ns = len(batch), mirror.namespace
    g = group_items(mirror, batch.vecs, threshold=threshold, group=group, tasks=batch.groups)
    replaced = Supersession({}, np.zeros(0, dtype=np.int64))
    if batch.facts is not None:
        replaced = supersessions(conn, mirror, batch.ids, batch.facts, g.labels)
        batch.supersede(replaced.by)
    generation, first = bump(conn, seqs=len(g.new_rows) + n)
    key_seqs = first + np.arange(len(g.new_rows), dtype=np.int64)
    item_seqs = first + len(g.new_rows) + np.arange(n, dtype=np.int64)
    now = time.time()
    key_vecs = np.ascontiguousarray(batch.vecs[g.new_rows], dtype="<f4")
    execute_many(conn, INTENT_INSERT, [
        {"id": g.key_ids[j], "seq": int(key_seqs[j]), "namespace": ns, "text": batch.intents[r],
         "embedding": key_vecs[j].tobytes(), "created_at": now, "gen": generation}
        for j, r in enumerate(g.new_rows.tolist())
    ])  # fmt: skip
    seqs, q, visits, created, updated, start = (
        a.tolist() for a in (item_seqs, batch.q, batch.visits, batch.created, batch.updated, batch.valid_from)
    )
    kinds = [None] * n if batch.kinds is None else [None if k == "episode" else k for k in batch.kinds]
    execute_many(conn, ITEM_INSERT, [
        {"id": batch.ids[i], "seq": seqs[i], "namespace": ns, "intent_id": g.intent_ids[i],
         "intent": batch.intents[i], "experience": batch.experiences[i], "q": q[i], "visits": visits[i],
         "success": batch.success[i], "created_at": created[i], "updated_at": updated[i],
         "updated_gen": generation, "meta": batch.metas[i], "valid_from": start[i],
         "valid_to": batch.valid_to[i], "superseded_by": batch.superseded_by[i],
         "kind": kinds[i]}  # NULL: an episode
        for i in range(n)
    ])  # fmt: skip
    record_context(conn, ns, batch.ids, batch.metas)  # provenance edges to the recalls' memories (memory.learn.credit)
    mark_superseded(conn, replaced.by, dict(zip(batch.ids, start, strict=True)), generation)
    live = np.array([v is None for v in batch.valid_to], dtype=bool)  # a superseded row never enters the mirror
    evicted = eviction_rows(mirror, int(live.sum()), capacity, leaving=replaced.rows)
    delete_items(conn, ns, mirror.seqs[evicted], generation, f"over capacity: MemoryConfig.capacity = {capacity}")
    rows = Rows(item_seqs[live], np.array(batch.ids, dtype=object)[live], batch.q[live], batch.visits[live],
                batch.created[live], g.labels[live], g.emb[live],
                kind_codes(kinds)[live])  # fmt: skip
    return Inserted(generation, batch.items(ns), rows, g.key_ids, key_seqs, batch.vecs[g.new_rows], evicted,
                    mirror.seqs[replaced.rows])  # fmt: skip


def insert_batches(
    conn: Connection,
    mirrors: MirrorSet,
    batches: Mapping[str, NewItems],
    *,
    config: MemoryConfig,
    group: bool,
    skip_existing: bool,
) -> tuple[dict[str, MemoryItem], list[tuple[NamespaceMirror, Inserted]]]:
    """``insert_items`` for per-namespace batches inside the caller's write transaction (mirrors synced).

    Returns the memories that were already stored (``skip_existing``: an id stored since the caller
    looked comes back as stored; one stored in another namespace is a ``StoreError``) and what each
    insert adds to its mirror once the transaction has committed.
    """  # fmt: skip
    out: dict[str, MemoryItem] = {}
    done = []
    for ns, batch in batches.items():
        if skip_existing:
            found = [check_owner(item, ns) for item in fetch_items(conn, batch.ids)]
            out.update((item.id, item) for item in found)
            if found:
                batch = batch.take(np.array([i not in out for i in batch.ids], dtype=bool))
        if len(batch):
            mirror = mirrors.get(conn, check_namespace(ns))
            inserted = insert_items(
                conn, mirror, batch, threshold=config.group_threshold, group=group, capacity=config.capacity
            )
            done.append((mirror, inserted))
    return out, done


def remove_items(
    conn: Connection, ids: Sequence[str], namespace: str, reason: str = "removed by the caller"
) -> tuple[int | None, dict[str, np.ndarray]]:
    """Delete the memories of ``namespace`` with these ids inside the caller's transaction (ids unknown
    there are skipped), each recorded in the removal log with ``reason`` (``memory.upkeep.removals.delete_items``).

    Returns the generation the delete was stamped with (None when nothing matched) and the removed
    seqs per namespace, for the caller's mirrors once the transaction has committed.
    """
    seqs: list[int] = []
    unique = list(dict.fromkeys(ids))
    for part in range(0, len(unique), 5000):  # the namespace is checked here: given both, SQLite scans it
        query = select(memory_items.c.seq, memory_items.c.namespace).where(
            memory_items.c.id.in_(unique[part : part + 5000])
        )
        seqs.extend(int(r[0]) for r in conn.execute(query) if r[1] == namespace)
    if not seqs:
        return None, {}
    generation, _ = bump(conn)
    out = {namespace: np.array(sorted(seqs), dtype=np.int64)}
    delete_items(conn, namespace, out[namespace], generation, reason)
    return generation, out
