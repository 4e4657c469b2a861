"""``MemoryStore.remove``: memories deleted by id are gone for every process, and the recall log stays."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from connectors.errors import ConfigError
from memory.store import MemoryStore

ROWS = [
    ("sort a list of numbers", "use sorted(xs)"),
    ("sort numbers in place", "xs.sort()"),
    ("book a flight", "by date"),
]


def test_removed_memories_are_gone_and_the_count_is_returned(store: MemoryStore) -> None:
    ids = [m.id for m in store.add_many(ROWS)]
    assert store.remove([ids[0], "no-such-id", ids[0]]) == 1
    assert [m.id for m in store.items()] == ids[1:]
    assert ids[0] not in store.retrieve("sort a list of numbers").ids
    assert store.remove([]) == 0 and store.remove(["no-such-id"]) == 0


def test_another_process_drops_them_without_reopening(open_store: Callable[..., MemoryStore]) -> None:
    a, b = open_store(), open_store()
    ids = [m.id for m in a.add_many(ROWS)]
    assert ids[0] in b.retrieve("sort a list of numbers").ids  # b has the namespace loaded

    a.remove([ids[0]])

    assert ids[0] not in b.retrieve("sort a list of numbers").ids
    assert [m.id for m in b.items()] == ids[1:]


def test_a_reopened_store_does_not_bring_them_back(open_store: Callable[..., MemoryStore]) -> None:
    first = open_store()
    ids = [m.id for m in first.add_many(ROWS)]
    first.retrieve("sort numbers")  # loads (and later saves) the namespace's index
    first.remove([ids[1]])
    first.close()
    again = open_store()
    assert ids[1] not in again.retrieve("sort numbers in place").ids
    assert len(again.items()) == 2


def test_the_recall_log_outlives_a_removed_memory(store: MemoryStore) -> None:
    ids = [m.id for m in store.add_many(ROWS[:2])]
    recall = store.retrieve("sort a list of numbers")
    assert set(recall.ids) == set(ids)
    store.remove([ids[0]])
    assert set(store.explain(recall.id)["selected"]) == set(ids)
    assert store.reinforce(recall.id, 1.0) == 1  # only the memory that is still there moves
    assert store.get(ids[1]).visits == 1


@pytest.mark.parametrize("bad", ["one-id", [""], [3]])
def test_bad_ids_are_config_errors(store: MemoryStore, bad: object) -> None:
    store.add_many(ROWS)
    with pytest.raises(ConfigError):
        store.remove(bad)  # type: ignore[arg-type]
    assert len(store.items()) == 3
