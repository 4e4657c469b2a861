"""Feedback by LangChain run id: exactly the recalls made under the run move, once per feedback id."""

from __future__ import annotations

import asyncio
import math
from typing import Any
from uuid import UUID, uuid4

import pytest

pytest.importorskip("langchain_core", reason="the langchain extra (pip install -e '.[langchain]') is not installed")

from langchain_core.runnables import RunnableLambda, RunnableParallel  # noqa: E402
from langchain_core.tracers.context import collect_runs  # noqa: E402

from connectors.errors import ConfigError, StoreError  # noqa: E402
from memory.integrations.langchain import MemoryRetriever  # noqa: E402
from memory.integrations.langchain_tracker import RecallTracker, RunFeedback  # noqa: E402
from memory.learn.rewards import Reinforcement  # noqa: E402
from memory.store import MemoryStore  # noqa: E402

ROUTER = [("reset the home router", "hold reset for ten seconds"), ("router keeps dropping wifi", "change the channel")]
PRINTER = [("printer says paper jam", "open tray two"), ("printer prints blank pages", "replace the toner")]
GARDEN = [("water the tomato plants", "early in the morning"), ("prune the apple tree", "in late winter")]


def snapshot(store: MemoryStore) -> dict[str, tuple[float, int]]:
    return {item.id: (item.q, item.visits) for item in store.items()}


def moved(before: dict[str, tuple[float, int]], after: dict[str, tuple[float, int]]) -> set[str]:
    return {i for i in before if after[i] != before[i]}


@pytest.fixture
def seeded(store: MemoryStore) -> MemoryStore:
    store.add_many(ROUTER + PRINTER + GARDEN)
    return store


def test_feedback_on_a_run_moves_exactly_the_memories_it_recalled(seeded: MemoryStore) -> None:
    tracker = RecallTracker(seeded)
    chain = MemoryRetriever(store=seeded, k=2) | RunnableLambda(lambda docs: [d.id for d in docs])
    run = uuid4()
    recalled = chain.invoke("my router keeps dropping wifi", config={"callbacks": [tracker], "run_id": run})
    before = snapshot(seeded)

    record = tracker.feedback(run, 1.0, comment="fixed it")

    after = snapshot(seeded)
    assert len(recalled) == 2 and moved(before, after) == set(recalled)
    assert all(after[i] == (pytest.approx(0.3), 1) for i in recalled)  # Q ← 0 + 0.3·(1 − 0)
    assert isinstance(record, RunFeedback) and record.reinforced == 2 and len(record.recall_ids) == 1
    assert (record.run_id, record.key, record.score, record.comment) == (run, "score", 1.0, "fixed it")
    assert record.feedback_id == f"{run}:score" and tracker.records == [record]


def test_the_same_feedback_id_is_applied_once(seeded: MemoryStore) -> None:
    tracker = RecallTracker(seeded)
    run = uuid4()
    chain = MemoryRetriever(store=seeded, k=2) | RunnableLambda(lambda docs: docs)
    chain.invoke("printer paper jam", config={"callbacks": [tracker], "run_id": run})
    assert tracker.feedback(run, 1.0).reinforced == 2
    once = snapshot(seeded)

    assert tracker.feedback(run, 1.0).reinforced == 0  # same run, same key: the default id repeats
    assert tracker.feedback(str(run), 0.0, key="score").reinforced == 0  # the run id as a string is the same run
    assert snapshot(seeded) == once
    assert tracker.feedback(run, 0.0, key="correctness").reinforced == 2  # another key is another feedback
    assert tracker.feedback(run, 1.0, key="other", feedback_id="ticket-7").reinforced == 2
    assert tracker.feedback(run, 1.0, key="again", feedback_id="ticket-7").reinforced == 0  # an explicit id repeats


@pytest.mark.parametrize(
    "feedback_id",
    [None, "ticket-Zürich-Nordhafen-Logistik-Genossenschaft-ß-東京-ロジスティクス-" + "ü" * 34],  # 95 characters
)
def test_a_feedback_applied_by_the_older_tracker_is_not_applied_again(
    seeded: MemoryStore, feedback_id: str | None
) -> None:
    tracker = RecallTracker(seeded)
    run = uuid4()
    chain = MemoryRetriever(store=seeded, k=2) | RunnableLambda(lambda docs: docs)
    chain.invoke("printer paper jam", config={"callbacks": [tracker], "run_id": run})
    key = "user_rating-évaluation-nordique-Ålesund-北京-περιγρα"  # the longest key, 50 characters
    fid = feedback_id or f"{run}:{key}"
    [recall_id] = tracker.recall_ids(run)
    assert (
        seeded.reinforce_many([Reinforcement(recall_id, 1.0, f"{fid}/{recall_id}", "default")]) == 2
    )  # the older code's key
    once = snapshot(seeded)

    record = tracker.feedback(run, 1.0, key=key, feedback_id=feedback_id)

    assert record.feedback_id == fid and record.reinforced == 0 and snapshot(seeded) == once


def test_feedback_on_the_root_run_of_a_chain_covers_every_recall_under_it(seeded: MemoryStore) -> None:
    tracker = RecallTracker(seeded)
    router = MemoryRetriever(store=seeded, k=1)
    printer = MemoryRetriever(store=seeded, k=1)
    inner = RunnableParallel(router=RunnableLambda(lambda q: q["router"]) | router,
                             printer=RunnableLambda(lambda q: q["printer"]) | printer)  # fmt: skip
    chain = inner | RunnableLambda(lambda out: sorted(d.id for docs in out.values() for d in docs))
    question = {"router": "reset the home router", "printer": "printer prints blank pages"}
    with collect_runs() as runs:
        recalled = chain.invoke(question, config={"callbacks": [tracker]})
    root = runs.traced_runs[0]
    retriever_runs = [r for r in _descendants(root) if r.run_type == "retriever"]
    assert len(recalled) == 2 and len(retriever_runs) == 2

    before = snapshot(seeded)
    one = retriever_runs[0]
    assert tracker.feedback(one.id, 1.0).reinforced == 1  # a child run: its own recall only
    mid = snapshot(seeded)
    assert moved(before, mid) == {one.outputs["documents"][0].id}

    assert tracker.feedback(root.id, 1.0).reinforced == 2  # the root: both recalls
    assert moved(mid, snapshot(seeded)) == set(recalled)
    assert set(tracker.recall_ids(root.id)) == {d.metadata["recall_id"] for r in retriever_runs for d in r.outputs["documents"]}  # fmt: skip


def _descendants(run: Any) -> list[Any]:
    out = []
    for child in run.child_runs:
        out += [child, *_descendants(child)]
    return out


def test_async_runs_are_tracked(seeded: MemoryStore) -> None:
    tracker = RecallTracker(seeded)
    chain = MemoryRetriever(store=seeded, k=2) | RunnableLambda(lambda docs: docs)
    run = uuid4()
    docs = asyncio.run(chain.ainvoke("water the tomatoes", config={"callbacks": [tracker], "run_id": run}))
    before = snapshot(seeded)
    assert tracker.feedback(run, -1.0).reinforced == 2
    assert moved(before, snapshot(seeded)) == {d.id for d in docs}
    assert all(seeded.get(d.id).q == pytest.approx(-0.3) for d in docs)  # type: ignore[arg-type]


def test_a_run_without_recalls_gets_feedback_that_changes_nothing(seeded: MemoryStore) -> None:
    tracker = RecallTracker(seeded)
    run = uuid4()
    RunnableLambda(lambda x: x).invoke("hi", config={"callbacks": [tracker], "run_id": run})
    before = snapshot(seeded)
    record = tracker.feedback(run, 1.0)
    assert (record.recall_ids, record.reinforced) == ((), 0) and snapshot(seeded) == before


def test_an_unknown_run_id_is_a_store_error(seeded: MemoryStore) -> None:
    tracker = RecallTracker(seeded)
    with pytest.raises(StoreError, match="unknown run id"):
        tracker.feedback(uuid4(), 1.0)
    with pytest.raises(ConfigError, match="UUID"):
        tracker.feedback("not-a-run", 1.0)


@pytest.mark.parametrize("score", [math.nan, math.inf, -math.inf, "1", None, 1j, [1.0]])
def test_a_score_that_is_not_a_finite_number_is_refused_before_anything_moves(seeded: MemoryStore, score: Any) -> None:
    tracker = RecallTracker(seeded)
    run = uuid4()
    # A retriever called on its own takes its run id as a keyword (LangChain's retrievers ignore config's).
    MemoryRetriever(store=seeded, k=2).invoke("printer paper jam", config={"callbacks": [tracker]}, run_id=run)
    before = snapshot(seeded)
    with pytest.raises(ConfigError, match="finite number"):
        tracker.feedback(run, score)
    assert snapshot(seeded) == before and tracker.records == []
    assert tracker.feedback(run, 1.0).reinforced == 2  # the refused call used up nothing


def test_keys_and_feedback_ids_are_checked(seeded: MemoryStore) -> None:
    tracker = RecallTracker(seeded)
    run = uuid4()
    RunnableLambda(lambda x: x).invoke("hi", config={"callbacks": [tracker], "run_id": run})
    for bad in ({"key": ""}, {"key": "k" * 51}, {"feedback_id": " "}, {"feedback_id": "f" * 96}, {"comment": 3}):
        with pytest.raises(ConfigError):
            tracker.feedback(run, 1.0, **bad)


def test_the_oldest_runs_are_forgotten_beyond_max_runs(seeded: MemoryStore) -> None:
    tracker = RecallTracker(seeded, max_runs=2)
    runs = [UUID(int=i + 1) for i in range(3)]
    for run in runs:
        RunnableLambda(lambda x: x).invoke("hi", config={"callbacks": [tracker], "run_id": run})
    with pytest.raises(StoreError, match="keeps the last 2 runs"):
        tracker.recall_ids(runs[0])
    assert tracker.recall_ids(runs[2]) == ()
    with pytest.raises(ConfigError):
        RecallTracker(seeded, max_runs=0)
    with pytest.raises(ConfigError):
        RecallTracker("sqlite://")  # type: ignore[arg-type]
