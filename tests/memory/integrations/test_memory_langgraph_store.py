"""The LangGraph store adapter: LangGraph's put/get/search/list over the memory, and a real StateGraph on it."""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph", reason="the langchain extra (pip install -e '.[langchain]') is not installed")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, PutOp, SearchOp  # noqa: E402

from connectors.errors import ConfigError  # noqa: E402
from memory.integrations.langgraph_store import MemorySearchItem, MemoryStoreAdapter  # noqa: E402
from memory.store import MemoryStore  # noqa: E402

ALICE = ("users", "alice", "memories")


@pytest.fixture
def lg(store: MemoryStore) -> MemoryStoreAdapter:
    return MemoryStoreAdapter(store)


def test_put_then_get_round_trips_the_value_under_a_joined_namespace(lg: MemoryStoreAdapter) -> None:
    value = {"content": "Alice is allergic to peanuts", "kind": "fact", "tags": ["health"], "stars": 4}
    lg.put(ALICE, "allergy", value)

    item = lg.get(ALICE, "allergy")
    assert item is not None and item.value == value and item.key == "allergy" and item.namespace == ALICE
    assert item.created_at == item.updated_at and item.created_at.tzinfo is not None
    (memory,) = lg.store.items("users.alice.memories")
    assert memory.experience == memory.intent == "Alice is allergic to peanuts\nfact\nhealth"
    assert lg.get(ALICE, "missing") is None and lg.get(("users", "bob"), "allergy") is None


def test_putting_the_same_value_again_keeps_the_memory_and_its_learned_q(lg: MemoryStoreAdapter) -> None:
    lg.put(ALICE, "food", {"content": "Alice likes spicy noodles"})
    hit = lg.search(ALICE, query="what food does alice like")[0]
    assert isinstance(hit, MemorySearchItem)
    assert lg.reinforce(hit, 1.0) == 1

    lg.put(ALICE, "food", {"content": "Alice likes spicy noodles"})

    (memory,) = lg.store.items()
    assert memory.id == hit.memory_id and (memory.q, memory.visits) == (pytest.approx(0.3), 1)


def test_a_changed_value_is_a_new_version_that_replaces_the_old(lg: MemoryStoreAdapter) -> None:
    lg.put(ALICE, "food", {"content": "Alice likes spicy noodles"})
    first = lg.get(ALICE, "food")
    (old,) = lg.store.items()
    lg.reinforce(lg.search(ALICE, query="alice food")[0], 1.0)
    time.sleep(0.01)

    lg.put(ALICE, "food", {"content": "Alice went vegan"})

    (new,) = lg.store.items()
    item = lg.get(ALICE, "food")
    assert new.id != old.id and new.experience == "Alice went vegan" and (new.q, new.visits) == (0.0, 0)
    assert item is not None and first is not None and item.value == {"content": "Alice went vegan"}
    assert item.created_at == first.created_at and item.updated_at > first.updated_at
    assert [h.key for h in lg.search(ALICE, query="what does alice eat")] == ["food"]


def test_delete_removes_the_key(lg: MemoryStoreAdapter) -> None:
    lg.put(ALICE, "food", {"content": "Alice likes spicy noodles"})
    lg.put(ALICE, "pet", {"content": "Alice has a cat called Miso"})
    lg.delete(ALICE, "food")
    assert lg.get(ALICE, "food") is None
    assert [m.experience for m in lg.store.items()] == ["Alice has a cat called Miso"]
    assert [h.key for h in lg.search(ALICE, query="alice likes spicy noodles")] == ["pet"]
    lg.delete(ALICE, "never-there")  # deleting a missing key is a no-op, as in LangGraph's stores


def test_search_with_a_query_is_a_logged_q_ranked_recall(lg: MemoryStoreAdapter) -> None:
    lg.put(ALICE, "tip-a", {"content": "to reset the router hold the button", "source": "manual"})
    lg.put(ALICE, "tip-b", {"content": "to reset the router hold the button", "source": "forum"})
    lg.put(ALICE, "other", {"content": "water the garden early"})
    lg.store.add("to reset the router hold the button", "not alice's", namespace="scratch")

    hits = lg.search(ALICE, query="how to reset the router", limit=2)
    assert {h.key for h in hits} == {"tip-a", "tip-b"} and all(isinstance(h, MemorySearchItem) for h in hits)
    (recall_id,) = {h.recall_id for h in hits}  # type: ignore[attr-defined]
    logged = lg.store.explain(recall_id, namespace=hits[0].memory_namespace)  # type: ignore[attr-defined]
    assert [h.memory_id for h in hits] == logged["selected"]  # type: ignore[attr-defined]
    by_id = {c["id"]: c for c in logged["candidates"]}
    assert [h.score for h in hits] == [pytest.approx(by_id[h.memory_id]["score"]) for h in hits]  # type: ignore[attr-defined]
    assert hits[0].dict()["recall_id"] == recall_id and hits[0].dict()["q"] == 0.0

    # One text, so one similarity: only Q orders the two tips. Punish the one on top; the other rises.
    first = lg.search(ALICE, query="how to reset the router", limit=1)[0]
    assert lg.reinforce(first, -1.0) == 1
    second = lg.search(ALICE, query="how to reset the router", limit=1)[0]
    assert {first.key, second.key} == {"tip-a", "tip-b"}
    assert second.q == 0.0 and lg.get(ALICE, first.key) is not None  # type: ignore[attr-defined]
    assert [h.key for h in lg.search(ALICE, query="how to reset the router", filter={"source": "manual"})] == ["tip-a"]


def test_search_without_a_query_lists_filters_and_pages(lg: MemoryStoreAdapter) -> None:
    for i in range(5):
        lg.put(
            ("docs", "faq"), f"q{i}", {"text": f"question {i}", "stars": i, "meta": {"lang": "en" if i % 2 else "fr"}}
        )
    lg.put(("docs", "blog"), "post", {"text": "a post", "stars": 5})
    lg.put(("notes",), "n", {"text": "a note", "stars": 5})

    assert [h.key for h in lg.search(("docs",), limit=10)] == ["post", "q0", "q1", "q2", "q3", "q4"]
    assert [h.key for h in lg.search(("docs", "faq"), limit=2, offset=1)] == ["q1", "q2"]
    assert [h.key for h in lg.search(("docs",), filter={"stars": {"$gte": 3}})] == ["post", "q3", "q4"]
    assert [h.key for h in lg.search(("docs",), filter={"meta": {"lang": "en"}, "stars": {"$ne": 3}})] == ["q1"]
    assert [h.key for h in lg.search((), filter={"stars": 5})] == ["post", "n"]
    listed = lg.search(("notes",))
    assert listed[0].score is None and listed[0].recall_id is None  # type: ignore[attr-defined]
    assert lg.search(("nowhere",)) == [] and lg.search(("docs",), limit=0) == []


def test_list_namespaces_maps_store_namespaces_back_to_tuples(lg: MemoryStoreAdapter) -> None:
    for ns in [("users", "alice", "memories"), ("users", "bob", "memories"), ("users", "bob", "prefs"), ("docs",)]:
        lg.put(ns, "k", {"text": "x"})
    lg.store.add("unrelated", "evolver memory", namespace="run@tenant/solver")
    lg.store.add("unrelated", "bad labels", namespace="a..b")

    assert lg.list_namespaces() == sorted(
        [("docs",), ("run@tenant/solver",), ("users", "alice", "memories"), ("users", "bob", "memories"), ("users", "bob", "prefs")]
    )  # fmt: skip
    assert lg.list_namespaces(prefix=("users", "bob")) == [("users", "bob", "memories"), ("users", "bob", "prefs")]
    assert lg.list_namespaces(suffix=("memories",)) == [("users", "alice", "memories"), ("users", "bob", "memories")]
    assert lg.list_namespaces(prefix=("users", "*", "prefs")) == [("users", "bob", "prefs")]
    assert lg.list_namespaces(prefix=("users",), max_depth=2) == [("users", "alice"), ("users", "bob")]
    assert lg.list_namespaces(limit=2, offset=1) == [("run@tenant/solver",), ("users", "alice", "memories")]


def test_memories_written_without_the_adapter_are_visible(lg: MemoryStoreAdapter) -> None:
    memory = lg.store.add("sort a list of numbers", "use sorted(xs)")
    item = lg.get(("default",), memory.id)
    assert item is not None and item.value == {"intent": "sort a list of numbers", "experience": "use sorted(xs)"}
    assert [h.key for h in lg.search(("default",), query="sort numbers")] == [memory.id]
    lg.delete(("default",), memory.id)
    assert lg.store.items() == []


def test_values_with_intent_and_experience_are_stored_as_such(lg: MemoryStoreAdapter) -> None:
    lg.put(("team",), "lesson", {"intent": "deploy on friday", "experience": "do not", "by": "ops"})
    lg.put(("team",), "picked", {"title": "Router", "body": {"text": "hold reset"}}, index=["body.text"])
    by_key = {m.meta["langgraph"]["key"]: m for m in lg.store.items()}
    assert (by_key["lesson"].intent, by_key["lesson"].experience) == ("deploy on friday", "do not")
    assert by_key["picked"].intent == "hold reset"
    fielded = MemoryStoreAdapter(lg.store, fields=["title"])
    fielded.put(("team",), "titled", {"title": "Printer", "body": "open tray two"})
    assert [m.intent for m in lg.store.items() if m.meta["langgraph"]["key"] == "titled"] == ["Printer"]


def test_one_batch_reads_before_it_writes_and_the_last_put_to_a_key_wins(lg: MemoryStoreAdapter) -> None:
    results = lg.batch(
        [
            PutOp(ALICE, "k", {"text": "first"}),
            GetOp(ALICE, "k"),
            PutOp(ALICE, "k", {"text": "second"}),
            SearchOp(ALICE),
        ]
    )
    assert results == [None, None, None, []]
    assert lg.get(ALICE, "k").value == {"text": "second"}  # type: ignore[union-attr]
    assert len(lg.store.items()) == 1


@pytest.mark.parametrize(
    "call",
    [
        lambda lg: lg.put(("a.b",), "k", {"text": "x"}),
        lambda lg: lg.put((), "k", {"text": "x"}),
    ],
)
def test_namespaces_langgraph_refuses_are_refused(lg: MemoryStoreAdapter, call: Any) -> None:
    with pytest.raises(InvalidNamespaceError):
        call(lg)


@pytest.mark.parametrize(
    "ops",
    [
        [PutOp(("a.b",), "k", {"text": "x"})],  # straight to batch: our own check
        [PutOp(("a", ""), "k", {"text": "x"})],
        [PutOp(("x" * 201,), "k", {"text": "x"})],  # longer than a store namespace may be
        [PutOp(("a",), "k", {"text": {1, 2}})],  # not JSON
        [PutOp(("a",), "k", {"text": "x"}, ttl=5.0)],
        [PutOp(("a",), "fine", {"text": "x"}), PutOp(("a",), "k", {"text": "x"}, ttl=5.0)],  # nothing half-done
    ],
)
def test_bad_operations_are_config_errors_and_write_nothing(lg: MemoryStoreAdapter, ops: list[Any]) -> None:
    with pytest.raises(ConfigError):
        lg.batch(ops)
    assert lg.store.items() == []


def test_a_langgraph_state_graph_remembers_and_recalls_through_the_adapter(lg: MemoryStoreAdapter) -> None:
    class State(TypedDict, total=False):
        user: str
        fact: str
        question: str
        recalled: list[str]
        recall_ids: list[str]

    def remember(state: State, *, store: BaseStore) -> State:
        store.put(("users", state["user"], "memories"), f"fact-{len(state['fact'])}", {"content": state["fact"]})
        return {}

    def recall(state: State, *, store: BaseStore) -> State:
        hits = store.search(("users", state["user"]), query=state["question"], limit=2)
        return {"recalled": [h.value["content"] for h in hits], "recall_ids": [h.recall_id for h in hits]}  # type: ignore[attr-defined]

    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    graph = builder.compile(store=lg)

    graph.invoke({"user": "alice", "fact": "Alice's router is in the attic", "question": "where is the router"})
    out = graph.invoke({"user": "alice", "fact": "Alice's router password is on the fridge",
                        "question": "where is alice's router"})  # fmt: skip

    facts = {"Alice's router is in the attic", "Alice's router password is on the fridge"}
    assert set(out["recalled"]) == facts and len(set(out["recall_ids"])) == 1
    assert lg.store.reinforce(out["recall_ids"][0], 1.0, namespace="users.alice.memories") == 2
    assert sorted(m.visits for m in lg.store.items("users.alice.memories")) == [1, 1]


def test_an_async_graph_goes_through_abatch(lg: MemoryStoreAdapter) -> None:
    class State(TypedDict, total=False):
        keys: list[str]

    async def node(state: State, *, store: BaseStore) -> State:
        await store.aput(("notes",), "n1", {"text": "buy milk"})
        hits = await store.asearch(("notes",), query="milk")
        return {"keys": [h.key for h in hits]}

    class Counting(MemoryStoreAdapter):
        calls = 0

        async def abatch(self, ops: Any) -> Any:
            Counting.calls += 1
            return await super().abatch(ops)

    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    graph = builder.compile(store=Counting(lg.store))

    assert asyncio.run(graph.ainvoke({}))["keys"] == ["n1"]
    assert asyncio.run(graph.ainvoke({}))["keys"] == ["n1"]  # the same value again: still one memory
    assert Counting.calls >= 4
    assert [m.experience for m in lg.store.items("notes")] == ["buy milk"]


def test_constructor_arguments_are_checked(store: MemoryStore) -> None:
    for bad in ({"store": "sqlite://"}, {"store": store, "fields": "content"}, {"store": store, "config": {"k2": 1}}):
        with pytest.raises(ConfigError):
            MemoryStoreAdapter(**bad)
