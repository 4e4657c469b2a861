"""Strategies in the store: what consolidation distils, kept as memories of kind ``"strategy"``.

``memory.upkeep.consolidation`` decides *what* a strategy says (pure functions); this module decides *how it
lives in the store*:

- One strategy per intent group (episodes of one task, ``memory_items.intent_id``) of at least
  ``min_size`` valid episodes. It is a memory like the others: recalled (``RetrievalConfig.draw_from``),
  rewarded, with its own Q and visits, in the same namespace and intent group, so it is searched with
  the group's vector.
- Its id is a hash of the namespace and its source episodes: consolidating the same episodes again
  finds it stored and does nothing (no model call). When a group's valid episodes change (new attempts,
  superseded or removed ones), the group is distilled again and the new strategy **supersedes** the old
  one (kept, marked, out of recall, like a changed fact: ``memory.upkeep.supersession``), taking over its Q and
  visits: a refined strategy keeps the utility its predecessor earned rather than starting again. A
  strategy for a group that had none starts as ``MemoryConfig.strategy_start`` says: at ``q_init`` (the
  default) or at the Q its source episodes earned (``source_q``), with no visits either way.
- ``memory_links`` rows (relation ``"source"``) link it to the episodes it came from.

The model calls happen before anything is written; the strategies, their links and the superseding of
their predecessors are one transaction. A consolidation killed at any point leaves the store as it was
or complete, and running it again does what is left.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Connection, insert, select

from connectors.chat import ChatModel
from memory.config import MemoryConfig, StrategyStart, check_int
from memory.storage.items import ITEM_FIELDS
from memory.storage.records import MemoryItem, item_from_row
from memory.storage.schema import bump, from_blobs, intents, links, memory_items
from memory.upkeep.consolidation import Strategy, distil, group_episodes
from memory.upkeep.supersession import mark_superseded
from memory.write.batch import NewItems
from memory.write.checks import MAX_ID, check_namespace
from memory.write.inserts import insert_batches

if TYPE_CHECKING:
    from memory.storage.database import OpenStore

STRATEGY = "strategy"
SOURCE = "source"  # memory_links.relation: a strategy's source episodes


@dataclass(frozen=True)
class Consolidation:
    """What one ``MemoryStore.consolidate`` call did in one namespace.

    Attributes:
        namespace: where it ran.
        groups: intent groups with at least ``min_size`` valid episodes.
        written: ids of the strategies stored by this call.
        replaced: old strategy id → the new one that superseded it.
        unchanged: groups whose stored strategy was distilled from exactly their current episodes.
        skipped: groups that yielded no strategy (the model said there was nothing to learn, or its
            reply did not parse and the rule found nothing either).

    Example:
        >>> Consolidation("default", groups=2, written=["s1"], unchanged=1).summary()
        'default: 2 groups, 1 strategies written (0 replacing older ones), 1 unchanged, 0 skipped'
    """

    namespace: str
    groups: int = 0
    written: list[str] = field(default_factory=list)
    replaced: dict[str, str] = field(default_factory=dict)
    unchanged: int = 0
    skipped: int = 0

    def summary(self) -> str:
        return (
            f"{self.namespace}: {self.groups} groups, {len(self.written)} strategies written "
            f"({len(self.replaced)} replacing older ones), {self.unchanged} unchanged, {self.skipped} skipped"
        )


@dataclass(frozen=True)
class StrategyWrites:
    """What a consolidation writes: the new strategies as a batch, their predecessors, their sources."""

    batch: NewItems | None
    replaced: dict[str, str]
    sources: dict[str, tuple[str, ...]]
    report: Consolidation


def strategy_id(namespace: str, sources: Sequence[str]) -> str:
    """The id of the strategy distilled from ``sources`` in ``namespace``: the same episodes, the same id.

    Example:
        >>> strategy_id("default", ["m2", "m1"]) == strategy_id("default", ["m1", "m2"])
        True
    """
    digest = hashlib.sha256("\n".join([namespace, *sorted(sources)]).encode()).hexdigest()
    return f"strategy-{digest}"[:MAX_ID]


def read_groups(
    conn: Connection, namespace: str
) -> tuple[list[MemoryItem], np.ndarray, list[str], dict[str, MemoryItem]]:
    """The namespace's valid episodes (items, their intent keys' vectors, their intent ids) and its valid
    strategies by intent group."""
    c = memory_items.c
    rows = conn.execute(
        select(*ITEM_FIELDS, c.intent_id, intents.c.embedding)
        .join(intents, intents.c.id == c.intent_id)
        .where(c.namespace == namespace, c.valid_to.is_(None))
        .order_by(c.seq)
    ).mappings()
    episodes, blobs, keys, current = [], [], [], {}
    for row in rows:
        item = item_from_row(row)
        if item.kind == STRATEGY:
            current[str(row["intent_id"])] = item
        else:
            episodes.append(item)
            blobs.append(row["embedding"])
            keys.append(str(row["intent_id"]))
    dim = len(blobs[0]) // 4 if blobs else 1
    return episodes, from_blobs(blobs, dim) if blobs else np.zeros((0, dim), np.float32), keys, current


def plan(
    namespace: str,
    read: tuple[list[MemoryItem], np.ndarray, list[str], dict[str, MemoryItem]],
    *,
    llm: ChatModel | None,
    min_size: int,
    q_init: float,
    start: StrategyStart = "q_init",
) -> StrategyWrites:
    """Group, compare with the stored strategies, and distil the groups whose episodes changed; a new
    strategy starts at its predecessor's Q and visits, else as ``start`` says (``MemoryConfig.strategy_start``)."""
    episodes, vecs, keys, current = read
    groups = group_episodes(episodes, vecs, min_size=min_size, similarity=1.0, intents=keys)
    new: list[tuple[Strategy, str, np.ndarray, MemoryItem | None]] = []
    first_q: list[float] = []  # the Q of each new strategy without a predecessor
    unchanged = skipped = 0
    for g in groups:
        key, sources = keys[g[0]], tuple(sorted(episodes[i].id for i in g))
        old = current.get(key)
        if old is not None and tuple(old.meta.get("sources", ())) == sources:
            unchanged += 1
            continue
        found = distil([episodes[i] for i in g], llm=llm)
        if found is None:
            skipped += 1
            continue
        new.append((found, key, vecs[g[0]], old))
        first_q.append(source_q([episodes[i] for i in g], q_init=q_init) if start == "sources" else q_init)
    ids = [strategy_id(namespace, s.sources) for s, *_ in new]
    replaced = {old.id: i for i, (_, _, _, old) in zip(ids, new, strict=True) if old is not None}
    report = Consolidation(namespace, len(groups), ids, replaced, unchanged, skipped)
    if not new:
        return StrategyWrites(None, {}, {}, report)
    batch = NewItems.build(
        [s.applies_when for s, *_ in new],
        [s.text() for s, *_ in new],
        np.stack([v for _, _, v, _ in new]).astype(np.float32),
        q=[q if old is None else old.q for q, (*_, old) in zip(first_q, new, strict=True)],
        success=[None] * len(new),
        meta=[_meta(s, key) for s, key, _, _ in new],
        ids=ids,
        visits=[0 if old is None else old.visits for *_, old in new],
        kinds=[STRATEGY] * len(new),
    )
    return StrategyWrites(batch, replaced, {i: s.sources for i, (s, *_) in zip(ids, new, strict=True)}, report)


def source_q(sources: Sequence[MemoryItem], *, q_init: float) -> float:
    """The Q a strategy's source episodes earned: their mean Q weighted by visits (an episode never rewarded
    still holds the Q it was written with, which says nothing of its use), or their plain mean when none was
    rewarded yet; ``q_init`` for no sources.

    Example:
        >>> def episode(q, visits):
        ...     return MemoryItem("m", "default", "Door code?", "Answer given: 4471", q, visits, 0.0, {})
        >>> round(source_q([episode(0.6, 3), episode(-0.3, 1), episode(0.0, 0)], q_init=0.0), 4)
        0.375
        >>> round(source_q([episode(0.2, 0), episode(0.4, 0)], q_init=0.0), 4)
        0.3
    """
    if not sources:
        return q_init
    q = np.array([s.q for s in sources], dtype=np.float64)
    visits = np.array([s.visits for s in sources], dtype=np.float64)
    return float(np.average(q, weights=visits)) if visits.sum() > 0 else float(q.mean())


def _meta(strategy: Strategy, key: str) -> dict[str, Any]:
    return {
        "title": strategy.title,
        "applies_when": strategy.applies_when,
        "do": strategy.do,
        "avoid": strategy.avoid,
        "sources": list(strategy.sources),
        "intent_group": key,
    }


def link_sources(conn: Connection, namespace: str, sources: Mapping[str, Sequence[str]]) -> None:
    """``memory_links`` rows strategy → each source episode (relation ``"source"``), in the caller's
    transaction; rows already there are left alone."""
    wanted = [(child, parent) for child, parents in sources.items() for parent in parents]
    if not wanted:
        return
    have: set[tuple[str, str]] = set()
    children = list(sources)
    for lo in range(0, len(children), 5000):
        query = select(links.c.child_id, links.c.parent_id).where(
            links.c.child_id.in_(children[lo : lo + 5000]), links.c.relation == SOURCE
        )
        have.update((str(a), str(b)) for a, b in conn.execute(query))
    now = time.time()
    rows = [
        {"child_id": c, "parent_id": p, "relation": SOURCE, "namespace": namespace, "created_at": now}
        for c, p in wanted
        if (c, p) not in have
    ]
    if rows:
        conn.execute(insert(links), rows)


def sources_of(conn: Connection, strategy_ids: Sequence[str]) -> dict[str, list[str]]:
    """Each strategy's source episodes, from ``memory_links``."""
    out: dict[str, list[str]] = {}
    ids = list(strategy_ids)
    for lo in range(0, len(ids), 5000):
        query = select(links.c.child_id, links.c.parent_id).where(
            links.c.child_id.in_(ids[lo : lo + 5000]), links.c.relation == SOURCE
        )
        for child, parent in conn.execute(query.order_by(links.c.parent_id)):
            out.setdefault(str(child), []).append(str(parent))
    return out


def consolidate(
    opened: OpenStore, config: MemoryConfig, namespace: str, *, llm: ChatModel | None, min_size: int
) -> Consolidation:
    """``MemoryStore.consolidate``: the groups read in one read transaction, the strategies planned (model calls
    outside any transaction), then written, linked to their sources and superseding the ones they replace in
    one write transaction under the store's lock: killed midway, the store is as before or complete."""
    namespace = check_namespace(namespace)
    check_int("consolidate", "min_size", min_size, 1)
    read = opened.read(partial(read_groups, namespace=namespace))
    planned = plan(namespace, read, llm=llm, min_size=min_size, q_init=config.q_init, start=config.strategy_start)
    if planned.batch is None:
        return planned.report
    with opened.locked():
        with opened.write() as conn:
            batch = {namespace: planned.batch}
            _, done = insert_batches(conn, opened.mirrors, batch, config=config, group=True, skip_existing=True)
            link_sources(conn, namespace, planned.sources)
            if planned.replaced:
                generation, _ = bump(conn)
                now = time.time()
                mark_superseded(conn, planned.replaced, dict.fromkeys(planned.replaced.values(), now), generation)
        if not opened.mirrors.apply_inserts(done) or planned.replaced:
            opened.resync()  # the superseded strategies leave the mirror
    return planned.report
