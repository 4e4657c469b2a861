"""``write_many``: the same memories as a loop of ``write`` calls, idempotent ids, mixed namespaces."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from connectors.embedders import HashEmbedder
from connectors.errors import ConfigError
from connectors.fakes import ScriptedChat
from memory import WriteEntry
from memory.config import MemoryConfig
from memory.store import MemoryItem, MemoryStore

Open = Callable[..., MemoryStore]

ENTRIES = [
    WriteEntry("open the red door", trajectory="push\nopen", feedback="opened", success=True, id="e1/a"),
    WriteEntry("open the red door please", trajectory="pull", feedback="locked", success=False, id="e2/a"),
    WriteEntry("water the plants", trajectory="pour", feedback="ok", success=True, namespace="b",
               provenance={"episode": "e3"}),
    WriteEntry("open the red door", trajectory="kick", feedback="no", success=False, namespace="b", id="e4/b"),
]  # fmt: skip


class CountingEmbedder(HashEmbedder):
    def __init__(self, dim: int) -> None:
        super().__init__(dim=dim)
        self.calls: list[int] = []

    def embed(self, texts: Any) -> Any:
        self.calls.append(len(texts))
        return super().embed(texts)


def comparable(item: MemoryItem) -> tuple[Any, ...]:
    return item.namespace, item.intent, item.experience, item.q, item.visits, dict(item.meta)


def test_write_many_stores_what_a_loop_of_writes_stores(open_store: Open, tmp_path: Any) -> None:
    cfg = MemoryConfig(group_threshold=0.8)
    looped = open_store(cfg, url=f"sqlite:///{tmp_path / 'loop.db'}")
    one_by_one = [
        looped.write(e.intent, trajectory=e.trajectory, feedback=e.feedback, success=e.success,
                     namespace=e.namespace, provenance=e.provenance, id=e.id)
        for e in ENTRIES
    ]  # fmt: skip
    embedder = CountingEmbedder(64)
    batched = open_store(cfg, embedder=embedder)
    together = batched.write_many(ENTRIES)
    assert embedder.calls == [len(ENTRIES)]  # one embedding call for the whole batch
    assert [comparable(i) for i in together] == [comparable(i) for i in one_by_one]
    assert [i.id for i in together][:2] == ["e1/a", "e2/a"] and together[3].id == "e4/b"
    for ns in ("default", "b"):
        assert batched.stats(ns)["intents"] == looped.stats(ns)["intents"]
        assert [comparable(i) for i in batched.items(ns)] == [comparable(i) for i in looped.items(ns)]
        query = "open the red door"
        assert [i.experience for i in batched.retrieve(query, namespace=ns).items] == [
            i.experience for i in looped.retrieve(query, namespace=ns).items
        ]
    assert batched.stats("default")["intents"] == 1  # the two door intents were grouped


def test_write_many_is_idempotent_by_id(store: MemoryStore) -> None:
    first = store.write_many(ENTRIES)
    chat = ScriptedChat(["should not be asked"])
    again = store.write_many([ENTRIES[0], ENTRIES[1], ENTRIES[0]], llm=chat)
    assert again == [first[0], first[1], first[0]]
    assert chat.calls == []  # stored ids cost no model call
    assert store.stats()["count"] == len(ENTRIES)


def test_duplicate_ids_within_a_batch_are_written_once(store: MemoryStore) -> None:
    twin = WriteEntry("another task", trajectory="x", feedback="y", success=True, id="same")
    out = store.write_many([twin, ENTRIES[2], twin])
    assert out[0] == out[2] and out[0].id == "same"
    assert store.stats(None)["count"] == 2


def test_write_many_uses_the_llm_and_keeps_namespaces_apart(store: MemoryStore) -> None:
    chat = ScriptedChat(lambda messages: "1. look\n2. act")
    out = store.write_many(ENTRIES, llm=chat)
    assert len(chat.calls) == len(ENTRIES)
    assert all(item.meta["composed"] == "llm" and item.meta["writer"] == "user:local" for item in out)
    assert {i.namespace for i in out} == {"default", "b"}
    assert [i.id for i in store.items("b")] == [out[2].id, out[3].id]
    assert out[2].meta["provenance"] == {"episode": "e3"}
    assert out[2].id not in store.retrieve("water the plants").ids  # not visible from "default"


def test_a_bad_entry_is_rejected_before_anything_is_written(store: MemoryStore) -> None:
    bad = WriteEntry("  ", trajectory="x", feedback="y", success=True)
    with pytest.raises(ConfigError, match=r"entries\[1\].intent"):
        store.write_many([ENTRIES[0], bad])
    with pytest.raises(ConfigError, match="WriteEntry"):
        store.write_many([("intent", "x")])  # type: ignore[list-item]
    assert store.stats()["count"] == 0
    assert store.write_many([]) == []
