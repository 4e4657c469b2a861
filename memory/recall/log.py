"""The recall log: one row per recall, its candidates packed in it (``memory_recalls.candidates``), and
reading it back (``explain``, the selections a reward names).

A logged recall is one row: its head (query, settings, counts, context) and ``candidates``, its k1 nearest
memories with every number ``explain`` shows and ``reinforce`` needs, packed in about 80 bytes a
candidate. One INSERT per recall, committed before ``retrieve`` returns, so a recall id handed to a
caller can be reinforced after a crash too. Stores written before this layout kept one
``memory_recall_items`` row per candidate (``candidates`` NULL): ``candidates_of`` reads both layouts, so old
recalls stay explainable and reinforceable and nothing is rewritten on open.

Packed layout (version 1, little-endian), for ``n`` candidates in similarity order:

========================  =====================================================================
``uint8``                 version (1)
``uint16``                n
``n × 5 float64``         per candidate: sim, q (the Q that ranked it), z_sim, z_q, score (the last
                          three NaN outside the pool)
``n × int16``             rank in the selection (-1: not selected)
``n × uint8``             flags: 1 in the pool (cos > δ), 2 from the recall's shared namespace
``n × uint16``            byte length of each memory id (UTF-8)
bytes                     the ids, one after another
========================  =====================================================================

Example:
    >>> nan = float("nan")
    >>> c = Candidates(("m1", "m2"), np.array([0.9, 0.2]), np.array([0.5, 0.0]), np.array([1.0, nan]),
    ...                np.array([0.5, nan]), np.array([0.7, nan]), np.array([0, -1]),
    ...                np.array([True, False]), np.array([False, False]))
    >>> back = unpack(pack(c))
    >>> back.selection()[0], back.explain_rows()[1]["filtered"]
    (['m1'], True)
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Connection, insert, select

from connectors.errors import StoreError
from memory.storage.schema import feedback, memory_items, recall_items, recall_summary, recalls
from memory.storage.statements import chunks, execute_many

if TYPE_CHECKING:
    from memory.config import RetrievalConfig
    from memory.recall.planning import Plan
    from memory.storage.records import Recall

VERSION = 1
IN_POOL, SHARED = 1, 2
NAN = float("nan")
_HEAD = struct.Struct("<BH")
RECALL_INSERT = insert(recalls)
HEAD_FIELDS = [c for c in recalls.c if c.name != "candidates"]


@dataclass(frozen=True)
class Candidates:
    """Every candidate of one recall, in similarity order (position = index).

    Attributes:
        ids: the memory ids.
        sims: their cosine similarities to the query.
        qs: the Q-values that ranked them (a context's or a tenant's overlay Q where it had one).
        z_sim, z_q, scores: phase B's z-scores and score; NaN for a candidate outside the pool.
        ranks: rank in the selection, best first from 0; -1 when not selected.
        in_pool: which passed the floor (cos > δ).
        shared: which came from the recall's shared namespace.
    """

    ids: tuple[str, ...]
    sims: np.ndarray
    qs: np.ndarray
    z_sim: np.ndarray
    z_q: np.ndarray
    scores: np.ndarray
    ranks: np.ndarray
    in_pool: np.ndarray
    shared: np.ndarray

    def selected(self) -> np.ndarray:
        """Positions of the selected candidates, best first."""
        picked = np.flatnonzero(self.ranks >= 0)
        return picked[np.argsort(self.ranks[picked], kind="stable")]

    def selection(self) -> tuple[list[str], np.ndarray]:
        """The selected memory ids, best first, and their selection scores (what ``reinforce`` credits)."""
        pos = self.selected()
        return [self.ids[i] for i in pos], self.scores[pos].astype(np.float64)

    def selected_where(self, shared: bool | None) -> list[tuple[str, float]]:
        """``(id, Q that ranked it)`` of the selected candidates, best first: those from the shared namespace
        (``shared`` True), from the recall's own (False), or all (None)."""
        pos = self.selected()
        return [(self.ids[i], float(self.qs[i])) for i in pos if shared is None or bool(self.shared[i]) == shared]

    def explain_rows(self) -> list[dict[str, Any]]:
        """One dict per candidate, in similarity order, as ``explain`` shows them (without ``source``)."""
        out = []
        for i, item_id in enumerate(self.ids):
            pooled, rank = bool(self.in_pool[i]), int(self.ranks[i])
            out.append({
                "id": item_id, "position": i, "sim": float(self.sims[i]), "q": float(self.qs[i]),
                "z_sim": float(self.z_sim[i]) if pooled else None, "z_q": float(self.z_q[i]) if pooled else None,
                "score": float(self.scores[i]) if pooled else None, "in_pool": pooled, "filtered": not pooled,
                "selected": rank >= 0, "rank": rank if rank >= 0 else None, "shared": bool(self.shared[i]),
            })  # fmt: skip
        return out


def pack_plan(plan: Plan) -> bytes:
    """The candidates of a recall planned in memory (``memory.recall.planning.Plan``), packed: what ``retrieve``
    logs. Plain Python over ten candidates: numpy's per-call overhead would cost more than the work."""
    sel, pooled, shared = plan.selection, plan.in_pool.tolist(), plan.shared.tolist()
    z_sim, z_q, scores = sel.z_sim.tolist(), sel.z_q.tolist(), sel.scores.tolist()
    rank_of = {p: r for r, p in enumerate(sel.order.tolist())}
    numbers: list[float] = []
    ranks: list[int] = []
    k = 0  # position in the pool
    for sim, q, inside in zip(plan.sims.tolist(), plan.qs.tolist(), pooled, strict=True):
        if inside:
            numbers += (sim, q, z_sim[k], z_q[k], scores[k])
            ranks.append(rank_of.get(k, -1))
            k += 1
        else:
            numbers += (sim, q, NAN, NAN, NAN)
            ranks.append(-1)
    flags = [IN_POOL * a | SHARED * b for a, b in zip(pooled, shared, strict=True)]
    return _pack([str(i) for i in plan.ids.tolist()], numbers, ranks, flags)


def pack(c: Candidates) -> bytes:
    """``c`` as the bytes stored in ``memory_recalls.candidates`` (the module's layout)."""
    numbers = np.stack([c.sims, c.qs, c.z_sim, c.z_q, c.scores], axis=1).ravel().tolist()
    flags = (np.where(c.in_pool, IN_POOL, 0) | np.where(c.shared, SHARED, 0)).tolist()
    return _pack(list(c.ids), numbers, c.ranks.tolist(), flags)


def _pack(ids: list[str], numbers: list[float], ranks: list[int], flags: list[int]) -> bytes:
    names = [i.encode() for i in ids]
    n = len(names)
    head = struct.pack(f"<BH{5 * n}d{n}h{n}B{n}H", VERSION, n, *numbers, *ranks, *flags, *map(len, names))
    return head + b"".join(names)


def unpack(blob: bytes) -> Candidates:
    """The candidates packed in ``blob`` (``pack``'s bytes); ``StoreError`` for bytes of another layout."""
    blob = bytes(blob)
    if len(blob) < _HEAD.size or blob[0] != VERSION:
        raise StoreError(
            f"memory_recalls.candidates holds a layout this version cannot read (version byte {blob[:1]!r}, expected "
            f"{VERSION}); was the store written by a newer Evolve?"
        )
    n = _HEAD.unpack_from(blob)[1]
    at = _HEAD.size
    numbers = np.frombuffer(blob, dtype="<f8", count=5 * n, offset=at).reshape(n, 5).astype(np.float64)
    at += 40 * n
    ranks = np.frombuffer(blob, dtype="<i2", count=n, offset=at).astype(np.int64)
    flags = np.frombuffer(blob, dtype=np.uint8, count=n, offset=at + 2 * n)
    lengths = np.frombuffer(blob, dtype="<u2", count=n, offset=at + 3 * n).tolist()
    at += 5 * n
    ids = []
    for length in lengths:
        ids.append(blob[at : at + length].decode())
        at += length
    sims, qs, z_sim, z_q, scores = numbers.T
    return Candidates(tuple(ids), sims, qs, z_sim, z_q, scores, ranks, (flags & IN_POOL) > 0, (flags & SHARED) > 0)


def from_rows(rows: Iterable[Mapping[str, Any]]) -> Candidates:
    """The candidates of a recall logged in the older layout (``memory_recall_items`` rows, any order)."""
    rows = sorted(rows, key=lambda r: r["position"])

    def column(name: str) -> np.ndarray:
        return np.array([np.nan if r[name] is None else r[name] for r in rows], dtype=np.float64)

    return Candidates(
        tuple(r["item_id"] for r in rows), column("sim"), column("q"), column("z_sim"), column("z_q"),
        column("score"), np.array([-1 if r["rank"] is None else r["rank"] for r in rows], dtype=np.int64),
        np.array([bool(r["in_pool"]) for r in rows], dtype=bool), np.array([bool(r["shared"]) for r in rows], dtype=bool),
    )  # fmt: skip


def candidates_of(conn: Connection, heads: Sequence[tuple[str, bytes | None]]) -> dict[str, Candidates]:
    """Recall id → its candidates, for ``(id, candidates)`` pairs read from ``memory_recalls``: unpacked,
    or read from ``memory_recall_items`` where ``candidates`` is NULL (a recall logged before the
    packed layout; one query per 5,000 of them)."""
    out = {rid: unpack(blob) for rid, blob in heads if blob is not None}
    old = [rid for rid, blob in heads if blob is None]
    rows: dict[str, list[Mapping[str, Any]]] = {rid: [] for rid in old}
    for part in chunks(old):
        for row in conn.execute(select(recall_items).where(recall_items.c.recall_id.in_(part))).mappings():
            rows[row["recall_id"]].append(dict(row))
    out.update((rid, from_rows(found)) for rid, found in rows.items())
    return out


def expired_through(conn: Connection, namespace: str) -> float | None:
    """The time up to which recalls of ``namespace`` were expired (``memory.recall.expiry``); None: never."""
    s = recall_summary.c
    query = select(s.value).where(s.namespace == namespace, s.kind == "expired", s.key == "", s.item_id == "")
    value = conn.execute(query).scalar()
    return None if value is None else float(value)


def made_at(recall_id: str) -> float | None:
    """When a recall was made, from its id (``memory.write.checks.new_id``: milliseconds, then random bits); None
    for an id that does not start with a plausible time (another form, a caller's own)."""
    try:
        ms = int(recall_id[:12], 16)
    except ValueError:
        return None
    return ms / 1000 if len(recall_id) == 32 and 1.5e12 < ms < (time.time() + 86_400) * 1000 else None


def gone_message(conn: Connection, recall_id: str, namespace: str, what: str) -> str | None:
    """Why ``recall_id``, unknown in ``namespace``'s log, is gone when the retention expired it (None when
    it was never there, as far as the log can tell)."""
    through = expired_through(conn, namespace)
    made = made_at(recall_id)
    if through is None or made is None or made > through:
        return None
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(through))
    hint = "; a Recall object can still be reinforced from the selection it carries" if what == "reinforced" else ""
    return (
        f"recall {recall_id!r} of namespace {namespace!r} has expired: the recall log keeps recalls made after "
        f"{when} (ForgetConfig.recall_retention), so it can no longer be {what}{hint}"
    )


def recalled_at(conn: Connection, namespace: str) -> dict[str, float]:
    """Memory id → when a recall the retention expired last selected it (``memory.recall.expiry``)."""
    s = recall_summary.c
    query = select(s.item_id, s.value).where(s.namespace == namespace, s.kind == "recalled")
    return {item: float(at) for item, at in conn.execute(query)}


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


def recall_rows(
    out: list[Recall], plans: list[Plan], cfg: RetrievalConfig, generation: int, *, as_of: float | None = None
) -> list[dict[str, Any]]:
    """The log rows of recalls, one each with every candidate's numbers packed (what ``explain`` and
    ``reinforce`` by id read): inserted with ``RECALL_INSERT``, in the recall's transaction or deferred to a
    group commit (``MemoryConfig.recall_log_delay``)."""
    now = time.time()
    return [recall_row(r, p, cfg, now, generation, as_of) for r, p in zip(out, plans, strict=True)]


def log_recalls(
    conn: Connection,
    out: list[Recall],
    plans: list[Plan],
    cfg: RetrievalConfig,
    generation: int,
    *,
    as_of: float | None = None,
) -> None:
    """Insert ``recall_rows`` in ``conn`` now (what a recall does when its rows are not deferred)."""
    execute_many(conn, RECALL_INSERT, recall_rows(out, plans, cfg, generation, as_of=as_of))


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
