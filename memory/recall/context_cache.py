"""The store's Q in context kept between writes (``ContextQCache``), and what one recall asks of it (``QInContext``).

``memory.recall.context_q`` folds the values from the recall log; this module keeps what it folded for the
generation the store last read, carries it past the store's own writes (``ContextQCache.advance``) and
answers a recall's queries from it, reading from the log only what it lacks.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from memory.config import RetrievalConfig
from memory.recall.context_q import OverlayFold, context_rewards, fold, fold_onto
from memory.recall.planning import QOver

CACHED = 4096
"""The most folded values (one per context, one per tenant overlay) a store keeps for the generation it last read."""


class ContextQCache:
    """What ``QInContext.read`` folded, kept for the store's generation it was read at, so recalls between two
    writes fold nothing again and read no SQL for it (a served tenant asks many questions between ratings).

    Every write that changes what the fold reads bumps the generation (a reward, a tenant's of shared memories
    too, though it moves no stored Q; an expiry of the recall log; a distrust reset or its undo), so values
    read at the generation the mirrors reflect are current; a newer generation empties the cache. A tenant's
    overlay fold is kept across generations (``OverlayFold``): after a write, the rewards applied since are
    folded onto it, not every reward again. Past ``size`` the least recently used go.
    """

    def __init__(self, size: int = CACHED) -> None:
        self.size = size
        self.generation = -1
        self.newest = -math.inf  # when the newest reward folded into the context values held was applied
        self._values: OrderedDict[tuple[Any, ...], dict[str, float]] = OrderedDict()
        self._carried: dict[tuple[str, str], set[tuple[Any, ...]]] = {}  # (namespace, context) → its constant keys
        self.overlays: OrderedDict[tuple[Any, ...], OverlayFold] = OrderedDict()  # kept across generations

    def at(self, generation: int) -> ContextQCache:
        """This cache for ``generation``: emptied when it held another's values."""
        if generation != self.generation:
            self._values.clear()
            self._carried.clear()
            self.generation, self.newest = generation, -math.inf
        return self

    def advance(
        self,
        generation: int,
        rewards: Sequence[tuple[str, str, str, float, float]] | None,
        applied_at: float = math.inf,
    ) -> None:
        """Carry the cache to ``generation``, the store's own write that directly follows the one it holds: the
        ``rewards`` that write applied, as ``(namespace, context, memory id, Q that ranked it, reward)`` in the
        order the log folds them, folded onto the contexts held (an insert passes none: it moves no Q in any
        context). Kept as they are, the values equal a fold read from SQL, bit for bit (``fold_onto``).

        Only the constant step goes on: a tenant's overlay values (its ``OverlayFold`` goes on by itself) and
        ``"visits"`` folds, which count rewards per context and memory, are read again. ``rewards`` None (a
        reward this store cannot fold without the log), a write that does not directly follow, or rewards
        ``applied_at`` no later than one the values hold (another clock ahead: the log folds them in another
        order): nothing is carried, and the next read empties the cache as before.
        """
        if rewards is None or generation != self.generation + 1 or (rewards and applied_at <= self.newest):
            return
        if rewards:
            self.newest = applied_at
        by_context: dict[tuple[str, str], list[tuple[str, str, float, float]]] = {}
        for namespace, context, item, q, reward in rewards:
            by_context.setdefault((namespace, context), []).append((context, item, q, reward))
        if sum(map(len, self._carried.values())) < len(self._values):  # overlays' and "visits" folds: read again
            carried = {key for keys in self._carried.values() for key in keys}
            for key in [k for k in self._values if k not in carried]:
                del self._values[key]
        for where, rows in by_context.items():
            for key in self._carried.get(where, ()):
                out = {where[1]: dict(self._values[key])}  # values given out before stay as they were
                fold_onto(out, {}, rows, alpha=key[3], first=key[4])
                self._values[key] = out[where[1]]
        self.generation = generation

    def get(self, key: tuple[Any, ...]) -> dict[str, float] | None:
        found = self._values.get(key)
        if found is not None:
            self._values.move_to_end(key)
        return found

    def put(self, key: tuple[Any, ...], values: dict[str, float]) -> None:
        """Keep ``values`` under ``key`` (``QInContext._key``), the least recently used going past ``size``."""
        self._values[key] = values
        self._values.move_to_end(key)
        kind, namespace, context, _, _, schedule, _ = key
        if kind == "context" and schedule == "constant":  # what ``advance`` carries
            self._carried.setdefault((namespace, context), set()).add(key)
        while len(self._values) > self.size:
            gone, _ = self._values.popitem(last=False)
            keys = self._carried.get((gone[1], gone[2]))
            if keys is not None:
                keys.discard(gone)
                if not keys:
                    del self._carried[gone[1], gone[2]]

    def overlay(self, conn: Connection, key: tuple[Any, ...], namespace: str, shared: str, **steps: Any) -> OverlayFold:
        """The tenant's overlay fold at what ``conn`` sees: the kept one carried on, or read whole."""
        kept = self.overlays.pop(key, None)
        state = kept.advance(conn, namespace, shared) if kept is not None else OverlayFold.read(
            conn, namespace, shared, **steps)  # fmt: skip
        self.overlays[key] = state
        while len(self.overlays) > self.size:
            self.overlays.popitem(last=False)
        return state


@dataclass(frozen=True)
class QInContext:
    """Per query, the Q-values that replace the stored ones in its ranking: the tenant's overlay on the
    ``shared`` memories it rated, and the Q its context earned (``RetrievalConfig.context_q``), which
    wins where both speak; with ``context_start="neutral"`` a query made for a context ranks every other
    memory at ``q_init``. ``alpha``, ``schedule``, ``floor``: the step's, as ``fold``'s.

    ``cached`` answers from ``cache`` without SQL when it holds every value at the generation asked;
    ``read`` reads what it lacks inside the caller's transaction (after the mirrors' sync in it, so
    the values are at least as new as the generation they are kept under). No more SQL for a neutral start
    than for a global one: the same rows, folded from another start.
    """

    namespace: str
    contexts: Sequence[str | None]
    cfg: RetrievalConfig
    alpha: float
    cache: ContextQCache
    shared: str | None = None
    q_init: float = 0.0
    schedule: str = "constant"
    floor: float = 0.0

    @property
    def named(self) -> list[str]:
        return [c for c in self.contexts if c is not None] if self.cfg.context_q else []

    @property
    def first(self) -> float | None:
        return self.q_init if self.cfg.context_start == "neutral" else None

    def _key(self, kind: str, key: str) -> tuple[Any, ...]:
        return kind, self.namespace, key, self.alpha, self.first, self.schedule, self.floor

    def cached(self, generation: int) -> list[QOver] | None:
        """The Q-values from the cache at ``generation``; None when it lacks one of them (or the generation)."""
        cache = self.cache
        if not self.named and self.shared is None:
            return []
        if generation < 0 or cache.generation != generation:
            return None
        overlay = cache.get(self._key("overlay", self.shared)) if self.shared is not None else {}
        values = {c: cache.get(self._key("context", c)) for c in set(self.named)}
        if overlay is None or any(v is None for v in values.values()):
            return None
        return self._per_query(overlay, {c: v for c, v in values.items() if v is not None})

    def read(self, conn: Connection, generation: int) -> list[QOver]:
        """The Q-values, what the cache lacks at ``generation`` read from the log in ``conn`` and kept there."""
        if not self.named and self.shared is None:
            return []
        cache = self.cache.at(generation)
        overlay: dict[str, float] = {}
        if self.shared is not None:
            key = self._key("overlay", self.shared)
            kept = cache.get(key)
            if kept is None:
                kept = cache.overlay(
                    conn, key, self.namespace, self.shared, alpha=self.alpha, schedule=self.schedule, floor=self.floor
                ).values
                cache.put(key, kept)
            overlay = kept
        values: dict[str, dict[str, float]] = {}
        missing = []
        for c in sorted(set(self.named)):
            found = cache.get(self._key("context", c))
            if found is None:
                missing.append(c)
            else:
                values[c] = found
        if missing:
            start, rows, newest = context_rewards(conn, self.namespace, missing)
            read = fold(rows, alpha=self.alpha, start=start, first=self.first, schedule=self.schedule, floor=self.floor)
            cache.newest = max(cache.newest, newest)
            for c in missing:
                values[c] = read.get(c, {})
                cache.put(self._key("context", c), values[c])
        return self._per_query(overlay, values)

    def _per_query(self, overlay: dict[str, float], values: Mapping[str, dict[str, float]]) -> list[QOver]:
        rest = self.first
        return [
            QOver(overlay | values.get(c, {}), rest=rest) if c is not None and self.named else QOver(overlay)
            for c in self.contexts
        ]
