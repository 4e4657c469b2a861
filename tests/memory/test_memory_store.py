"""MemoryStore behaviour a user relies on: the Q maths, feedback, grouping, namespaces, logs, export."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from connectors.embedders import HashEmbedder
from connectors.errors import ConfigError, StoreError
from memory.config import MemoryConfig, RetrievalConfig, similarity_only
from memory.learn.rewards import Reinforcement
from memory.learn.rule import td_update
from memory.storage.records import MemoryItem
from memory.store import MemoryStore, Recall

Open = Callable[..., MemoryStore]


def test_add_retrieve_reinforce_follow_the_td_rule(store: MemoryStore) -> None:
    item = store.add("sort a list of numbers", "use sorted(xs)", success=True, meta={"episode": "e1"})
    assert (item.q, item.visits, item.success, item.meta["episode"]) == (0.0, 0, True, "e1")
    first = store.retrieve("sort a list of numbers")
    assert first.ids == (item.id,) and first.details[0].sim == pytest.approx(1.0)
    assert store.reinforce(first, 1.0) == 1
    assert store.get(item.id).q == 0.3
    second = store.retrieve("sort a list of numbers")
    assert second.items[0].q == 0.3  # the recall reads the new Q
    assert store.reinforce(second.id, 1.0) == 1
    after = store.get(item.id)
    assert after.q == float(td_update(0.3, 1.0, 0.3)) == pytest.approx(0.51, abs=1e-15)
    assert after.visits == 2


def test_feedback_id_makes_reinforce_idempotent(store: MemoryStore) -> None:
    store.add("parse a date", "use datetime.fromisoformat")
    recall = store.retrieve("parse a date")
    assert store.reinforce(recall, 1.0, feedback_id="episode-7") == 1
    assert store.reinforce(recall, 1.0, feedback_id="episode-7") == 0
    assert store.reinforce(recall.id, 0.0, feedback_id="episode-7") == 0
    assert store.get(recall.ids[0]).q == 0.3 and store.get(recall.ids[0]).visits == 1
    entries = [Reinforcement(recall, 1.0, "a"), Reinforcement(recall, 1.0, "a"), Reinforcement(recall, 1.0, "b")]
    assert store.reinforce_many(entries) == 2


def test_tuple_entries_still_reinforce_with_a_deprecation_warning(store: MemoryStore) -> None:
    """The form before 0.2.0, plain tuples, works for one more release and says what to write instead."""
    store.add("parse a date", "use datetime.fromisoformat")
    recall = store.retrieve("parse a date")
    with pytest.warns(DeprecationWarning, match=r"takes Reinforcement\(recall, reward, feedback_id, namespace\)"):
        assert store.reinforce_many([(recall, 1.0, "old-form"), (recall.id, 1.0, "old-form")]) == 1
    assert store.get(recall.ids[0]).visits == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Reinforcements, and reinforce itself, warn about nothing
        assert store.reinforce_many([Reinforcement(recall, 1.0, "new-form")]) == 1
        assert store.reinforce(recall, 1.0, feedback_id="single") == 1
    assert store.get(recall.ids[0]).visits == 3


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "1.0", None, [1.0]])
def test_bad_reward_is_rejected_and_nothing_changes(store: MemoryStore, bad: object) -> None:
    store.add("parse a date", "use datetime.fromisoformat")
    recall = store.retrieve("parse a date")
    with pytest.raises(ConfigError, match="reward"):
        store.reinforce(recall, bad, feedback_id="f")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="reward"):
        store.reinforce_many([Reinforcement(recall, 1.0, "ok"), Reinforcement(recall, bad, "bad")])  # type: ignore[arg-type]
    item = store.get(recall.ids[0])
    assert (item.q, item.visits) == (0.0, 0)
    assert store.explain(recall.id)["feedback"] == []
    assert store.reinforce(recall, 1.0, feedback_id="f") == 1  # the rejected id was not consumed


def test_unknown_recall_id_is_a_store_error_and_changes_nothing(store: MemoryStore) -> None:
    store.add("parse a date", "use datetime.fromisoformat")
    good = store.retrieve("parse a date")
    with pytest.raises(StoreError, match="unknown recall id 'nope'"):
        store.reinforce_many([Reinforcement(good, 1.0, "x"), Reinforcement("nope", 1.0, "y")])
    assert store.get(good.ids[0]).visits == 0
    unlogged = store.retrieve("parse a date", record=False)
    with pytest.raises(StoreError, match="record=False"):
        store.reinforce(unlogged.id, 1.0)
    assert store.reinforce(unlogged, 1.0) == 1  # the Recall object itself carries what to update


def test_similar_intents_share_a_key_and_q_breaks_the_tie(open_store: Open) -> None:
    store = open_store(MemoryConfig(retrieval=RetrievalConfig(k1=5, k2=1), group_threshold=0.8))
    a = store.add("book a flight from paris to rome", "plan A")
    b = store.add("book a flight from paris to rome please", "plan B")  # cos ≈ 0.94 with a
    store.add("water the plants", "unrelated")
    assert store.stats()["intents"] == 2
    recall = store.retrieve("flight to rome", config=RetrievalConfig(k1=5, k2=2))
    assert set(recall.ids) == {a.id, b.id}
    assert recall.details[0].sim == recall.details[1].sim  # same key vector, same similarity
    assert recall.ids[0] == a.id  # equal everything: the older item first
    store.reinforce(Recall("hand-made", "default", "", (store.get(b.id),), (0.0,), (), 1, 0, False), 1.0)
    assert store.retrieve("flight to rome").ids == (b.id,)  # Q decides inside the group


def test_namespaces_are_isolated(store: MemoryStore) -> None:
    mine = store.add("reset a password", "use the admin panel", namespace="tenant-a")
    theirs = store.add("reset a password", "call support", namespace="tenant-b")
    recall = store.retrieve("reset a password", namespace="tenant-a")
    assert recall.ids == (mine.id,)
    store.reinforce(recall, 1.0)
    assert store.get(theirs.id, namespace="tenant-b").q == 0.0
    assert store.stats("tenant-a")["count"] == 1 and store.stats()["count"] == 2
    assert [i.id for i in store.items("tenant-b")] == [theirs.id]
    assert store.retrieve("reset a password", namespace="tenant-c").items == ()


def test_floor_filters_and_empty_recall_is_still_logged(store: MemoryStore) -> None:
    store.add("reset a password", "use the admin panel")
    store.add("water plants daily", "twice a week")  # cosine 0 with both queries below
    recall = store.retrieve("reset my password", config=RetrievalConfig(k1=5, k2=5, delta=0.5))
    assert len(recall) == 1 and recall.pool_size == 1 and recall.filtered == 1
    nothing = store.retrieve("quantum chromodynamics", config=RetrievalConfig(delta=0.9))
    assert not nothing and nothing.pool_size == 0 and nothing.filtered == 2
    logged = store.explain(nothing.id)
    assert logged["selected"] == [] and all(c["filtered"] for c in logged["candidates"])
    assert store.reinforce(nothing, 1.0) == 0


def test_explain_shows_every_candidate_and_the_feedback(store: MemoryStore) -> None:
    for i in range(6):
        store.add(f"deploy service {i} to staging", f"runbook {i}")
    cfg = RetrievalConfig(k1=4, k2=2, delta=0.0, lam=0.5)
    recall = store.retrieve("deploy service 3 to staging", config=cfg)
    store.reinforce(recall, 0.5, feedback_id="fb-1")
    info = store.explain(recall.id)
    assert info["query"] == "deploy service 3 to staging" and info["config"]["k1"] == 4
    assert info["pool_size"] == 4 and info["filtered"] == 0 and info["explored"] is False
    assert info["selected"] == list(recall.ids)
    cands = info["candidates"]
    assert [c["position"] for c in cands] == [0, 1, 2, 3]
    assert [c["sim"] for c in cands] == sorted((c["sim"] for c in cands), reverse=True)
    chosen = [c for c in cands if c["selected"]]
    assert [c["score"] for c in sorted(chosen, key=lambda c: c["rank"])] == list(recall.scores)
    assert all(set(c) >= {"sim", "q", "z_sim", "z_q", "score"} for c in cands)
    assert info["feedback"][0]["id"] == "fb-1" and info["feedback"][0]["items"] == 2
    with pytest.raises(StoreError, match="unknown recall id"):
        store.explain("missing")


def test_similarity_only_config_never_moves_q(open_store: Open) -> None:
    store = open_store(similarity_only(MemoryConfig()))
    store.add("sort numbers", "sorted()")
    recall = store.retrieve("sort numbers")
    store.reinforce(recall, 1.0)
    item = store.get(recall.ids[0])
    assert (item.q, item.visits) == (0.0, 1)


def test_score_credit_gives_the_top_item_more(open_store: Open) -> None:
    store = open_store(MemoryConfig(credit="score", retrieval=RetrievalConfig(k1=3, k2=3, lam=0.0)))
    for text in ["read a csv file", "read a csv file with pandas", "write a csv"]:
        store.add(text, text)
    recall = store.retrieve("read a csv file")
    store.reinforce(recall, 1.0)
    qs = [store.get(i).q for i in recall.ids]
    assert qs[0] > qs[-1] > 0 and max(qs) <= 1.0


def test_retrieve_many_equals_one_by_one(store: MemoryStore) -> None:
    for i in range(20):
        store.add(f"task {i} on topic {i % 4}", f"exp {i}")
    queries = ["task on topic 1", "task 7", "topic 3 task 11"]
    batch = store.retrieve_many(queries)
    single = [store.retrieve(q) for q in queries]
    assert [r.ids for r in batch] == [r.ids for r in single]
    assert [r.scores for r in batch] == [r.scores for r in single]
    assert len({r.id for r in batch + single}) == 6


def test_epsilon_exploration_is_reproducible_with_a_seed(open_store: Open, db_url: str) -> None:
    cfg = MemoryConfig(retrieval=RetrievalConfig(k1=8, k2=2, epsilon=1.0))
    first = open_store(cfg, seed=3)
    for i in range(10):
        first.add(f"task {i}", f"exp {i}")
    picks = [first.retrieve("task 1", record=False) for _ in range(5)]
    again = open_store(cfg, seed=3)
    assert [again.retrieve("task 1", record=False).ids for _ in range(5)] == [r.ids for r in picks]
    assert all(r.explored for r in picks)


def test_export_import_round_trip(store: MemoryStore, tmp_path: Path, embedder: HashEmbedder) -> None:
    a = store.add("sort numbers", "sorted()", success=True, meta={"k": [1, 2]})
    store.add("plan a trip", "book early", namespace="travel")
    store.reinforce(store.retrieve("sort numbers"), 1.0)
    path = tmp_path / "out" / "memories.jsonl"
    assert store.export(path) == 2
    assert json.loads(path.read_text().splitlines()[0])["format"] == "evolve.memory"
    other = MemoryStore(f"sqlite:///{tmp_path / 'other.db'}", embedder=embedder)
    assert other.import_(path) == 2
    assert other.import_(path) == 0  # idempotent by id
    want = {i.id: i for i in store.items()}
    got = {i.id: i for i in other.items()}
    assert got == want
    assert got[a.id].q == 0.3 and got[a.id].visits == 1
    assert got[a.id].meta == {"k": [1, 2], "writer": "user:local", "success": True}
    assert other.retrieve("sort numbers").ids == (a.id,)
    assert store.export(tmp_path / "travel.jsonl", namespace="travel") == 1
    other.close()


def test_import_with_another_embedder_embeds_again(store: MemoryStore, tmp_path: Path) -> None:
    a = store.add("sort numbers", "sorted()")
    store.export(tmp_path / "m.jsonl")
    other = MemoryStore("sqlite://", embedder=HashEmbedder(dim=32))
    assert other.import_(tmp_path / "m.jsonl") == 1
    assert other.retrieve("sort numbers").ids == (a.id,)
    other.close()


def test_import_reports_bad_lines(store: MemoryStore, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"format": "evolve.memory", "version": 1}\n{"id": "x"}\n')
    with pytest.raises(ConfigError, match="bad.jsonl:2"):
        store.import_(path)


def test_capacity_evicts_lowest_q_then_never_visited_then_oldest(open_store: Open) -> None:
    store = open_store(MemoryConfig(capacity=3, retrieval=RetrievalConfig(k1=1, k2=1)))
    old = store.add("alpha task", "a")
    kept = store.add("beta task", "b", q=0.5)
    visited = store.add("gamma task", "c")
    store.reinforce(store.retrieve("gamma task"), 0.0)  # visited, Q stays 0
    newest = store.add("delta task", "d")
    assert {i.id for i in store.items()} == {kept.id, visited.id, newest.id}  # old: Q 0, never visited
    store.add("epsilon task", "e")  # delta and gamma both have Q 0: the never-visited one goes
    assert newest.id not in {i.id for i in store.items()} and visited.id in {i.id for i in store.items()}
    assert old.id not in store.retrieve("alpha task").ids
    assert store.stats()["count"] == 3


def test_inputs_are_checked(store: MemoryStore) -> None:
    with pytest.raises(ConfigError, match="intent"):
        store.add("", "x")
    with pytest.raises(ConfigError, match="namespace"):
        store.add("a", "b", namespace="")
    with pytest.raises(ConfigError, match="JSON"):
        store.add("a", "b", meta={"f": object()})
    with pytest.raises(ConfigError, match="single string"):
        store.retrieve_many("abc")
    with pytest.raises(ConfigError, match=r"shape \(1, 64\)"):
        store.add_many([("a", "b")], embeddings=np.zeros((1, 3)))
    with pytest.raises(StoreError, match="unknown memory id"):
        store.get("nope")


def test_add_many_with_embeddings_and_per_row_meta(store: MemoryStore) -> None:
    vecs = np.eye(64, dtype=np.float32)[:3] * 5  # rows are normalised on the way in
    ids = [
        m.id
        for m in store.add_many(
            [("a", "x"), ("b", "y"), ("c", "z")], embeddings=vecs, meta=[{"i": 0}, {"i": 1}, {"i": 2}]
        )
    ]
    assert [store.get(i).meta["i"] for i in ids] == [0, 1, 2]
    assert store.stats()["intents"] == 3


def test_add_many_returns_what_add_returns_for_each_row(store: MemoryStore) -> None:
    rows = [("sort a list", "use sorted()"), ("parse a date", "use fromisoformat"), ("sort a list", "key=len")]
    items = store.add_many(rows, namespace="team", meta={"source": "bulk"})
    assert all(isinstance(m, MemoryItem) for m in items)
    assert [(m.intent, m.experience, m.namespace, m.meta["source"]) for m in items] == [
        (i, e, "team", "bulk") for i, e in rows
    ]
    assert items == [store.get(m.id, namespace="team") for m in items]
    one = store.add("book a flight", "search by date", namespace="team")
    assert type(one) is type(items[0]) and store.add_many([], namespace="team") == []


def test_a_store_refuses_another_embedder_and_a_closed_store_refuses_work(open_store: Open) -> None:
    store = open_store()
    store.add("a", "b")
    with pytest.raises(StoreError, match="embedder 'hash-64'"):
        open_store(embedder=HashEmbedder(dim=32))
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.retrieve("a")


def test_stats_describe_the_q_distribution(store: MemoryStore) -> None:
    assert store.stats()["count"] == 0 and store.stats()["q"]["mean"] is None
    for q in (0.0, 0.5, 1.0):
        store.add(f"task {q}", "x", q=q)
    s = store.stats()
    assert s["q"]["mean"] == pytest.approx(0.5) and s["q"]["min"] == 0.0 and s["q"]["max"] == 1.0
    assert sum(s["q"]["histogram"]["counts"]) == 3 and s["visits"]["never_visited"] == 3


def test_recalled_items_are_fresh_copies(store: MemoryStore) -> None:
    store.add("sort numbers", "sorted()", meta={"tags": "py"})
    first = store.retrieve("sort numbers")
    first.items[0].meta["tags"] = "changed by the caller"  # type: ignore[index]
    store.reinforce(first, 1.0)
    again = store.retrieve("sort numbers").items[0]  # served from the text cache
    assert again.meta == {"tags": "py", "writer": "user:local", "success": None} and (again.q, again.visits) == (0.3, 1)


def test_item_cache_keeps_the_most_recently_used() -> None:
    from memory.storage.records import ItemCache, MemoryItem

    cache = ItemCache(size=2)
    items = [MemoryItem(f"m{i}", "default", "t", "e", 0.0, 0, 0.0, {}) for i in range(3)]
    cache.put(items[:2])
    assert cache.get("m0") is items[0]  # m0 becomes the most recent
    cache.put(items[2:])
    assert cache.missing(["m0", "m1", "m2"]) == ["m1"]
