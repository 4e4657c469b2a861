"""A recall returns exactly what it selected, whatever the store and item-cache sizes.

The selected memories' texts come from a bounded LRU cache or from SQL; a store larger than that cache
once lost selected memories (read back after the insert that evicted them), so ``retrieve`` returned
fewer items than it logged and ``reinforce(recall)`` and ``reinforce(recall.id)`` updated different sets.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from memory.config import MemoryConfig, RetrievalConfig
from memory.store import MemoryStore, Recall

Open = Callable[..., MemoryStore]
K2 = 5


def fill(store: MemoryStore, n: int, namespace: str = "default") -> list[str]:
    rows = [(f"task {i:05d}: look up the badge colour of site «Quartz-{i}»", f"answer {i}") for i in range(n)]
    return [m.id for m in store.add_many(rows, namespace=namespace, group=False)]


def logged_selection(store: MemoryStore, recall: Recall) -> list[str]:
    return list(store.explain(recall.id)["selected"])


@pytest.mark.parametrize(("items", "cache"), [(60, 0), (60, 1), (60, 4), (400, 16)])
def test_retrieve_many_returns_every_selected_memory_with_small_caches(
    open_store: Open, items: int, cache: int
) -> None:
    store = open_store(MemoryConfig(item_cache=cache, retrieval=RetrievalConfig(k1=10, k2=K2, delta=-1.0)))
    fill(store, items)
    queries = [f"task {i:05d}: badge colour of site Quartz-{i}" for i in range(0, items, 3)]
    recalls = store.retrieve_many(queries)
    assert all(len(r) == K2 for r in recalls), [len(r) for r in recalls]
    for r in recalls:
        assert list(r.ids) == logged_selection(store, r)
        assert len(r.scores) == len(r.details) == K2


def test_single_recalls_stay_complete_once_the_process_saw_more_memories_than_its_cache(open_store: Open) -> None:
    cache = 8
    store = open_store(MemoryConfig(item_cache=cache, retrieval=RetrievalConfig(k1=10, k2=K2, delta=-1.0)))
    fill(store, 10 * cache)
    for i in range(0, 10 * cache, 2):  # every recall after the cache is full evicts what it just read
        recall = store.retrieve(f"task {i:05d}: badge colour of site Quartz-{i}")
        assert list(recall.ids) == logged_selection(store, recall) and len(recall) == K2


def test_reinforce_by_recall_and_by_id_update_the_same_memories(open_store: Open) -> None:
    store = open_store(MemoryConfig(item_cache=2, retrieval=RetrievalConfig(k1=10, k2=K2, delta=-1.0)))
    fill(store, 50)
    a, b = store.retrieve_many(["task 00007: badge colour of Quartz-7", "task 00031: badge colour of Quartz-31"])
    assert store.reinforce(a, 1.0) == K2
    assert store.reinforce(b.id, 1.0) == K2
    visited = {item.id for item in store.items() if item.visits}
    assert visited == set(a.ids) | set(b.ids)
