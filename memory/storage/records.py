"""The values the memory store hands out: one memory, one scored candidate, one recall.

They are frozen; ``memory.store`` re-exports them, which is where users import them from.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MemoryItem:
    """One stored experience with its learned utility.

    Attributes:
        id: stable identifier (kept by export/import).
        namespace: the tenant or agent the memory belongs to.
        intent: the task text it was written for (what retrieval matches against).
        experience: what to reuse: a script, a lesson, a condensed trajectory.
        q: the learned utility Q.
        visits: how many rewards have updated Q.
        created_at: Unix time of writing.
        meta: user metadata plus ``success`` (bool or None) and ``provenance`` when given; read-only.
        valid_from: Unix time from which the memory holds (None given: ``created_at``).
        valid_to: Unix time at which it stopped holding; None while it is valid (``memory.upkeep.supersession``).
        superseded_by: the id of the newer memory that contradicted and replaced it, if one did.
        kind: ``"episode"`` (one attempt) or ``"strategy"`` (distilled from episodes by consolidation,
            ``memory.upkeep.strategies``).

    Example:
        >>> MemoryItem("m1", "default", "sort a list", "use sorted()", 0.0, 0, 0.0, {"success": True}).q
        0.0
    """

    id: str
    namespace: str
    intent: str
    experience: str
    q: float
    visits: int
    created_at: float
    meta: Mapping[str, Any]
    valid_from: float | None = None
    valid_to: float | None = None
    superseded_by: str | None = None
    kind: str = "episode"

    def __post_init__(self) -> None:
        if self.valid_from is None:
            object.__setattr__(self, "valid_from", self.created_at)

    @property
    def valid(self) -> bool:
        """Whether the memory still holds (no newer memory superseded it): recalls only find valid ones."""
        return self.valid_to is None

    def valid_at(self, when: float) -> bool:
        """Whether the memory held at Unix time ``when`` (``valid_from <= when < valid_to``)."""
        start = self.created_at if self.valid_from is None else self.valid_from
        return start <= when and (self.valid_to is None or when < self.valid_to)

    @property
    def success(self) -> bool | None:
        """Whether the attempt that wrote this memory succeeded (None when unknown)."""
        value = self.meta.get("success")
        return None if value is None else bool(value)


@dataclass(frozen=True)
class ScoredItem:
    """A selected memory with the numbers that ranked it (phase A similarity, phase B z-scores).

    Example:
        >>> item = MemoryItem("m1", "default", "t", "e", 0.5, 1, 0.0, {})
        >>> ScoredItem(item, sim=0.8, z_sim=1.0, z_q=0.0, score=0.5).score
        0.5
    """

    item: MemoryItem
    sim: float
    z_sim: float
    z_q: float
    score: float


@dataclass(frozen=True)
class Recall:
    """One retrieval: the memories chosen for a query, best first — the handle feedback refers to.

    Attributes:
        id: pass it (or this object) to ``MemoryStore.reinforce`` with the reward that followed.
        namespace: where the memories came from.
        query: the text that was matched.
        items: the selected memories, best first.
        scores: their phase B scores.
        details: the same items with similarity and both z-scores.
        pool_size: how many items phase A let into the pool (<= k1).
        filtered: how many of the k1 nearest items phase A dropped for cosine <= δ.
        explored: True when the ε draw replaced the ranked selection by a random one.
        context: what the recall was made for (a task id), when the caller said; with
            ``RetrievalConfig.context_q`` the memories' Q-values were those they earned there.
        shared: the shared namespace searched with ``namespace`` in the same recall (None: only
            ``namespace``); each item's own ``namespace`` says where it came from.

    Example:
        >>> r = Recall("r1", "default", "q", (), (), (), pool_size=0, filtered=0, explored=False)
        >>> len(r), bool(r)
        (0, False)
    """

    id: str
    namespace: str
    query: str
    items: tuple[MemoryItem, ...]
    scores: tuple[float, ...]
    details: tuple[ScoredItem, ...]
    pool_size: int
    filtered: int
    explored: bool
    context: str | None = None
    shared: str | None = None

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    @property
    def ids(self) -> tuple[str, ...]:
        """The selected memories' ids, best first."""
        return tuple(item.id for item in self.items)

    def render(self, *, header: str = "Relevant past experience:") -> str:
        """The recalled experiences as prompt text (empty string when nothing was recalled)."""
        if not self.items:
            return ""
        blocks = [f"[{i}] {item.intent}\n{item.experience}" for i, item in enumerate(self.items, 1)]
        return header + "\n\n" + "\n\n".join(blocks)


class ItemCache:
    """The most recently recalled memories (bounded, least recently used out).

    Only the parts that never change after writing are relied on (texts, timestamps, meta); the
    store replaces Q and visits with the mirror's values on the way out. Validity changes too, but a
    recall only returns memories valid when it searched (``retrieve(as_of=...)`` reads SQL instead).

    Example:
        >>> cache = ItemCache(size=1)
        >>> cache.put([MemoryItem("m1", "default", "t", "e", 0.0, 0, 0.0, {})])
        >>> cache.missing(["m1", "m2"])
        ['m2']
    """

    def __init__(self, size: int = 20_000) -> None:
        self.size = size
        self._items: OrderedDict[str, MemoryItem] = OrderedDict()

    def get(self, item_id: str) -> MemoryItem | None:
        item = self._items.get(item_id)
        if item is not None:
            self._items.move_to_end(item_id)
        return item

    def missing(self, ids: list[str]) -> list[str]:
        return [i for i in ids if i not in self._items]

    def put(self, items: list[MemoryItem]) -> None:
        for item in items:
            self._items[item.id] = item
            self._items.move_to_end(item.id)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def put_written(self, items: Iterable[MemoryItem]) -> None:
        """Memories just written, as reading them back would give them: each meta through JSON, so a copy of its own
        (nothing the writer's caller changes reaches the cache) with lists where the caller gave tuples."""
        if self.size:
            self.put([MemoryItem(**{**item.__dict__, "meta": json.loads(json.dumps(item.meta))}) for item in items])


def item_from_row(row: Mapping[Any, Any]) -> MemoryItem:
    """A ``MemoryItem`` from a ``memory_items`` row mapping."""
    meta = dict(row["meta"] or {})
    meta["success"] = row["success"]
    return MemoryItem(
        id=row["id"],
        namespace=row["namespace"],
        intent=row["intent"],
        experience=row["experience"],
        q=float(row["q"]),
        visits=int(row["visits"]),
        created_at=float(row["created_at"]),
        meta=meta,
        valid_from=None if row["valid_from"] is None else float(row["valid_from"]),
        valid_to=None if row["valid_to"] is None else float(row["valid_to"]),
        superseded_by=row["superseded_by"],
        kind=row["kind"] or "episode",
    )
