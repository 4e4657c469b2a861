"""Pruning a namespace to its budget (issue 24; docs/design/decisions.md, "Forgetting and pruning"), every
removal on the record (``memory.upkeep.removals.delete_items``).

``prune`` (``ForgetConfig``; the defaults forget nothing) works per namespace, in one transaction:

1. **Merge near-duplicates** (``merge_similarity`` set). Two memories are near-duplicates when they say the
   same thing (same kind, same outcome, the same experience text up to case and spacing) about the same
   task: the same intent key, or keys whose vectors have cosine >= ``merge_similarity``. Vectors are the
   intent keys' and every memory of an intent group shares its key's, so a cosine test alone would merge a
   task's success with its failure, or the old answer of a fact that changed with the new one. A group of
   such memories under one key folds into its keeper (``forgetting.keeper``) in one pass; keepers of
   different keys then merge pairwise (``forgetting.near_duplicates``) until no pair is left. Each merge
   gives the keeper ``forgetting.merged_values`` and the later of the two last recalls. Superseded memories
   never merge.
2. **Evict** down to ``capacity`` with ``forgetting.plan_eviction``. Every stored memory counts, superseded
   ones included (they are evicted first); ``MemoryConfig.capacity``, the insert-time cap, counts valid ones.
3. **Purge** removal records older than ``retention``: from then on a removal cannot be undone.

A second ``prune`` with the same config removes nothing more: no near-duplicates are left and the namespace
is within its budget.

``memory.upkeep.restoring`` undoes removals from their records (``restore``) and lists them (``history``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial, reduce
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Connection, and_, delete, false, func, or_, select

from connectors.errors import ConfigError
from memory.recall.expiry import expire
from memory.recall.log import candidates_of, recalled_at
from memory.storage.schema import bump, from_blobs, intents, memory_items, recalls, removals
from memory.storage.statements import chunks, execute_many
from memory.upkeep.forgetting import (
    TIERS,
    ForgetConfig,
    MemoryUsage,
    keeper,
    merged_values,
    near_duplicates,
    plan_eviction,
)
from memory.upkeep.removals import SET_VALUES, Merge, delete_items
from memory.write.checks import check_moment, check_namespace

if TYPE_CHECKING:
    from memory.config import MemoryConfig
    from memory.storage.database import OpenStore

MERGED = "merged"
"""The ``Pruned.tier`` of a memory merged into a near-duplicate (the others are ``forgetting.TIERS``)."""
_TIER_OF = (
    ("superseded", 0), ("low Q", 1), ("never recalled", 2), ("not recalled", 2), ("over capacity: new", 3),
    ("over capacity: lowest", 4),
)  # fmt: skip


# -- pruning ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pruned:
    """One memory a prune removed: ``tier`` is one of ``forgetting.TIERS`` or ``"merged"`` (into ``merged_into``)."""

    namespace: str
    item_id: str
    reason: str
    tier: str
    merged_into: str | None = None


@dataclass(frozen=True)
class PruneReport:
    """What ``prune`` removed (or would remove, ``dry_run``), the records it purged, and what each namespace keeps.

    Example:
        >>> report = PruneReport((Pruned("ns", "m2", "merged into m1", "merged", "m1"),), purged=0, kept={"ns": 1})
        >>> report.counts
        {'merged': 1}
    """

    removed: tuple[Pruned, ...]
    purged: int
    kept: Mapping[str, int]
    dry_run: bool = False
    recalls_expired: int = 0  # recalls older than ``ForgetConfig.recall_retention`` (``memory.recall.expiry``)

    @property
    def counts(self) -> dict[str, int]:
        """How many memories went per tier (and ``"merged"``), tiers in eviction order; empty ones left out."""
        found = [p.tier for p in self.removed]
        return {t: found.count(t) for t in (MERGED, *TIERS) if t in found}


@dataclass
class _Namespace:
    """One namespace's memories as columns (rows oldest first) and, once planned, what a prune does to them."""

    name: str
    seqs: np.ndarray
    ids: list[str]
    keys: list[str]
    usage: MemoryUsage
    same: list[tuple[Any, ...] | None]  # what each memory says (kind, outcome, text); None: never merges
    phases: list[list[tuple[int, int, Merge, tuple[float, int]]]]  # (drop, keep, merge, keep's values after)
    evict: np.ndarray
    reasons: list[str]


def prune(
    conn: Connection,
    namespaces: Sequence[str] | None,
    config: ForgetConfig,
    *,
    now: float,
    dim: int,
    dry_run: bool,
    alpha: float,
) -> PruneReport:
    """Merge, evict and purge inside the caller's write transaction (``namespaces`` None: all of them), and
    expire the recall log (``memory.recall.expiry``, folding with the store's learning rate ``alpha``)."""
    names = (
        namespaces
        if namespaces is not None
        else sorted(conn.execute(select(memory_items.c.namespace).distinct()).scalars())
    )
    plans = [_plan(conn, _read(conn, ns, merging=config.merge_similarity is not None), config, now=now, dim=dim)
             for ns in names]  # fmt: skip
    removed = [p for plan in plans for p in _pruned(plan)]
    if removed and not dry_run:
        generation, _ = bump(conn)
        for plan in plans:
            _execute(conn, plan, generation, now)
    old = removals.c.removed_at <= now - config.retention if config.retention is not None else false()
    where = old if namespaces is None else and_(old, removals.c.namespace.in_(list(namespaces)))
    purged = int(conn.execute(select(func.count()).select_from(removals).where(where)).scalar_one())
    if purged and not dry_run:
        conn.execute(delete(removals).where(where))
    kept = {plan.name: len(plan.ids) - sum(len(p) for p in plan.phases) - len(plan.evict) for plan in plans}
    expired = 0
    if config.recall_retention is not None:
        before = now - config.recall_retention
        expired = expire(conn, namespaces, before=before, alpha=alpha, dry_run=dry_run)
    return PruneReport(tuple(removed), purged, kept, dry_run, expired)


def _read(conn: Connection, namespace: str, *, merging: bool) -> _Namespace:
    c = memory_items.c
    cols = [c.seq, c.id, c.intent_id, c.q, c.visits, c.created_at, c.valid_to, c.kind, c.success]
    rows = conn.execute(
        select(*cols, *([c.experience] if merging else [])).where(c.namespace == namespace).order_by(c.seq)
    ).all()
    last = last_recalls(conn, namespace)
    usage = MemoryUsage(
        q=np.array([r[3] for r in rows], dtype=np.float64), visits=np.array([r[4] for r in rows], dtype=np.int64),
        last_recalled=np.array([last.get(r[1], np.nan) for r in rows], dtype=np.float64),
        created_at=np.array([r[5] for r in rows], dtype=np.float64),
        superseded=np.array([r[6] is not None for r in rows], dtype=bool),
    )  # fmt: skip
    same = [None if not merging or r[6] is not None else (r[7], r[8], " ".join(r[9].split()).casefold()) for r in rows]
    seqs = np.array([r[0] for r in rows], dtype=np.int64)
    return _Namespace(namespace, seqs, [r[1] for r in rows], [r[2] for r in rows], usage, same, [], seqs[:0], [])


def last_recalls(conn: Connection, namespace: str) -> dict[str, float]:
    """When each memory of ``namespace`` was last selected by a recall, its own or a tenant's that shared it
    (``retrieve(shared=...)``), recalls the log's retention expired included (``memory.recall.expiry``).
    Memories never selected are absent."""
    r = recalls.c
    rows = conn.execute(select(r.id, r.created_at, r.namespace, r.candidates).where(
        or_(r.namespace == namespace, r.shared == namespace)
    )).all()  # fmt: skip
    found = candidates_of(conn, [(row[0], row[3]) for row in rows])
    out = recalled_at(conn, namespace)
    for recall_id, at, owner, _ in rows:
        for item_id, _ in found[recall_id].selected_where(owner != namespace):  # a tenant's: the shared ones
            out[item_id] = max(out.get(item_id, at), float(at))
    return out


def _plan(conn: Connection, ns: _Namespace, config: ForgetConfig, *, now: float, dim: int) -> _Namespace:
    """Plan the merges, then the evictions among what is left (``ns`` filled in and returned)."""
    u = ns.usage
    q, visits, last = u.q.copy(), u.visits.copy(), u.last_recalled.copy()

    def merge(drop: int, keep: int, phase: list[tuple[int, int, Merge, tuple[float, int]]]) -> None:
        before = (float(q[keep]), int(visits[keep]))
        q[keep], visits[keep] = merged_values(*before, float(q[drop]), int(visits[drop]))
        last[keep] = np.fmax(last[keep], last[drop])
        phase.append((drop, keep, Merge(ns.ids[keep], before), (float(q[keep]), int(visits[keep]))))

    classes: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for i, says in enumerate(ns.same):
        if says is not None:
            classes[says].append(i)
    folds: list[tuple[int, int, Merge, tuple[float, int]]] = []
    survivors: list[list[int]] = []
    for rows in classes.values():
        by_key: dict[str, list[int]] = defaultdict(list)
        for i in rows:
            by_key[ns.keys[i]].append(i)
        tops = [reduce(lambda a, b: keeper(a, b, u)[0], group) for group in by_key.values()]
        for top, group in zip(tops, by_key.values(), strict=True):
            for i in group:
                if i != top:
                    merge(i, top, folds)
        survivors.append(tops)
    ns.phases = [folds] if folds else []
    vectors = _key_vectors(conn, {ns.keys[i] for s in survivors if len(s) > 1 for i in s}, dim)
    survivors = [kept for s in survivors if len(kept := [i for i in s if ns.keys[i] in vectors]) > 1]
    while survivors:
        phase: list[tuple[int, int, Merge, tuple[float, int]]] = []
        for s in survivors:
            sub = MemoryUsage(q[s], visits[s], last[s], u.created_at[s], np.zeros(len(s), dtype=bool))
            for keep, drop in near_duplicates(np.stack([vectors[ns.keys[i]] for i in s]), config.merge_similarity, sub):
                merge(s[drop], s[keep], phase)
        gone = {step[0] for step in phase}
        survivors = [[i for i in s if i not in gone] for s in survivors if any(i in gone for i in s)]
        survivors = [s for s in survivors if len(s) > 1]
        if phase:
            ns.phases.append(phase)
    alive = np.ones(len(ns.ids), dtype=bool)
    alive[[step[0] for phase in ns.phases for step in phase]] = False
    left = np.flatnonzero(alive)
    after = MemoryUsage(q[left], visits[left], last[left], u.created_at[left], u.superseded[left])
    evict, ns.reasons = plan_eviction(after, now=now, config=config)
    ns.evict = left[evict]
    return ns


def _key_vectors(conn: Connection, keys: set[str], dim: int) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for part in chunks(sorted(keys)):
        rows = conn.execute(select(intents.c.id, intents.c.embedding).where(intents.c.id.in_(part))).all()
        if rows:
            out.update(zip([r[0] for r in rows], from_blobs([bytes(r[1]) for r in rows], dim), strict=True))
    return out


def _tier(reason: str) -> str:
    return next((TIERS[t] for prefix, t in _TIER_OF if reason.startswith(prefix)), TIERS[-1])


def _pruned(ns: _Namespace) -> list[Pruned]:
    merged = [
        Pruned(ns.name, ns.ids[d], f"merged into {m.keep_id}", MERGED, m.keep_id) for p in ns.phases for d, _, m, _ in p
    ]
    return merged + [
        Pruned(ns.name, ns.ids[i], why, _tier(why)) for i, why in zip(ns.evict.tolist(), ns.reasons, strict=True)
    ]


def _execute(conn: Connection, ns: _Namespace, generation: int, now: float) -> None:
    """Apply a planned prune: each merge phase (keepers' new values, then the merged rows, recorded with the
    values they had then), then the evictions."""
    for phase in ns.phases:
        after = {ns.ids[keep]: values for _, keep, _, values in phase}
        execute_many(conn, SET_VALUES, [
            {"b_id": k, "b_q": q, "b_visits": v, "b_gen": generation, "b_at": now} for k, (q, v) in after.items()
        ])  # fmt: skip
        seqs = [int(ns.seqs[drop]) for drop, _, _, _ in phase]
        reasons = [f"merged into {m.keep_id}" for _, _, m, _ in phase]
        merges = {s: m for s, (_, _, m, _) in zip(seqs, phase, strict=True)}
        delete_items(conn, ns.name, seqs, generation, reasons, now=now, merges=merges)
    if len(ns.evict):
        delete_items(conn, ns.name, ns.seqs[ns.evict], generation, ns.reasons, now=now)


def prune_store(
    opened: OpenStore,
    config: MemoryConfig,
    dim: int,
    namespace: str | None,
    *,
    forget: ForgetConfig | None,
    now: float | None,
    dry_run: bool,
) -> PruneReport:
    """``MemoryStore.prune``: ``prune`` with ``forget`` (default ``config.forget``) in one write transaction
    under the store's lock (a read transaction for a ``dry_run``), the mirrors read back from SQL after."""
    names = None if namespace is None else [check_namespace(namespace)]
    cfg = config.forget if forget is None else forget
    if not isinstance(cfg, ForgetConfig):
        raise ConfigError(f"prune: config must be a memory.config.ForgetConfig, got {type(cfg).__name__}")
    if not isinstance(dry_run, bool):
        raise ConfigError(f"prune: dry_run must be True or False, got {dry_run!r:.80}")
    at = check_moment(now, "prune")
    run = partial(prune, namespaces=names, config=cfg, now=at, dim=dim, dry_run=dry_run, alpha=config.alpha)
    if dry_run:
        return opened.read(run)
    with opened.locked():
        with opened.write() as conn:
            report = run(conn)
        if report.removed:
            opened.resync()  # deletions, merged keepers' values: read back from SQL
        return report
