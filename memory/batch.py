"""Writing new memories: input checks, intent grouping, one INSERT per table, capacity eviction, removal.

``insert_items`` runs inside the store's write transaction and returns what the mirror must append
once the transaction has committed (the mirror never runs ahead of SQL).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np
from sqlalchemy import Connection, delete, insert, select

from connectors.errors import ConfigError
from memory.mirror import NamespaceMirror, Rows
from memory.records import MemoryItem
from memory.schema import bump, intents, memory_items, tombstones
from memory.scoring import assign_groups
from memory.statements import execute_many

MAX_NAMESPACE = 200
MAX_ID = 64  # the id columns are VARCHAR(64)
MAX_FEEDBACK_ID = 128  # memory_feedback.id is VARCHAR(128)
MAX_VALUE = 1e12
"""The largest magnitude of a reward or a Q-value (see ``check_reward``)."""
MAX_META_DEPTH = 64
"""How deeply ``meta`` (and a write's ``provenance``) may nest lists and mappings."""
MAX_TEXT = 1_000_000
"""The most characters in one intent, experience or query; a larger text is refused, not stored."""
INTENT_INSERT = insert(intents)
ITEM_INSERT = insert(memory_items)


def new_id() -> str:
    """A fresh id: 32 hex digits, the time in milliseconds then 80 random bits (like UUIDv7).

    Ids that grow with time land at the right edge of the primary-key indexes, so a batch of new
    rows touches a few index pages instead of one random page each.
    """
    return new_ids(1)[0]


def new_ids(n: int) -> list[str]:
    """``n`` fresh ids (see ``new_id``), drawn in one system call."""
    prefix = f"{time.time_ns() // 1_000_000:012x}"
    raw = os.urandom(10 * n).hex()
    return [prefix + raw[i : i + 20] for i in range(0, 20 * n, 20)]


def fit_id(text: str, limit: int = MAX_ID) -> str:
    """``text`` when it has at most ``limit`` characters, else its head, ``~`` and 16 hex digits of its
    SHA-256: ids and namespaces built from user-chosen names (runs, tenants, agents, tasks) always fit
    their columns, stay readable, and two different texts never share a shortened form by accident.

    Example:
        >>> fit_id("short-run:1:task")
        'short-run:1:task'
        >>> long = fit_id("heldout-similarity-s7:3:escalation-alderney/heldout-similarity-s7/solver")
        >>> len(long), long[:30]
        (64, 'heldout-similarity-s7:3:escala')
    """
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{text[: limit - len(digest) - 1]}~{digest}"


def check_chars(name: str, value: str) -> str:
    """``value`` unchanged when every database can store it: no NUL and no lone surrogate.

    PostgreSQL refuses NUL in text and JSON, and a lone surrogate (``"\\ud800"``) has no UTF-8
    encoding, so both are refused on every backend (a store behaves the same on SQLite and PostgreSQL).
    """
    if "\x00" in value:
        raise ConfigError(f"{name} must not contain NUL characters (\\x00), got {value!r:.120}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ConfigError(
            f"{name} must be valid Unicode text, got a lone surrogate {value[e.start]!r} at position {e.start}"
        ) from None
    return value


def check_text(name: str, value: object, *, limit: int = MAX_TEXT) -> None:
    """A non-empty string of at most ``limit`` characters that every backend can store (``check_chars``)."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name} must be a non-empty string, got {value!r:.120}")
    if len(value) > limit:
        raise ConfigError(f"{name} must be at most {limit:,} characters, got {len(value):,}")
    check_chars(name, value)


def check_id(name: str, value: object) -> str:
    """A memory or recall id: a non-empty string of at most ``MAX_ID`` characters."""
    check_text(name, value, limit=MAX_ID)
    return value  # type: ignore[return-value]  # checked above


def as_list(values: object, name: str) -> list[Any]:
    """``values`` as a list; anything not iterable (None, a number) is a ``ConfigError``."""
    try:
        return list(values)  # type: ignore[call-overload]
    except TypeError:
        raise ConfigError(f"{name} must be a sequence, got {type(values).__name__}") from None


def check_texts(values: object, name: str, *, single: str) -> list[str]:
    """A sequence of non-empty strings (a lone string is refused: ``single`` says what to do instead)."""
    if isinstance(values, str):
        raise ConfigError(f"{name} must be a sequence of strings, got a single string ({single})")
    out = as_list(values, name)
    for i, text in enumerate(out):
        check_text(f"{name}[{i}]", text)
    return out


def check_rows(rows: object) -> list[tuple[str, str]]:
    """``add_many``'s rows: (intent, experience) pairs of non-empty strings."""
    out = as_list(rows, "add_many: rows")
    for i, row in enumerate(out):
        if not isinstance(row, (tuple, list)) or len(row) != 2:
            raise ConfigError(f"add_many: rows[{i}] must be an (intent, experience) pair, got {row!r:.120}")
        check_text(f"rows[{i}] intent", row[0])
        check_text(f"rows[{i}] experience", row[1])
    return [(r[0], r[1]) for r in out]


def check_namespace(namespace: object) -> str:
    if not isinstance(namespace, str) or not namespace or len(namespace) > MAX_NAMESPACE:
        raise ConfigError(
            f"namespace must be a non-empty string of at most {MAX_NAMESPACE} characters, got {namespace!r:.120}"
        )
    return check_chars("namespace", namespace)


def check_success(value: object, where: str) -> bool | None:
    """A success flag: True, False or None (unknown); ``"no"`` or 1 are refused, not read as truthy."""
    if value is not None and not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{where} must be True, False or None, got {value!r:.80} ({type(value).__name__})")
    return None if value is None else bool(value)


def check_reward(value: object, where: str, *, what: str = "reward") -> float:
    """A finite float of magnitude at most ``MAX_VALUE`` (bools count as 1.0 / 0.0); anything else is a
    ``ConfigError``.

    The bound keeps every stored Q finite: ``Q + α·(r − Q)`` with both within ±1e12 cannot overflow
    (finite values near 1.8e308 could: ``r − Q`` would be infinite).
    """
    if not isinstance(value, (Real, np.number)) or isinstance(value, complex):
        raise ConfigError(f"{where}: {what} must be a finite real number, got {value!r} ({type(value).__name__})")
    try:
        number = float(value)  # type: ignore[arg-type]
    except OverflowError:
        raise ConfigError(f"{where}: {what} must be finite, got an integer with {len(str(value))} digits") from None
    if not math.isfinite(number):
        raise ConfigError(f"{where}: {what} must be finite, got {number!r}")
    if abs(number) > MAX_VALUE:
        raise ConfigError(f"{where}: {what} must be within ±{MAX_VALUE:.0e}, got {number!r}")
    return number + 0.0  # -0.0 becomes 0.0: SQLite stores no negative zero, so both backends agree


def check_meta(meta: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    """``meta`` as a dict: a mapping that is JSON without NaN or infinity, every text storable, nested at
    most ``MAX_META_DEPTH`` deep (``{}`` for None)."""
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {type(meta).__name__}")
    out = dict(meta)
    _check_json_text(out, where)  # first: it bounds the depth json.dumps would recurse into
    try:
        json.dumps(out, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where} must be JSON-serialisable without NaN or infinity, got {out!r:.120} ({e})") from e
    return out


def _check_json_text(value: object, where: str) -> None:
    """Every key and string inside a JSON value passes ``check_chars`` (PostgreSQL's JSON refuses NUL),
    and nothing is nested deeper than ``MAX_META_DEPTH``; iterative, so any depth gets a clear error."""
    stack: list[tuple[object, str, int]] = [(value, where, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            check_chars(path, item)
        elif isinstance(item, (Mapping, list, tuple)):
            if depth >= MAX_META_DEPTH:
                raise ConfigError(f"{where} must be nested at most {MAX_META_DEPTH} levels deep, got deeper at {path:.200}")
            if isinstance(item, Mapping):
                for k, v in item.items():
                    check_chars(f"{path} key", str(k))
                    stack.append((v, f"{path}[{k!r:.40}]", depth + 1))
            else:
                stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(item))


@dataclass
class NewItems:
    """Column-wise memories about to be inserted (ids and timestamps may come from an import)."""

    ids: list[str]
    intents: list[str]
    experiences: list[str]
    vecs: np.ndarray
    q: np.ndarray
    visits: np.ndarray
    success: list[bool | None]
    created: np.ndarray
    updated: np.ndarray
    metas: list[dict[str, Any]]

    @classmethod
    def build(
        cls,
        intents_: list[str],
        experiences: list[str],
        vecs: np.ndarray,
        *,
        q: float | Sequence[float],
        success: Sequence[bool | None],
        meta: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
        ids: Sequence[str] | None = None,
        visits: Sequence[int] | None = None,
        created: Sequence[float] | None = None,
        updated: Sequence[float] | None = None,
    ) -> NewItems:
        n = len(intents_)
        now = time.time()
        if meta is None or isinstance(meta, Mapping):
            metas = [check_meta(meta, "meta")] * n
        else:
            if len(meta) != n:
                raise ConfigError(f"meta must be one mapping or one per row ({n}), got {len(meta)} mappings")
            metas = [check_meta(m, f"meta[{i}]") for i, m in enumerate(meta)]
        created_ = np.full(n, now) if created is None else np.asarray(created, dtype=np.float64)
        return cls(
            ids=new_ids(n) if ids is None else list(ids),
            intents=list(intents_),
            experiences=list(experiences),
            vecs=vecs,
            q=np.broadcast_to(np.asarray(q, dtype=np.float64), (n,)).copy(),
            visits=np.zeros(n, dtype=np.int64) if visits is None else np.asarray(visits, dtype=np.int64),
            success=[check_success(s, "success") for s in success],
            created=created_,
            updated=created_.copy() if updated is None else np.asarray(updated, dtype=np.float64),
            metas=metas,
        )

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, keep: np.ndarray | slice) -> NewItems:
        """The rows where the boolean mask ``keep`` is true (or the rows of a slice)."""
        pos = np.arange(len(self))[keep] if isinstance(keep, slice) else np.flatnonzero(keep)
        return NewItems(
            ids=[self.ids[i] for i in pos],
            intents=[self.intents[i] for i in pos],
            experiences=[self.experiences[i] for i in pos],
            vecs=self.vecs[pos],
            q=self.q[pos],
            visits=self.visits[pos],
            success=[self.success[i] for i in pos],
            created=self.created[pos],
            updated=self.updated[pos],
            metas=[self.metas[i] for i in pos],
        )

    def items(self, namespace: str) -> list[MemoryItem]:
        """The ``MemoryItem`` values these rows become once stored in ``namespace``."""
        return [
            MemoryItem(self.ids[i], namespace, self.intents[i], self.experiences[i], float(self.q[i]),
                       int(self.visits[i]), float(self.created[i]), {**self.metas[i], "success": self.success[i]})
            for i in range(len(self.ids))
        ]  # fmt: skip


@dataclass(frozen=True)
class Inserted:
    """What one committed insert adds to the mirror: new intent keys, rows, and evicted rows."""

    generation: int
    items: list[MemoryItem]
    rows: Rows
    key_ids: np.ndarray
    key_seqs: np.ndarray
    key_vecs: np.ndarray
    evicted_rows: np.ndarray


def eviction_rows(mirror: NamespaceMirror, incoming: int, capacity: int | None) -> np.ndarray:
    """Mirror rows to drop so the namespace holds ``capacity`` items after ``incoming`` arrive.

    Lowest Q goes first; at equal Q a never-visited item before a visited one, then the oldest. The
    incoming items are never evicted by their own insert.
    """
    if capacity is None:
        return np.zeros(0, dtype=np.int64)
    excess = min(len(mirror) + incoming - capacity, len(mirror))
    if excess <= 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((mirror.seqs, mirror.visits > 0, mirror.q))
    return np.sort(order[:excess]).astype(np.int64)


@dataclass(frozen=True)
class Grouping:
    """Which intent key each new item joins (``labels``: positions in the mirror's keys followed by
    the new keys), which rows found new keys, and each item's stored vector and intent id."""

    labels: np.ndarray
    new_rows: np.ndarray
    key_ids: np.ndarray
    emb: np.ndarray
    intent_ids: np.ndarray


def group_items(mirror: NamespaceMirror, vecs: np.ndarray, *, threshold: float, group: bool) -> Grouping:
    """Intent grouping against the namespace's keys; grouped items take their key's vector."""
    n, n_old = len(vecs), len(mirror.key_ids)
    if group:
        nearest = nearest_by_index(mirror, vecs) if mirror.index.kind != "flat" and len(mirror) else None
        labels, new_rows = assign_groups(vecs, mirror.keys, threshold, nearest=nearest)
    else:
        labels, new_rows = n_old + np.arange(n, dtype=np.int64), np.arange(n, dtype=np.int64)
    key_ids = np.array(new_ids(len(new_rows)), dtype=object)
    old = labels < n_old
    emb = np.empty((n, mirror.dim), dtype=np.float32)
    emb[old] = mirror.keys[labels[old]]
    emb[~old] = vecs[new_rows[labels[~old] - n_old]]
    intent_ids = np.empty(n, dtype=object)
    intent_ids[old] = mirror.key_ids[labels[old]]
    intent_ids[~old] = key_ids[labels[~old] - n_old]
    return Grouping(labels.astype(np.int64), new_rows, key_ids, emb, intent_ids)


def nearest_by_index(mirror: NamespaceMirror, vecs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each vector's best existing key found through the (approximate) index: the key of its
    nearest item, whose vector is that key's. O(rows × log n) instead of O(rows × keys); a key
    the index misses only means a new group where an exact scan might have joined one."""
    sims, seqs = mirror.index.search(vecs, 1)
    rows = mirror.rows_of_seqs(seqs[:, 0])
    found = rows >= 0
    best = np.where(found, mirror.intent_codes[np.maximum(rows, 0)], -1).astype(np.int64)
    return best, np.where(found, sims[:, 0], -np.inf).astype(np.float32)


def insert_items(
    conn: Connection, mirror: NamespaceMirror, batch: NewItems, *, threshold: float, group: bool, capacity: int | None
) -> Inserted:
    """Group, insert and evict inside the caller's transaction (the mirror is current and locked)."""
    n, ns = len(batch), mirror.namespace
    g = group_items(mirror, batch.vecs, threshold=threshold, group=group)
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
    seqs, q, visits, created, updated = (
        a.tolist() for a in (item_seqs, batch.q, batch.visits, batch.created, batch.updated)
    )
    execute_many(conn, ITEM_INSERT, [
        {"id": batch.ids[i], "seq": seqs[i], "namespace": ns, "intent_id": g.intent_ids[i],
         "intent": batch.intents[i], "experience": batch.experiences[i], "q": q[i], "visits": visits[i],
         "success": batch.success[i], "created_at": created[i], "updated_at": updated[i],
         "updated_gen": generation, "meta": batch.metas[i]}
        for i in range(n)
    ])  # fmt: skip
    evicted = eviction_rows(mirror, n, capacity)
    delete_items(conn, ns, mirror.seqs[evicted], generation)
    rows = Rows(item_seqs, np.array(batch.ids, dtype=object), batch.q.copy(), batch.visits.copy(),
                batch.created.copy(), g.labels, g.emb)  # fmt: skip
    return Inserted(generation, batch.items(ns), rows, g.key_ids, key_seqs, batch.vecs[g.new_rows], evicted)


def delete_items(conn: Connection, namespace: str, seqs: np.ndarray, generation: int) -> None:
    """Delete items and leave tombstones, so other processes drop them from their mirrors.

    Only rows this statement deleted get a tombstone: on PostgreSQL a concurrent writer that deleted
    one first (its DELETE waited for ours, or ours for its) must not make the tombstone insert fail.
    """
    wanted = [int(s) for s in seqs]
    dead: list[int] = []
    for part in range(0, len(wanted), 5000):
        stmt = delete(memory_items).where(memory_items.c.seq.in_(wanted[part : part + 5000]))
        dead.extend(int(r[0]) for r in conn.execute(stmt.returning(memory_items.c.seq)))
    if dead:
        conn.execute(insert(tombstones), [{"seq": s, "namespace": namespace, "gen": generation} for s in dead])


def remove_items(conn: Connection, ids: Sequence[str], namespace: str) -> tuple[int | None, dict[str, np.ndarray]]:
    """Delete the memories of ``namespace`` with these ids inside the caller's transaction (ids unknown
    there are skipped).

    Returns the generation the delete was stamped with (None when nothing matched) and the removed
    seqs per namespace, for the caller's mirrors once the transaction has committed.
    """
    seqs: list[int] = []
    unique = list(dict.fromkeys(ids))
    for part in range(0, len(unique), 5000):
        query = select(memory_items.c.seq).where(
            memory_items.c.id.in_(unique[part : part + 5000]), memory_items.c.namespace == namespace
        )
        seqs.extend(int(r[0]) for r in conn.execute(query))
    if not seqs:
        return None, {}
    generation, _ = bump(conn)
    out = {namespace: np.array(sorted(seqs), dtype=np.int64)}
    delete_items(conn, namespace, out[namespace], generation)
    return generation, out
