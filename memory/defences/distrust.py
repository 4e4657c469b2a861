"""Distrusting a writer after the fact, and undoing it (issue 40, defences; ``memory.defences.trust`` has the writers).

``MemoryStore.distrust(writer, action=...)`` finds the writer's memories by ``meta["writer"]``:

- ``"remove"`` deletes them through ``memory.upkeep.removals.delete_items`` with the reason ``"distrusted: <writer>"``,
  so ``history`` lists them and ``restore`` puts each back exactly, as after a prune (within
  ``ForgetConfig.retention``); the writer's memories held in quarantine are dropped: kept and marked, so no
  ``release`` moves them;
- ``"reset"`` sets the Q of every one whose Q or visits differ from ``q_init`` and 0 to ``q_init`` with no
  visits, the values before logged in ``memory_resets``. Held memories are left alone: a release starts
  them at ``q_init`` anyway.

Distrusting again finds nothing left to do: a report of zeros, nothing written (no generation bump).

``undo_distrust`` undoes every distrust of the writer not undone yet: ``restore`` of its removal records
(those past retention stay gone), the reset values put back on each memory still at ``q_init`` with no
visits (one rewarded since keeps what it learned there: the log row is closed all the same, as a merge's
keeper keeps its later rewards in ``memory.upkeep.restoring``), and its dropped memories held again.
Only the memory's own Q is reset: the Q it earned in a context or a tenant's overlay (``memory.recall.context_q``,
folded from the recall log) is not.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Connection, and_, bindparam, insert, or_, select, update

from connectors.errors import ConfigError
from memory.defences import quarantine as held
from memory.defences.trust import is_writer
from memory.storage.items import read_values
from memory.storage.schema import bump, memory_items, quarantine, removals, resets
from memory.storage.statements import execute_many
from memory.upkeep.removals import SET_VALUES, delete_items, removal_ids
from memory.upkeep.restoring import restore
from memory.write.checks import check_moment, check_namespace, check_writer

if TYPE_CHECKING:
    from memory.config import MemoryConfig
    from memory.storage.database import OpenStore

DISTRUST_ACTIONS: tuple[str, ...] = ("remove", "reset")
KNOWN_SHOWN = 5
"""How many known writers the error for an unknown one lists."""


@dataclass(frozen=True)
class DistrustReport:
    """What ``MemoryStore.distrust`` (or ``undo_distrust``) did to one writer's memories.

    Attributes:
        writer: the writer.
        action: ``"remove"``, ``"reset"`` or ``"undo"``.
        removed: memories removed (for an undo: restored).
        reset: memories whose Q and visits were reset (for an undo: given back).
        dropped: memories dropped from the quarantine (for an undo: held again).

    Example:
        >>> DistrustReport("tenant:acme", "remove", 3, 0, 1).total
        4
    """

    writer: str
    action: str
    removed: int
    reset: int
    dropped: int

    @property
    def total(self) -> int:
        return self.removed + self.reset + self.dropped


def reason_for(writer: str) -> str:
    """The removal log's reason for a distrusted writer's memories."""
    return f"distrusted: {writer}"


def _of(writer: str, namespace: str | None) -> ColumnElement[bool]:
    c = memory_items.c
    test = c.meta["writer"].as_string() == writer
    return test if namespace is None else and_(test, c.namespace == namespace)


def _removal_writer() -> ColumnElement[Any]:
    return removals.c.record[("meta", "writer")].as_string()


def check_known(conn: Connection, writer: str) -> None:
    """A ``ConfigError`` naming ``writer`` and a few known ones when no memory, held memory or removal has it."""
    tests = (
        select(memory_items.c.id).where(_of(writer, None)),
        select(quarantine.c.id).where(quarantine.c.writer == writer),
        select(removals.c.id).where(_removal_writer() == writer),
    )
    if any(conn.execute(t.limit(1)).first() is not None for t in tests):
        return
    known: set[str] = set()
    for query in (
        select(memory_items.c.meta["writer"].as_string()),
        select(quarantine.c.writer),
        select(_removal_writer()),
    ):
        known.update(r[0] for r in conn.execute(query.distinct().limit(50)) if is_writer(r[0]))
    shown = ", ".join(repr(w) for w in sorted(known)[:KNOWN_SHOWN]) or "none"
    raise ConfigError(
        f"no memory of this store was written by {writer!r:.240} (not stored, held or removed); known writers "
        f"include {shown}; check the spelling, kind and case"
    )


def remove(conn: Connection, writer: str, namespace: str | None, *, now: float) -> DistrustReport:
    """Remove the writer's memories (logged) and drop its held ones, inside the caller's write transaction."""
    c = memory_items.c
    seqs: dict[str, list[int]] = defaultdict(list)
    for seq, ns in conn.execute(select(c.seq, c.namespace).where(_of(writer, namespace))):
        seqs[ns].append(int(seq))
    removed = 0
    if seqs:
        generation, _ = bump(conn)
        for ns, part in seqs.items():
            removed += len(delete_items(conn, ns, sorted(part), generation, reason_for(writer), now=now))
    dropped = held.drop(conn, writer=writer, namespace=namespace, reason=reason_for(writer), now=now)
    return DistrustReport(writer, "remove", removed, 0, dropped)


def reset(conn: Connection, writer: str, namespace: str | None, *, q_init: float, now: float) -> DistrustReport:
    """Reset the writer's memories to ``q_init`` and no visits, logging the values before."""
    c = memory_items.c
    moved = or_(c.q != q_init, c.visits != 0)
    rows = conn.execute(select(c.id, c.namespace, c.q, c.visits).where(_of(writer, namespace), moved)).all()
    if not rows:
        return DistrustReport(writer, "reset", 0, 0, 0)
    generation, _ = bump(conn)
    execute_many(conn, insert(resets), [
        {"id": rid, "item_id": r[0], "namespace": r[1], "writer": writer, "q": float(r[2]), "visits": int(r[3]),
         "reset_at": now, "undone_at": None}
        for rid, r in zip(removal_ids(len(rows)), rows, strict=True)
    ])  # fmt: skip
    _set(conn, {r[0]: (q_init, 0) for r in rows}, generation, now)
    return DistrustReport(writer, "reset", 0, len(rows), 0)


def undo(
    conn: Connection, writer: str, namespace: str | None, *, q_init: float, now: float, retention: float | None
) -> DistrustReport:
    """Undo every distrust of ``writer`` not undone yet (the module docstring), in the caller's transaction."""
    rc, why = removals.c, reason_for(writer)
    logged = select(rc.id, rc.namespace).where(rc.reason == why, rc.restored_at.is_(None))
    by_ns: dict[str, list[str]] = defaultdict(list)
    for rid, ns in conn.execute(logged if namespace is None else logged.where(rc.namespace == namespace)):
        by_ns[ns].append(rid)
    restored = sum(len(restore(conn, ids, ns, now=now, retention=retention).restored) for ns, ids in by_ns.items())
    back = _unreset(conn, writer, namespace, q_init=q_init, now=now)
    again = held.undrop(conn, writer=writer, namespace=namespace, reason=why)
    return DistrustReport(writer, "undo", restored, back, again)


def _unreset(conn: Connection, writer: str, namespace: str | None, *, q_init: float, now: float) -> int:
    """Give back the logged values of the writer's reset memories still at ``q_init`` with no visits; close the rows."""
    open_rows = and_(resets.c.writer == writer, resets.c.undone_at.is_(None))
    if namespace is not None:
        open_rows = and_(open_rows, resets.c.namespace == namespace)
    query = select(resets.c.id, resets.c.item_id, resets.c.q, resets.c.visits).where(open_rows)
    rows = conn.execute(query.order_by(resets.c.reset_at, resets.c.id)).all()  # a later reset's values win
    if not rows:
        return 0
    now_values = {r[0]: (float(r[3]), int(r[4])) for r in read_values(conn, [r[1] for r in rows])}
    back = {r[1]: (float(r[2]), int(r[3])) for r in rows if now_values.get(r[1]) == (q_init, 0)}
    if back:
        generation, _ = bump(conn)
        _set(conn, back, generation, now)
    closed = update(resets).where(resets.c.id == bindparam("b_id")).values(undone_at=now)
    execute_many(conn, closed, [{"b_id": r[0]} for r in rows])
    return len(back)


def _set(conn: Connection, values: dict[str, tuple[float, int]], generation: int, now: float) -> None:
    execute_many(conn, SET_VALUES, [
        {"b_id": k, "b_q": q, "b_visits": v, "b_gen": generation, "b_at": now} for k, (q, v) in values.items()
    ])  # fmt: skip


def check_action(action: object) -> str:
    """``distrust``'s action: one of ``DISTRUST_ACTIONS``."""
    if action not in DISTRUST_ACTIONS:
        raise ConfigError(f"distrust: action must be one of {DISTRUST_ACTIONS}, got {action!r:.80}")
    return str(action)


def distrust(
    opened: OpenStore, config: MemoryConfig, writer: str, *, namespace: str | None, action: str, now: float | None
) -> DistrustReport:
    """``MemoryStore.distrust``: ``remove`` or ``reset`` in one write transaction under the store's lock, the
    mirrors read back from SQL after (a writer the store never recorded is a ``ConfigError``)."""
    writer, action = check_writer(writer), check_action(action)
    namespace, at = None if namespace is None else check_namespace(namespace), check_moment(now, "distrust")
    with opened.locked():
        with opened.write() as conn:
            check_known(conn, writer)
            if action == "remove":
                report = remove(conn, writer, namespace, now=at)
            else:
                report = reset(conn, writer, namespace, q_init=config.q_init, now=at)
        if report.removed or report.reset:
            opened.resync()  # deletions or new values: read back from SQL
        return report


def undo_distrust(
    opened: OpenStore, config: MemoryConfig, writer: str, *, namespace: str | None, now: float | None
) -> DistrustReport:
    """``MemoryStore.undo_distrust``: ``undo`` in one write transaction under the store's lock."""
    writer = check_writer(writer)
    namespace, at = None if namespace is None else check_namespace(namespace), check_moment(now, "undo_distrust")
    retention = config.forget.retention
    with opened.locked():
        with opened.write() as conn:
            check_known(conn, writer)
            report = undo(conn, writer, namespace, q_init=config.q_init, now=at, retention=retention)
        if report.removed or report.reset:
            opened.resync()
        return report
