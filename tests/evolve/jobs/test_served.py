"""Served ratings turned into learning: a rating rewarded before an upgrade is not rewarded again."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy import update

from connectors import Message, load_chat
from evolve.episode import Step
from evolve.jobs.served import learn_from_feedback
from evolve.serve.deployment import Deployment
from evolve.serve.feedback import namespace_of
from evolve.serve.responses import feedback_rows
from evolve.spec import RunSpec
from memory import MemoryStore, Reinforcement
from memory.write.checks import MAX_FEEDBACK_ID, fit_id

TENANT = "Zürich-Nordhafen-Logistik-Genossenschaft-ß-東京"
KEY = "note-de-l'utilisateur-Ørsted-très-longue-clé-d'idempotence-" + "ü" * 60
QUESTION = "What is the door code of the Harbor warehouse?"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Deployment:
    database = f"sqlite:///{tmp_path / 'serve.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    spec = RunSpec.model_validate(
        {
            "run": {"name": "évaluation nordique-Ålesund-北京", "database": str(database)},
            "model": {"chat": "fake/scripted", "options": {"replies": ["4471"]}},
            "embedder": {"name": "hash"},
            "environment": {"tasks": "unused.jsonl"},
            "memory": {"k1": 10, "k2": 2},
            "agents": [{"name": "réponse-agent für die nordische Auswertung", "system": "Reply with the code."}],
        }
    )
    d = Deployment(spec, chat=load_chat("fake/scripted", replies=["4471"]))
    yield d
    d.close()


def reinforce_as_before(
    store: MemoryStore | None, run: str, feedback_id: str, steps: Sequence[Step], reward: float
) -> int:
    """``Deployment.feedback``'s reinforcement as the code before issue 19 wrote it."""
    assert store is not None
    items = [
        Reinforcement(
            s.recall_id, reward, fit_id(f"{feedback_id}/{s.recall_id}", MAX_FEEDBACK_ID), namespace_of(s, run)
        )
        for s in steps
        if s.recall_id is not None
    ]
    return store.reinforce_many(items) if items else 0


def test_a_rating_rewarded_before_the_upgrade_is_not_rewarded_again(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, run = deployment.store, deployment.run_name(TENANT)
    assert store is not None
    team, _ = deployment.team(TENANT)
    namespace = next(iter(team.agents.values())).memory.namespace  # type: ignore[union-attr]
    store.add_many([(QUESTION, "4471"), ("Door code of the Harbor warehouse?", "it is 4471")], namespace=namespace)
    answer = deployment.answer([Message("user", QUESTION)], tenant=TENANT)
    assert len(answer.recall_ids) == 1
    # The rating as the older server took it: its recalls rewarded under that code's key (shortened: the
    # key is long), then the server killed before marking it applied. The job that learns it is new code.
    with monkeypatch.context() as m:
        m.setattr("evolve.serve.deployment.reinforce_recalls", reinforce_as_before)
        receipt = deployment.feedback(answer.id, 1.0, tenant=TENANT, comment="right", key=KEY)
    assert receipt.reinforced > 0 and len(f"{receipt.feedback_id}/{answer.recall_ids[0]}") > MAX_FEEDBACK_ID
    with deployment.engine.begin() as conn:
        conn.execute(update(feedback_rows).where(feedback_rows.c.id == receipt.feedback_id).values(applied=0))
    rewarded = {m.id: (m.q, m.visits) for m in store.items()}

    assert learn_from_feedback(store, team, run) == 1

    after = {m.id: (m.q, m.visits) for m in store.items()}
    assert {i: after[i] for i in rewarded} == rewarded and len(after) == len(rewarded) + 1  # written, not rewarded
