"""Removing memories on the record (docs/design/decisions.md, "The removal log").

Every deletion, whatever its cause (the insert-time cap, ``MemoryStore.remove``, a tier of ``memory.upkeep.forgetting``,
a merge, a distrusted writer), goes through ``delete_items``, which writes one ``memory_removals`` row per memory it
deleted: the row as it was, why and when; the intent key's vector too when no other memory of the namespace
uses that key any more. All of it runs inside the caller's write transaction, so a removal and its record commit
together or not at all. ``memory.upkeep.restoring`` puts memories back from these records.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Connection, bindparam, delete, insert, select, update

from memory.storage.schema import intents, memory_items, removals, tombstones
from memory.storage.statements import chunks, execute_many

_SERIAL = itertools.count()  # removal ids sort in the order this process wrote them, within a millisecond too


REMOVAL_INSERT = insert(removals)


SET_VALUES = (
    update(memory_items)
    .where(memory_items.c.id == bindparam("b_id"))
    .values(
        q=bindparam("b_q"), visits=bindparam("b_visits"), updated_gen=bindparam("b_gen"), updated_at=bindparam("b_at")
    )
)


@dataclass(frozen=True)
class Merge:
    """A memory merged into ``keep_id``, whose (Q, visits) were ``kept_before`` just before."""

    keep_id: str
    kept_before: tuple[float, int]


def removal_ids(n: int) -> list[str]:
    """``n`` fresh removal ids that sort in the order they were made (time, then this process's counter)."""
    prefix = f"{time.time_ns() // 1_000_000:012x}"
    return [f"{prefix}{next(_SERIAL) % 16**8:08x}{os.urandom(6).hex()}" for _ in range(n)]


def delete_items(
    conn: Connection,
    namespace: str,
    seqs: np.ndarray | Sequence[int],
    generation: int,
    reason: str | Sequence[str],
    *,
    now: float | None = None,
    merges: Mapping[int, Merge] | None = None,
) -> list[int]:
    """Delete items, record each removal (``reason``: one for all, or one per seq) and leave tombstones, so
    other processes drop them from their mirrors; returns the seqs this statement deleted.

    Only rows this statement deleted get a record and a tombstone: on PostgreSQL a concurrent writer that
    deleted one first (its DELETE waited for ours, or ours for its) must not make the inserts fail.
    """
    wanted = [int(s) for s in seqs]
    why = dict(zip(wanted, [reason] * len(wanted) if isinstance(reason, str) else list(reason), strict=True))
    rows: dict[int, dict[str, Any]] = {}
    dead: list[int] = []
    for part in chunks(wanted):
        rows.update(
            (r["seq"], dict(r))
            for r in conn.execute(select(memory_items).where(memory_items.c.seq.in_(part))).mappings()
        )
        stmt = delete(memory_items).where(memory_items.c.seq.in_(part))
        dead.extend(int(r[0]) for r in conn.execute(stmt.returning(memory_items.c.seq)))
    if dead:
        gone = [rows[s] for s in dead]
        vectors = _orphan_vectors(conn, namespace, {str(r["intent_id"]) for r in gone})
        at = time.time() if now is None else now
        execute_many(conn, REMOVAL_INSERT, [
            _record_row(rid, r, namespace, why[r["seq"]], at, vectors.get(r["intent_id"]), (merges or {}).get(r["seq"]))
            for rid, r in zip(removal_ids(len(gone)), gone, strict=True)
        ])  # fmt: skip
        conn.execute(insert(tombstones), [{"seq": s, "namespace": namespace, "gen": generation} for s in dead])
    return dead


def _orphan_vectors(conn: Connection, namespace: str, keys: set[str]) -> dict[str, bytes]:
    """The vectors of those intent keys that no memory of ``namespace`` uses any more."""
    used: set[str] = set()
    for part in chunks(sorted(keys)):
        c = memory_items.c
        used.update(
            r[0]
            for r in conn.execute(select(c.intent_id).where(c.namespace == namespace, c.intent_id.in_(part)).distinct())
        )
    out: dict[str, bytes] = {}
    for part in chunks(sorted(keys - used)):
        out.update(
            (r[0], bytes(r[1]))
            for r in conn.execute(select(intents.c.id, intents.c.embedding).where(intents.c.id.in_(part)))
        )
    return out


def _record_row(
    rid: str, row: dict[str, Any], namespace: str, reason: str, at: float, vector: bytes | None, merge: Merge | None
) -> dict[str, Any]:
    return {
        "id": rid, "item_id": row["id"], "namespace": namespace, "reason": reason, "removed_at": at,
        "record": {k: v for k, v in row.items() if k != "seq"}, "intent_id": row["intent_id"], "vector": vector,
        "merged_into": None if merge is None else merge.keep_id,
        "kept_q": None if merge is None else merge.kept_before[0],
        "kept_visits": None if merge is None else merge.kept_before[1], "restored_at": None,
    }  # fmt: skip
