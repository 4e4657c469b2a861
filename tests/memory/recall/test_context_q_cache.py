"""Q in context kept between writes (``memory.recall.context_cache.ContextQCache``): recalls between two writes
fold nothing again and read no reward from SQL, and every write that changes what the fold reads — a
reward from another store, a tenant's rating that moves no stored Q, an expiry of the recall log — reaches
the next recall all the same. A tenant's overlay carried on from where it stood equals the fold of every
reward, bit for bit, and a reward committed late with an earlier time makes it fold everything again."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from sqlalchemy import event

from memory import MemoryConfig, MemoryStore, RetrievalConfig
from memory.config import ForgetConfig
from memory.learn.rewards import Reinforcement
from memory.recall.context_q import context_values, overlay_values
from memory.write.writer import WriteEntry

SHARED = "facility codes run — trained/solver"
ALICE = "facility codes run — trained@Ärztekammer-Nordrhein-Westfalen/solver"
QUERY = "door code of the harbor warehouse"
CONTEXT = "Quartz visitor badges — Standort Zürich-Altstetten"


def direction(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


class TableEmbedder:
    """The Quartzite memory at 0°, the Quartz memory at 37°; the question about Quartz at 15°, nearer the
    Quartzite memory (look-alikes): ranked by similarity alone, the wrong one comes first."""

    name, dim = "table-2d", 2
    VECTORS = {
        "Visitor badge colour at Quartzite": direction(0),
        "Visitor badge colour at Quartz": direction(37),
        "Which badge colour do Quartz visitors get?": direction(15),
        QUERY: direction(60),
    }

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([self.VECTORS[t] for t in texts], dtype=np.float32)


QUARTZ = "Which badge colour do Quartz visitors get?"
CFG = MemoryConfig(alpha=0.5, retrieval=RetrievalConfig(k1=5, k2=1, delta=-1.0, lam=0.7, context_start="neutral"))


@contextmanager
def statements(store: MemoryStore) -> Iterator[list[str]]:
    """The SQL statements ``store`` runs inside the block (its engine's cursor executions)."""
    seen: list[str] = []
    engine = store._db.engine  # the store's own engine: what a recall asks of the database

    def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", note)


def reads_rewards(seen: Sequence[str]) -> bool:
    return any("memory_feedback" in s or "memory_recall_summary" in s for s in seen)


def badges(open_store: Callable[..., MemoryStore], config: MemoryConfig = CFG) -> tuple[MemoryStore, str, str]:
    store = open_store(config, embedder=TableEmbedder())
    white = store.add("Visitor badge colour at Quartzite", "Quartzite badges are white.").id
    grey = store.add("Visitor badge colour at Quartz", "Quartz badges are grey.").id
    return store, white, grey


def test_recalls_between_two_writes_read_no_reward_from_sql(open_store: Callable[..., MemoryStore]) -> None:
    store, white, grey = badges(open_store)
    store.reinforce(store.retrieve(QUARTZ, context=CONTEXT), -1.0)  # the look-alike failed here
    with statements(store) as first:
        assert store.retrieve(QUARTZ, context=CONTEXT).ids == (grey,)
    with statements(store) as later:
        for _ in range(3):
            assert store.retrieve(QUARTZ, context=CONTEXT).ids == (grey,)
    assert reads_rewards(first)  # the reward changed the generation: folded again once
    assert not reads_rewards(later)


def test_a_reward_from_another_store_reaches_the_next_recall(open_store: Callable[..., MemoryStore]) -> None:
    store, white, grey = badges(open_store)
    for _ in range(2):  # the second answered from what the first folded
        assert store.retrieve(QUARTZ, context=CONTEXT).ids == (white,)
    other = open_store(CFG, embedder=TableEmbedder())
    other.reinforce(other.retrieve(QUARTZ, context=CONTEXT), -1.0)
    assert store.retrieve(QUARTZ, context=CONTEXT).ids == (grey,)


def test_a_tenants_rating_that_moves_no_stored_q_reaches_another_stores_next_recall(
    open_store: Callable[..., MemoryStore],
) -> None:
    config = MemoryConfig(alpha=0.5, retrieval=RetrievalConfig(k1=6, k2=1, delta=-1.0, lam=0.5))
    store = open_store(config, embedder=TableEmbedder())
    shared = [store.add(QUERY, f"the harbor door code is {code}", namespace=SHARED, q=0.2).id for code in "12"]
    for _ in range(2):
        assert store.retrieve(QUERY, namespace=ALICE, shared=SHARED).ids == (shared[0],)
    other = open_store(config, embedder=TableEmbedder())
    other.reinforce(other.retrieve(QUERY, namespace=ALICE, shared=SHARED), -1.0)
    assert [store.get(i, namespace=SHARED).q for i in shared] == [0.2, 0.2]  # the shared Q did not move
    assert store.retrieve(QUERY, namespace=ALICE, shared=SHARED).ids == (shared[1],)  # alice's overlay did


def test_an_expiry_of_the_recall_log_in_another_store_is_read_again(open_store: Callable[..., MemoryStore]) -> None:
    store, white, grey = badges(open_store)
    store.reinforce(store.retrieve(QUARTZ, context=CONTEXT), -1.0)
    assert store.retrieve(QUARTZ, context=CONTEXT).ids == (grey,)
    other = open_store(CFG, embedder=TableEmbedder())
    assert other.prune(config=ForgetConfig(recall_retention=0.0), now=time.time() + 1).recalls_expired == 2
    with statements(store) as seen:
        assert store.retrieve(QUARTZ, context=CONTEXT).ids == (grey,)  # the fold goes on from the summary
    assert any("memory_recall_summary" in s for s in seen)


def overlay_now(store: MemoryStore, config: MemoryConfig) -> dict[str, float]:
    """The tenant's overlay folded from every reward, read afresh (what a new store would rank by)."""
    with store._db.transaction(write=False) as conn:
        return overlay_values(
            conn, ALICE, SHARED, alpha=config.alpha, schedule=config.alpha_schedule, floor=config.alpha_floor
        )


@pytest.mark.parametrize("schedule", ["constant", "visits"])
def test_an_overlay_carried_on_from_where_it_stood_equals_the_fold_of_every_reward(
    open_store: Callable[..., MemoryStore], schedule: str
) -> None:
    config = MemoryConfig(alpha=0.3, alpha_schedule=schedule, retrieval=RetrievalConfig(k1=6, k2=2, delta=-1.0))
    store = open_store(config, embedder=TableEmbedder())
    other = open_store(config, embedder=TableEmbedder())
    for code in range(5):
        store.add(QUERY, f"the harbor door code is {code}", namespace=SHARED, q=0.2)
    rng = random.Random(7)
    for step in range(40):  # rewards from both stores, the overlay read between them
        writer = store if rng.random() < 0.6 else other
        writer.reinforce(writer.retrieve(QUERY, namespace=ALICE, shared=SHARED), rng.choice([-1.0, 0.5, 1.0]))
        recall = store.retrieve(QUERY, namespace=ALICE, shared=SHARED)
        fresh = overlay_now(store, config)
        kept = next(iter(store._folded.overlays.values())).values
        assert kept == fresh, f"step {step}"  # bit for bit: the same steps in the same order
        ranked = {c["id"]: c["q"] for c in store.explain(recall.id, namespace=ALICE)["candidates"]}
        assert ranked == {i: fresh.get(i, 0.2) for i in ranked}


def test_a_reward_committed_late_with_an_earlier_time_folds_everything_again(
    open_store: Callable[..., MemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = MemoryConfig(alpha=0.5, retrieval=RetrievalConfig(k1=6, k2=1, delta=-1.0, lam=0.5))
    store = open_store(config, embedder=TableEmbedder())
    other = open_store(config, embedder=TableEmbedder())
    shared = [store.add(QUERY, f"the harbor door code is {code}", namespace=SHARED, q=0.2).id for code in "12"]
    early = other.retrieve(QUERY, namespace=ALICE, shared=SHARED)  # rated later, stamped with an earlier time
    store.reinforce(store.retrieve(QUERY, namespace=ALICE, shared=SHARED), 1.0)
    assert store.retrieve(QUERY, namespace=ALICE, shared=SHARED).ids == (shared[0],)
    then = time.time() - 3600  # another machine's clock, an hour behind
    monkeypatch.setattr("memory.learn.rewards.time.time", lambda: then)
    other.reinforce(early, -1.0)
    monkeypatch.undo()
    store.retrieve(QUERY, namespace=ALICE, shared=SHARED)
    assert next(iter(store._folded.overlays.values())).values == overlay_now(store, config)


def held_contexts(store: MemoryStore) -> dict[tuple[Any, ...], dict[str, float]]:
    return {k: v for k, v in store._folded._values.items() if k[0] == "context"}


def fresh_contexts(store: MemoryStore, held: dict[tuple[Any, ...], dict[str, float]]) -> dict[tuple[Any, ...], Any]:
    """The same contexts' Q folded from every reward, read afresh (what a new store would rank by)."""
    with store._db.transaction(write=False) as conn:
        return {key: context_values(conn, key[1], [key[2]], alpha=key[3], first=key[4]).get(key[2], {}) for key in held}


@pytest.mark.parametrize("start", ["global", "neutral"])
def test_a_loop_of_recall_reward_and_write_carries_its_q_in_context_without_reading_a_reward_back(
    open_store: Callable[..., MemoryStore], start: str
) -> None:
    """The training loop's cycle (recalls by id, ``reinforce_many``, ``write_many``): the store folds its own
    rewards into the Q in context it holds, so the next batch's recalls read no reward from SQL, and what it
    holds equals the fold of every reward read afresh, bit for bit."""
    config = MemoryConfig(alpha=0.3, retrieval=RetrievalConfig(k1=5, k2=2, delta=-1.0, lam=0.5, context_start=start))
    store, _, _ = badges(open_store, config)
    contexts = [CONTEXT, "Hafen Nord — Tor 7, Schichtleitung Spätdienst", "visitor desk: Quartz lobby (east wing)"]
    rng = random.Random(11)
    for step in range(12):
        recalls = store.retrieve_many([QUARTZ] * len(contexts), contexts=contexts)
        store.reinforce_many(
            [Reinforcement(r.id, rng.choice([-1.0, 0.5, 1.0]), f"step {step}/{i}") for i, r in enumerate(recalls)]
        )
        if step % 3 == 0:
            store.write_many(
                [
                    WriteEntry(
                        "Visitor badge colour at Quartz",
                        trajectory=f"answered grey #{step}",
                        feedback="Correct.",
                        success=True,
                    )
                ]
            )
        with statements(store) as seen:
            store.retrieve_many([QUARTZ] * len(contexts), contexts=contexts, record=False)
        assert not reads_rewards(seen), f"step {step}"
        held = held_contexts(store)
        assert len(held) == len(contexts) and held == fresh_contexts(store, held), f"step {step}"


def test_a_reward_stamped_before_one_the_cache_holds_is_read_again(
    open_store: Callable[..., MemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another machine's clock ahead: its reward, folded from the log, was applied 'later' than this store's next
    one, so the log folds the two in the other order; the store reads the fold again instead of carrying it."""
    store, _, _ = badges(open_store)
    other = open_store(CFG, embedder=TableEmbedder())
    ahead = time.time() + 3600
    monkeypatch.setattr("memory.learn.rewards.time.time", lambda: ahead)
    other.reinforce_many([Reinforcement(other.retrieve(QUARTZ, context=CONTEXT).id, 1.0, "ahead")])
    monkeypatch.undo()
    store.retrieve(QUARTZ, context=CONTEXT)  # reads the other store's reward (applied an hour ahead)
    store.reinforce_many([Reinforcement(store.retrieve(QUARTZ, context=CONTEXT).id, -1.0, "now")])
    with statements(store) as seen:
        store.retrieve(QUARTZ, context=CONTEXT, record=False)
    assert reads_rewards(seen)
    held = held_contexts(store)
    assert held and held == fresh_contexts(store, held)
