"""A LangGraph ``BaseStore`` over the Q-valued memory: LangGraph apps get Q-ranked search.

``MemoryStoreAdapter`` implements ``batch``/``abatch`` for the four LangGraph operations:

- **put** stores an item as one memory (mapping in ``memory.integrations.langgraph_mapping``): the value is kept
  whole in the memory's meta; its text (below) is both the intent recall matches and the experience.
  A value with string ``intent`` and ``experience`` fields uses them as such. ``PutOp.index`` (or the
  adapter's ``fields``) picks the text with LangGraph's path syntax (``"content"``, ``"a.b"``,
  ``"tags[*]"``); otherwise the text is the value's string leaves. ``index=False`` is accepted, but
  every memory is embedded (the store has no unindexed items).
- **put of an existing key**: memories are immutable apart from Q and visits, so a changed value is a
  new version: a new memory (Q starts at ``q_init``, since Q measured how much *the old text* helped),
  and the old version is removed. Putting the same value (and text) again changes nothing and keeps
  the learned Q — apps that re-save a profile every turn do not erase what was learned.
- **put with value None** (``delete``) removes every version of the key.
- **get** returns the newest version. Memories written without the adapter (an ``Evolver``'s) are
  visible too: key = memory id, value = ``{"intent": ..., "experience": ...}``.
- **search with a query** is a two-phase recall in every namespace under the prefix: ``limit + offset``
  memories by similarity and Q, scored as the store scores them, newest version per key. Each result is
  a ``MemorySearchItem`` whose recall can be reinforced (``adapter.reinforce(hit, reward)``);
  the recall covers every memory it selected, including any that ``offset`` or ``filter`` left out.
- **search without a query** lists items (oldest first), filtered and paged; ``score`` is None.
- **list namespaces** maps every store namespace back to its tuple (prefix/suffix, ``"*"``, max depth).

Within one batch, reads see the store as it was before the batch's puts, and of several puts to one
key the last wins (as LangGraph's own stores do). TTLs are not supported.

Needs the ``langgraph`` package from the ``langchain`` extra (``pip install -e '.[langchain]'``).

Example:
    >>> from connectors import HashEmbedder
    >>> from memory import MemoryStore
    >>> store = MemoryStore("sqlite://", embedder=HashEmbedder())
    >>> lg = MemoryStoreAdapter(store)
    >>> lg.put(("users", "alice"), "food", {"content": "Alice likes spicy noodles"})
    >>> lg.get(("users", "alice"), "food").value
    {'content': 'Alice likes spicy noodles'}
    >>> hit = lg.search(("users",), query="what food does alice like")[0]
    >>> hit.key, lg.reinforce(hit, 1.0)
    ('food', 1)
    >>> store.close()
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, select

from connectors.errors import ConfigError
from connectors.install import extra_hint
from memory.config import RetrievalConfig, recall_config
from memory.integrations.langgraph_mapping import (
    META_KEY,
    canonical,
    check_value,
    key_prefix,
    matches_filter,
    matches_namespace,
    prefix_bounds,
    to_labels,
    to_namespace,
    value_text,
    version_id,
)
from memory.storage.items import ITEM_FIELDS
from memory.storage.records import MemoryItem, item_from_row
from memory.storage.schema import memory_items
from memory.store import MemoryStore

INSTALL_HINT = extra_hint("langchain")

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
    from langgraph.store.base.embed import get_text_at_path
except ImportError as e:  # the optional extra is missing: say which one
    raise ConfigError(
        f"memory.integrations.langgraph_store needs langgraph from the 'langchain' extra: {INSTALL_HINT}"
    ) from e

__all__ = ["MemorySearchItem", "MemoryStoreAdapter"]


class MemorySearchItem(SearchItem):
    """A LangGraph ``SearchItem`` that also names the memory behind it and the recall that chose it.

    ``recall_id`` is None for a search without a query (a listing recalls nothing);
    ``memory_namespace`` is the store namespace the memory and the recall belong to.
    """

    __slots__ = ("memory_id", "memory_namespace", "q", "recall_id", "visits")

    def __init__(self, item: Item, *, score: float | None, memory: MemoryItem, recall_id: str | None = None) -> None:
        super().__init__(item.namespace, item.key, item.value, item.created_at, item.updated_at, score)
        self.memory_id = memory.id
        self.memory_namespace = memory.namespace
        self.q = memory.q
        self.visits = memory.visits
        self.recall_id = recall_id

    def dict(self) -> dict[str, Any]:
        out = super().dict()
        out.update(
            memory_id=self.memory_id, memory_namespace=self.memory_namespace, q=self.q, visits=self.visits,
            recall_id=self.recall_id,
        )  # fmt: skip
        return out


@dataclass(frozen=True)
class _Stored:
    """One memory seen as a LangGraph item."""

    namespace: tuple[str, ...]
    key: str
    memory: MemoryItem
    item: Item


class MemoryStoreAdapter(BaseStore):
    """LangGraph's store interface over a ``MemoryStore``: put/get/delete by key, Q-ranked search.

    Args:
        store: the memory store (SQLite or PostgreSQL); the adapter does not own it (close it yourself).
        fields: LangGraph paths whose text a put stores for recall when the put names none (default:
            the value's string leaves).
        config: retrieval settings for searches (default: the store's); a search's ``limit + offset``
            replaces ``k2``.

    Example:
        >>> from connectors import HashEmbedder
        >>> store = MemoryStore("sqlite://", embedder=HashEmbedder())
        >>> lg = MemoryStoreAdapter(store, fields=["text"])
        >>> lg.put(("docs",), "a", {"text": "reset the router", "source": "faq"})
        >>> lg.list_namespaces(), [i.key for i in lg.search(("docs",), filter={"source": "faq"})]
        ([('docs',)], ['a'])
        >>> store.close()
    """

    __slots__ = ("config", "fields", "store")

    def __init__(
        self, store: MemoryStore, *, fields: Sequence[str] | None = None, config: RetrievalConfig | None = None
    ) -> None:
        if not isinstance(store, MemoryStore):
            raise ConfigError(f"MemoryStoreAdapter store must be a MemoryStore, got {type(store).__name__}")
        if fields is not None and (isinstance(fields, str) or not all(isinstance(f, str) and f for f in fields)):
            raise ConfigError(f"fields must be a list of LangGraph paths (e.g. ['content']), got {fields!r:.80}")
        if config is not None and not isinstance(config, RetrievalConfig):
            raise ConfigError(f"config must be a RetrievalConfig or None, got {type(config).__name__}")
        self.store = store
        self.fields = list(fields) if fields is not None else None
        self.config = config

    # -- the BaseStore seam --------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order: reads first see the store as it was, then the puts apply."""
        ops = list(ops)
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                _check_put(op)  # every put is checked before any is written
                puts[(tuple(op.namespace), op.key)] = op
                results.append(None)
            else:
                raise ConfigError(f"unknown LangGraph store operation {type(op).__name__}")
        for op in puts.values():
            self._put(op)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` in a worker thread (the memory store is synchronous)."""
        return await asyncio.to_thread(self.batch, list(ops))

    # -- learning ------------------------------------------------------------------------------
    def reinforce(self, hit: SearchItem, reward: float, *, feedback_id: str | None = None) -> int:
        """Reward the recall behind a search result (every memory that recall selected, in its own
        namespace); returns how many memories were updated (0 for a repeated ``feedback_id``)."""
        if not isinstance(hit, MemorySearchItem) or hit.recall_id is None:
            raise ConfigError(
                f"reinforce takes a result of search(..., query=...) from this adapter, got {type(hit).__name__}"
                + (
                    " without a recall (a search without a query recalls nothing)"
                    if isinstance(hit, MemorySearchItem)
                    else ""
                )
            )
        return self.store.reinforce(hit.recall_id, reward, feedback_id=feedback_id, namespace=hit.memory_namespace)

    # -- operations ----------------------------------------------------------------------------
    def _get(self, op: GetOp) -> Item | None:
        found = self._versions(to_namespace(op.namespace), op.key)
        return found[-1].item if found else None

    def _put(self, op: PutOp) -> None:
        namespace = to_namespace(op.namespace)
        versions = self._versions(namespace, op.key)
        old = [v.memory.id for v in versions]
        if op.value is None:
            self.store.remove(old, namespace=namespace)
            return
        value = check_value(op.value)
        intent, experience = self._texts(value, op.index)
        latest = versions[-1] if versions else None
        if latest is not None and _same(latest.memory, value, intent, experience):
            self.store.remove(old[:-1], namespace=namespace)  # left by an interrupted earlier put, if any
            return
        created = latest.item.created_at.timestamp() if latest is not None else None
        meta = {META_KEY: {"key": op.key, "value": value, "created_at": created}}
        prefix = key_prefix(namespace, op.key)
        self.store.add(intent, experience, namespace=namespace, meta=meta, id=version_id(prefix))
        self.store.remove(old, namespace=namespace)  # after the add: an interruption leaves two versions, never none

    def _search(self, op: SearchOp) -> list[SearchItem]:
        if op.limit <= 0:
            return []
        prefix = tuple(op.namespace_prefix)
        namespaces = [ns for ns in self._namespaces() if ns[1][: len(prefix)] == prefix]
        if not op.query or not op.query.strip():
            listed = [s for ns, _ in namespaces for s in _newest(self._stored(self.store.items(ns)))]
            kept = [s for s in listed if matches_filter(s.item.value, op.filter)]
            return [
                MemorySearchItem(s.item, score=None, memory=s.memory) for s in kept[op.offset : op.offset + op.limit]
            ]
        base = self.config if self.config is not None else self.store.config.retrieval
        cfg = recall_config(base, op.limit + op.offset)
        hits: list[MemorySearchItem] = []
        for ns, _ in namespaces:
            recall = self.store.retrieve(op.query, namespace=ns, config=cfg)
            seen: set[str] = set()
            for d in recall.details:
                stored = self._stored([d.item])
                if stored and stored[0].key not in seen and matches_filter(stored[0].item.value, op.filter):
                    seen.add(stored[0].key)
                    hits.append(MemorySearchItem(stored[0].item, score=d.score, memory=d.item, recall_id=recall.id))
        hits.sort(key=lambda h: -(h.score or 0.0))
        return list(hits[op.offset : op.offset + op.limit])

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        labels = [lab for _, lab in self._namespaces()]
        for cond in op.match_conditions or ():
            labels = [lab for lab in labels if matches_namespace(lab, cond.match_type, cond.path)]
        if op.max_depth is not None:
            labels = [lab[: op.max_depth] for lab in labels]
        return sorted(set(labels))[op.offset : op.offset + op.limit]

    # -- reading the store ---------------------------------------------------------------------
    def _versions(self, namespace: str, key: str) -> list[_Stored]:
        """The stored versions of ``key`` (oldest first), or the plain memory whose id is ``key``."""
        lo, hi = prefix_bounds(key_prefix(namespace, key))

        def read(conn: Connection) -> list[MemoryItem]:
            query = select(*ITEM_FIELDS).where(memory_items.c.id >= lo, memory_items.c.id < hi)
            rows = conn.execute(query.order_by(memory_items.c.id)).mappings().all()
            if not rows:  # not written through the adapter: perhaps a plain memory's id
                rows = conn.execute(select(*ITEM_FIELDS).where(memory_items.c.id == key)).mappings().all()
            return [item_from_row(r) for r in rows]

        # The store's own read path (its lock and transaction): this module is part of the memory package.
        found = self.store._open.read(read)
        return [s for s in self._stored(found) if s.key == key and s.memory.namespace == namespace]

    def _namespaces(self) -> list[tuple[str, tuple[str, ...]]]:
        """Every store namespace that has a LangGraph tuple, with that tuple."""

        def read(conn: Connection) -> list[str]:
            return [r[0] for r in conn.execute(select(memory_items.c.namespace).distinct())]

        out = [(ns, to_labels(ns)) for ns in sorted(self.store._open.read(read))]
        return [(ns, labels) for ns, labels in out if labels is not None]

    def _stored(self, memories: Sequence[MemoryItem]) -> list[_Stored]:
        out = []
        for m in memories:
            labels = to_labels(m.namespace)
            if labels is None:
                continue
            mine = m.meta.get(META_KEY)
            if isinstance(mine, dict) and "key" in mine:
                key, value, created = str(mine["key"]), dict(mine["value"]), mine.get("created_at") or m.created_at
            else:
                key, value, created = m.id, {"intent": m.intent, "experience": m.experience}, m.created_at
            item = Item(
                value=value, key=key, namespace=labels, created_at=_time(created), updated_at=_time(m.created_at)
            )
            out.append(_Stored(labels, key, m, item))
        return out

    def _texts(self, value: dict[str, Any], index: Any) -> tuple[str, str]:
        """``(intent, experience)`` for a value: its own pair, the text at the chosen paths, or its leaves."""
        if isinstance(value.get("intent"), str) and isinstance(value.get("experience"), str):
            if value["intent"].strip() and value["experience"].strip():
                return value["intent"], value["experience"]
        paths = index if isinstance(index, list) else self.fields
        texts = [t for path in paths or () for t in get_text_at_path(value, path) if t.strip()]
        text = "\n".join(texts) if texts else value_text(value)
        return text, text


def _check_put(op: PutOp) -> None:
    to_namespace(op.namespace)
    if op.ttl is not None:
        raise ConfigError(f"MemoryStoreAdapter does not support TTLs (got ttl={op.ttl!r}); memories stay until removed")
    if op.value is not None:
        check_value(op.value)


def _same(memory: MemoryItem, value: dict[str, Any], intent: str, experience: str) -> bool:
    stored = memory.meta.get(META_KEY)
    same_value = isinstance(stored, dict) and canonical(stored.get("value", {})) == canonical(value)
    return same_value and memory.intent == intent and memory.experience == experience


def _newest(stored: list[_Stored]) -> list[_Stored]:
    """One item per key, its newest version, in the order keys first appeared (memories are oldest first)."""
    by_key: dict[str, _Stored] = {}
    for s in stored:
        by_key[s.key] = s
    return list(by_key.values())


def _time(ts: float) -> datetime:
    return datetime.fromtimestamp(float(ts), tz=UTC)
