"""The LangChain retriever over the memory: LangChain's own standard suite, and what the Documents carry."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core", reason="the langchain extra (pip install -e '.[langchain]') is not installed")
pytest.importorskip("langchain_tests", reason="langchain-tests (dev extra) is not installed")

from langchain_core.documents import Document  # noqa: E402
from langchain_tests.integration_tests import RetrieversIntegrationTests  # noqa: E402

from connectors.embedders import HashEmbedder  # noqa: E402
from connectors.errors import ConfigError  # noqa: E402
from memory.config import RetrievalConfig  # noqa: E402
from memory.integrations.langchain import MemoryRetriever, recall_config  # noqa: E402
from memory.store import MemoryStore  # noqa: E402
from tests.support.extras import import_without  # noqa: E402

QUERY = "how do I sort a list of numbers"
SORTING = [
    ("sort a list of numbers", "use sorted(xs)"),
    ("sort a list of numbers in reverse", "use sorted(xs, reverse=True)"),
    ("sort a list of words", "use sorted(words, key=str.lower)"),
    ("sort numbers in place", "use xs.sort()"),
    ("sort a list of pairs by the second number", "use sorted(pairs, key=lambda p: p[1])"),
    ("how to sort a list of numbers quickly", "sorted is O(n log n); do not write your own"),
]
OTHER = [("book a flight to Paris", "search by date first"), ("water the garden", "early in the morning")]


class TestMemoryRetrieverStandard(RetrieversIntegrationTests):
    """LangChain's standard retriever checks (langchain-tests 1.1.9) on a real store in a SQLite file."""

    @pytest.fixture(autouse=True)
    def seeded_store(self, tmp_path: Path) -> Iterator[MemoryStore]:
        self.memory = MemoryStore(f"sqlite:///{tmp_path / 'memory.db'}", embedder=HashEmbedder(dim=64))
        self.memory.add_many(SORTING + OTHER)
        yield self.memory
        self.memory.close()

    @property
    def retriever_constructor(self) -> type[MemoryRetriever]:
        return MemoryRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"store": self.memory, "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return QUERY


def test_documents_carry_the_recall_and_each_memorys_numbers(store: MemoryStore) -> None:
    store.add_many(SORTING + OTHER)
    docs = MemoryRetriever(store=store, k=3).invoke(QUERY)

    assert len(docs) == 3 and all(isinstance(d, Document) for d in docs)
    recall_id = docs[0].metadata["recall_id"]
    logged = store.explain(recall_id)
    assert [d.metadata["memory_id"] for d in docs] == [d.id for d in docs] == logged["selected"]
    by_id = {c["id"]: c for c in logged["candidates"]}
    for rank, doc in enumerate(docs):
        item = store.get(doc.id)  # type: ignore[arg-type]
        assert doc.page_content == item.experience and doc.metadata["intent"] == item.intent
        assert doc.metadata["recall_id"] == recall_id and doc.metadata["rank"] == rank
        assert doc.metadata["namespace"] == "default"
        assert (doc.metadata["q"], doc.metadata["visits"]) == (item.q, item.visits)
        assert doc.metadata["similarity"] == pytest.approx(by_id[doc.id]["sim"])
        assert doc.metadata["score"] == pytest.approx(by_id[doc.id]["score"])
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)


def test_the_recall_id_reinforces_exactly_the_returned_memories(store: MemoryStore) -> None:
    store.add_many(SORTING + OTHER)
    docs = MemoryRetriever(store=store, k=2).invoke(QUERY)

    assert store.reinforce(docs[0].metadata["recall_id"], 1.0) == 2
    moved = {item.id for item in store.items() if item.visits}
    assert moved == {d.id for d in docs}


def test_q_changes_what_the_retriever_returns(store: MemoryStore) -> None:
    # One intent, so one similarity: only Q (phase B, λ = 0.5) tells the two memories apart.
    steady = store.add("reset the router", "hold the button for ten seconds", q=0.0).id
    lucky = store.add("reset the router", "unplug it and hope", q=0.5).id
    retriever = MemoryRetriever(store=store, k=1)
    returned = []
    for _ in range(3):
        doc = retriever.invoke("reset the router")[0]
        returned.append(doc.id)
        store.reinforce(doc.metadata["recall_id"], -1.0)  # the answer it led to was wrong
    assert returned == [lucky, lucky, steady]  # Q: 0.5 -> 0.05 -> -0.265, below the steady one's 0


def test_k_at_construction_and_per_call_maps_to_k2(store: MemoryStore) -> None:
    store.add_many(SORTING)
    retriever = MemoryRetriever(store=store)  # the store's default k2 (5)
    assert len(retriever.invoke(QUERY)) == 5
    assert len(retriever.invoke(QUERY, k=6)) == 6  # beyond the store's k1? widened: k1 = max(k1, k)
    assert len(MemoryRetriever(store=store, k=1).invoke(QUERY)) == 1
    assert len(MemoryRetriever(store=store, k=1).invoke(QUERY, k=4)) == 4
    cfg = RetrievalConfig(k1=3, k2=2, lam=0.0)
    assert recall_config(cfg, None) is cfg
    assert recall_config(cfg, 5) == RetrievalConfig(k1=5, k2=5, lam=0.0)
    assert store.explain(retriever.invoke(QUERY, k=6)[0].metadata["recall_id"])["config"]["k2"] == 6


def test_async_invoke_passes_k_through(store: MemoryStore) -> None:
    store.add_many(SORTING)
    docs = asyncio.run(MemoryRetriever(store=store, k=2).ainvoke(QUERY, k=3))
    assert len(docs) == 3 and docs[0].metadata["recall_id"]


def test_an_empty_namespace_returns_no_documents(store: MemoryStore) -> None:
    store.add_many(SORTING)
    assert MemoryRetriever(store=store, namespace="nobody").invoke(QUERY) == []


@pytest.mark.parametrize(
    "make",
    [
        lambda s: MemoryRetriever(store=s, k=0),
        lambda s: MemoryRetriever(store=s, k=True),
        lambda s: MemoryRetriever(store=s, k="3"),
        lambda s: MemoryRetriever(store="sqlite://"),
        lambda s: MemoryRetriever(store=s, namespace=""),
        lambda s: MemoryRetriever(store=s, config={"k2": 3}),
        lambda s: MemoryRetriever(store=s).invoke(QUERY, k=0),
        lambda s: MemoryRetriever(store=s).invoke(QUERY, k=2.5),
    ],
)
def test_bad_arguments_are_config_errors(store: MemoryStore, make: Callable[[MemoryStore], Any]) -> None:
    with pytest.raises(ConfigError):
        make(store)


def test_without_the_extra_importing_names_it_and_import_memory_does_not_need_it() -> None:
    for module in ("memory.integrations.langchain", "memory.integrations.langchain_tracker"):
        out = import_without("langchain_core", module)
        assert out.startswith("ConfigError") and "pip install -e '.[langchain]'" in out
    assert import_without("langgraph", "memory.integrations.langgraph_store").startswith("ConfigError")
    assert import_without("langchain_core", "memory") == "imported"
