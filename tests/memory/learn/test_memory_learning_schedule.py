"""``MemoryConfig.alpha_schedule="visits"`` in the store: the database's update and the fold of Q in context
take the steps ``memory.learn.rule.alpha_for`` gives, from the memory's visits and from each context's own
count of rewards; the constant schedule (the default) is untouched."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from memory import MemoryConfig, MemoryStore, Reinforcement, RetrievalConfig
from memory.learn.rule import alpha_for, credit_weights, td_update
from memory.recall.context_q import context_values

REWARDS = [1.0, 1.0, -1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1.0, 1.0, -1.0, -1.0]


def by_loop(rewards: list[float], *, schedule: str, floor: float, q: float = 0.0, weight: float = 1.0) -> float:
    for n, r in enumerate(rewards):
        q = float(td_update(q, r, min(1.0, float(alpha_for(n, alpha=0.3, schedule=schedule, floor=floor)) * weight)))
    return q


@pytest.mark.parametrize(("schedule", "floor"), [("constant", 0.1), ("visits", 0.0), ("visits", 0.2)])
def test_the_stored_q_takes_the_schedules_steps(
    open_store: Callable[..., MemoryStore], schedule: str, floor: float
) -> None:
    store = open_store(MemoryConfig(alpha_schedule=schedule, alpha_floor=floor))  # type: ignore[arg-type]
    memory = store.add("door code of the Harbor warehouse", "4471").id
    recall = store.retrieve("door code of the Harbor warehouse")
    for i, r in enumerate(REWARDS[:6]):
        store.reinforce(recall, r, feedback_id=f"one-{i}")
    store.reinforce_many([Reinforcement(recall, r, f"batch-{i}") for i, r in enumerate(REWARDS[6:])])  # one statement
    after = store.get(memory)
    assert after.visits == len(REWARDS)
    assert after.q == pytest.approx(by_loop(REWARDS, schedule=schedule, floor=floor), abs=1e-15)


def test_a_wrong_rating_moves_a_memory_with_evidence_less_under_visits(
    open_store: Callable[..., MemoryStore],
) -> None:
    moved = {}
    for schedule in ("constant", "visits"):
        store = open_store(MemoryConfig(alpha_schedule=schedule, alpha_floor=0.1))  # type: ignore[arg-type]
        memory = store.add("door code of the Harbor warehouse", "4471", namespace=schedule).id
        recall = store.retrieve("door code of the Harbor warehouse", namespace=schedule)
        for i in range(8):
            store.reinforce(recall, 1.0, feedback_id=f"{schedule}-good-{i}")
        before = store.get(memory, namespace=schedule).q
        store.reinforce(recall, -1.0, feedback_id=f"{schedule}-wrong")
        moved[schedule] = before - store.get(memory, namespace=schedule).q
    assert moved["constant"] == pytest.approx(0.3 * (1 + (1 - 0.7**8)), abs=1e-12)  # α·(1 + Q), Q near 1
    assert moved["visits"] == pytest.approx(0.1 * (1 + 8 / 9), abs=1e-12)  # Q the mean 8/9; step 1/(8 + 2)
    assert moved["visits"] < moved["constant"] / 3


def test_score_credit_scales_the_visits_step(open_store: Callable[..., MemoryStore]) -> None:
    store = open_store(MemoryConfig(alpha_schedule="visits", alpha_floor=0.0, credit="score"))
    store.add_many([("door code of the Harbor warehouse", "4471"), ("door code of the Summit warehouse", "9902")])
    recall = store.retrieve("door code of the Harbor warehouse")
    weights = credit_weights(np.array(recall.scores), "score")
    assert len(recall) == 2 and weights[0] > 1 > weights[1]
    for i, r in enumerate(REWARDS[:4]):
        store.reinforce(recall, r, feedback_id=f"s-{i}")
    for item, w in zip(recall.ids, weights.tolist(), strict=True):
        assert store.get(item).q == pytest.approx(by_loop(REWARDS[:4], schedule="visits", floor=0.0, weight=w))


def test_q_in_context_counts_the_rewards_of_that_context_not_the_visits(open_store: Callable[..., MemoryStore]) -> None:
    """Five rewards for task A, then the first for task B: B's step is 1/2 (its first), not 1/(5 + 2)."""
    retrieval = RetrievalConfig(k1=1, k2=1, context_q=True, context_start="neutral")
    store = open_store(MemoryConfig(retrieval=retrieval, alpha_schedule="visits", alpha_floor=0.1))
    memory = store.add("door code of the Harbor warehouse", "4471").id
    for i in range(5):
        store.reinforce(store.retrieve("door code of the Harbor warehouse", context="task-a"), 1.0, feedback_id=f"a{i}")
    store.reinforce(store.retrieve("door code of the Harbor warehouse", context="task-b"), -1.0, feedback_id="b0")
    with store.engine.connect() as conn:
        values = context_values(conn, "default", ["task-a", "task-b"], alpha=0.3, first=0.0, schedule="visits",
                                floor=0.1)  # fmt: skip
    assert values == {"task-a": {memory: pytest.approx(5 / 6)}, "task-b": {memory: pytest.approx(-0.5)}}
    assert store.get(memory).q == pytest.approx(by_loop([1.0] * 5 + [-1.0], schedule="visits", floor=0.1))
    logged = store.explain(store.retrieve("door code of the Harbor warehouse", context="task-b").id)
    assert logged["candidates"][0]["q"] == pytest.approx(-0.5)  # the store folds the same way
