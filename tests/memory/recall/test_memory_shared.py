"""A recall over two namespaces (a served tenant over its run's trained memory): one phase A and one phase
B over both, the source of each memory logged, and a tenant's rewards moving its own ranking of the
shared memories (its overlay Q) and never the shared Q another tenant ranks by."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from connectors.errors import ConfigError
from memory.config import MemoryConfig, RetrievalConfig
from memory.store import MemoryStore
from tests.memory.conftest import sqlite_only

SHARED = "facility codes run — trained/solver"  # a run name with spaces and a dash, as users name them
ALICE = "facility codes run — trained@Ärztekammer-Nordrhein-Westfalen/solver"
BOB = "facility codes run — trained@北海道-logistics-department-team/solver"
QUERY = "door code of the harbor warehouse"
CFG = MemoryConfig(alpha=0.5, retrieval=RetrievalConfig(k1=6, k2=2, delta=-1.0, lam=0.5))


def trained(store: MemoryStore) -> list[str]:
    """Three shared memories for the same question, equally similar and with equal Q."""
    return [
        store.add(QUERY, f"the harbor door code is {code}", namespace=SHARED, q=0.2).id
        for code in ("4411", "4412", "4413")
    ]


def test_one_recall_ranks_own_and_shared_memories_together_and_explain_names_the_source(store: MemoryStore) -> None:
    shared = trained(store)
    own = store.add(QUERY, "ask the night guard for the harbor door code", namespace=ALICE, q=0.9).id
    recall = store.retrieve(QUERY, namespace=ALICE, shared=SHARED)
    assert recall.namespace == ALICE and recall.shared == SHARED
    assert recall.ids[0] == own  # highest Q at equal similarity, ranked in the same phase B as the shared ones
    assert recall.ids[1] in shared and recall.items[1].namespace == SHARED
    explained = store.explain(recall.id, namespace=ALICE)
    assert explained["shared"] == SHARED
    assert {c["id"]: c["source"] for c in explained["candidates"]} == {own: ALICE} | {i: SHARED for i in shared}
    assert store.retrieve(QUERY, namespace=BOB, shared=SHARED).ids[0] in shared  # bob never sees alice's own


def test_a_tenants_rewards_move_its_ranking_and_not_the_shared_q_or_another_tenants(store: MemoryStore) -> None:
    shared = trained(store)
    first = store.retrieve(QUERY, namespace=ALICE, shared=SHARED)
    assert store.reinforce(first, -1.0) == 2  # both selected memories count as rated by alice
    for _ in range(3):  # alice rates whatever she is shown down until her top choice changes
        recall = store.retrieve(QUERY, namespace=ALICE, shared=SHARED)
        store.reinforce(recall, -1.0)
    alice = store.retrieve(QUERY, namespace=ALICE, shared=SHARED, record=False)
    bob = store.retrieve(QUERY, namespace=BOB, shared=SHARED, record=False)
    assert [store.get(i, namespace=SHARED).q for i in shared] == [0.2, 0.2, 0.2]  # shared Q untouched
    assert [store.get(i, namespace=SHARED).visits for i in shared] == [0, 0, 0]
    assert bob.ids == (shared[0], shared[1])  # equal Q: ties keep the older memories, as before alice rated
    assert set(first.ids) == {shared[0], shared[1]} and alice.ids[0] == shared[2]  # her overlay moved them down
    rated = {c["id"]: c["q"] for c in store.explain(recall.id, namespace=ALICE)["candidates"]}
    assert rated[shared[0]] < 0.2 and rated[shared[2]] <= 0.2


def test_a_repeated_reward_moves_the_overlay_once(store: MemoryStore) -> None:
    shared = trained(store)
    recall = store.retrieve(QUERY, namespace=ALICE, shared=SHARED)
    store.reinforce(recall, 1.0, feedback_id="rating-1")
    once = store.explain(store.retrieve(QUERY, namespace=ALICE, shared=SHARED).id, namespace=ALICE)["candidates"]
    store.reinforce(recall, 1.0, feedback_id="rating-1")
    again = store.explain(store.retrieve(QUERY, namespace=ALICE, shared=SHARED).id, namespace=ALICE)["candidates"]
    assert [c["q"] for c in once] == [c["q"] for c in again]
    assert {c["id"]: c["q"] for c in once}[shared[0]] == pytest.approx(0.2 + 0.5 * (1.0 - 0.2))


def test_the_tenants_own_memories_learn_as_before(store: MemoryStore) -> None:
    trained(store)
    own = store.add(QUERY, "ask the night guard", namespace=ALICE, q=0.9).id
    store.reinforce(store.retrieve(QUERY, namespace=ALICE, shared=SHARED), 1.0)
    assert store.get(own, namespace=ALICE).visits == 1 and store.get(own, namespace=ALICE).q > 0.9


def test_shared_must_be_another_namespace(store: MemoryStore) -> None:
    with pytest.raises(ConfigError, match="shared must be another namespace"):
        store.retrieve(QUERY, namespace=ALICE, shared=ALICE)
    with pytest.raises(ConfigError, match="namespace must be a non-empty string"):
        store.retrieve(QUERY, namespace=ALICE, shared="")


def test_an_empty_shared_or_own_namespace_recalls_the_other(store: MemoryStore) -> None:
    shared = trained(store)
    assert set(store.retrieve(QUERY, namespace=ALICE, shared=SHARED).ids) <= set(shared)
    own = store.add(QUERY, "ask the night guard", namespace=BOB).id
    assert store.retrieve(QUERY, namespace=BOB, shared="nobody trained this").ids == (own,)


@sqlite_only
def test_a_store_from_before_shared_recalls_gains_the_columns(db_url: str, tmp_path: Path) -> None:
    with MemoryStore(db_url, embedder=store_embedder(), config=CFG) as store:
        trained(store)
        old = store.retrieve(QUERY, namespace=SHARED).id
    with sqlite3.connect(tmp_path / "memory.db") as conn:
        conn.execute("ALTER TABLE memory_recalls DROP COLUMN shared")
        conn.execute("ALTER TABLE memory_recall_items DROP COLUMN shared")
    with MemoryStore(db_url, embedder=store_embedder(), config=CFG) as store:
        assert {c["source"] for c in store.explain(old, namespace=SHARED)["candidates"]} == {SHARED}
        assert store.retrieve(QUERY, namespace=ALICE, shared=SHARED).shared == SHARED


def store_embedder() -> object:
    from connectors.embedders import HashEmbedder

    return HashEmbedder(dim=64)


@pytest.fixture
def store(open_store: object) -> MemoryStore:
    return open_store(CFG)  # type: ignore[operator]
