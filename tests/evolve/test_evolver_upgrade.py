"""A run killed after its batch was rewarded, resumed by a newer Evolve: no reward twice.

Before issue 19 the loop keyed a recall's reward ``<episode id>:<recall id>``; it now keys it as served
ratings and LangChain runs do (``memory.reinforcements``). A database holding a batch rewarded under the
old key is resumed by the new code here, under names long enough that every key is shortened.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from connectors import HashEmbedder, load_chat
from evolve import Agent, Evolver, MemoryView, Task, Team
from evolve.build import agent_namespace
from evolve.evolver import centred
from memory import MemoryStore, Reinforcement
from memory.write.checks import MAX_FEEDBACK_ID, fit_id

RUN = "heldout-similarity-s7-évaluation nordique-Ålesund-北京-περιγραφή"
AGENTS = ["réponse-agent für die nordische Auswertung", "zweiter-prüfer-agent-東京-ロジスティクス"]
TASKS = [
    Task(id=f"escalation-alderney-harbour-gate-ß-{i}", prompt=f"What is the door code of gate {i}?", answer="4471")
    for i in range(3)
]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'upgrade.db'}"
    return str(request.getfixturevalue("pg_url"))


def make_evolver(store: MemoryStore) -> Evolver:
    agents = [
        Agent(name, load_chat("fake/scripted", replies=["4471"]), memory=MemoryView(store, agent_namespace(RUN, name)))
        for name in AGENTS
    ]
    return Evolver(Team(agents), TASKS, memory=store, run=RUN, progress=False)


def feedback_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM memory_feedback")).scalar_one())


def test_a_batch_rewarded_under_the_old_key_is_not_rewarded_again_on_resume(database: str) -> None:
    store = MemoryStore(database, embedder=HashEmbedder())
    old = make_evolver(store)
    old.run(rounds=1)
    # Round 2 as the old code ran it: the batch recorded, its recalls rewarded under the old key, then killed
    # before its memories were written and the batch marked learned.
    batch = old.run_batch(TASKS, 2)
    old.log.record_episodes(batch)
    legacy = [
        Reinforcement(
            s.recall_id, centred(e.reward), fit_id(f"{e.id}:{s.recall_id}", MAX_FEEDBACK_ID), s.recall_namespace
        )
        for e in batch
        for s in e.steps
        if s.recall_id is not None
    ]
    assert len(legacy) == len(TASKS) * len(AGENTS) and all(len(k) == MAX_FEEDBACK_ID for _, _, k, _, _ in legacy)
    assert store.reinforce_many(legacy) > 0
    rewarded = {m.id: (m.q, m.visits) for m in store.items()}
    keys = feedback_count(store.engine)

    resumed = make_evolver(store)
    metrics = resumed.run(rounds=2)

    assert [m.episodes for m in metrics] == [len(TASKS), len(TASKS)]  # the recorded batch is not run again
    after = {m.id: (m.q, m.visits) for m in store.items()}
    assert {i: after[i] for i in rewarded} == rewarded  # nothing rewarded twice
    assert len(after) == len(rewarded) + len(TASKS) * len(AGENTS)  # ...and the lessons were still written
    assert feedback_count(store.engine) == keys and resumed.log.unlearned(2) == []
    store.close()
