"""Rewarding the recalls one answer used: one feedback key per recall, in one format, applied once —
keys applied under the loop's older format included."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from connectors.errors import ConfigError
from memory import MemoryStore, Recall, Reinforcement, reinforcements
from memory.write.checks import MAX_FEEDBACK_ID, fit_id

# Long Unicode names, as a run, a task, a tenant and an agent may be called: keys built from them need fit_id.
EPISODE = "heldout-similarity-s7-évaluation nordique:3:escalade-Ålesund-北京-περιγραφή-de-la-tâche-numéro-sept"
SERVED = "chatcmpl-5f0c1e2a9b8d7c6e5f4a3b2c:note-de-l'utilisateur-Ørsted-東京-très-longue-clé-d'idempotence"
NAMESPACE = "heldout-similarity-s7-évaluation nordique@société-Ørsted/résolveur-北京"

MEMORIES = [
    ("door code of the Harbor warehouse", "4471"),
    ("door code of the Summit warehouse", "9902"),
    ("alarm code of the Harbor office", "1234"),
]


def qs(store: MemoryStore) -> dict[str, tuple[float, int]]:
    return {m.id: (m.q, m.visits) for m in store.items()}


@pytest.fixture
def made(store: MemoryStore) -> list[Recall]:
    """Two recalls in a long Unicode namespace, as an answer of two agents makes them."""
    store.add_many(MEMORIES, namespace=NAMESPACE)
    out = [store.retrieve(intent, namespace=NAMESPACE) for intent, _ in MEMORIES[:2]]
    assert all(out)
    return out


@pytest.fixture
def recalls(made: list[Recall]) -> list[tuple[str, str | None]]:
    return [(r.id, NAMESPACE) for r in made]


@pytest.fixture
def selected(made: list[Recall]) -> int:
    """How many memory updates rewarding both recalls makes."""
    return sum(len(r) for r in made)


def test_every_recall_gets_the_answers_key_shortened_to_fit() -> None:
    recall_id = "0190a1b2c3d4e5f6a7b8c9d0e1f2a3b4"
    [short] = reinforcements([(recall_id, "team/solver")], 0.5, "answer-7")
    assert short == Reinforcement(recall_id, 0.5, f"answer-7/{recall_id}", "team/solver", (f"answer-7:{recall_id}",))

    entries = reinforcements([(recall_id, NAMESPACE), ("0190" + "f" * 28, None)], -1.0, EPISODE)
    keys = [e.feedback_id for e in entries]
    assert all(k is not None and len(k) == MAX_FEEDBACK_ID for k in keys)  # shortened, to the limit exactly
    assert keys[0] == fit_id(f"{EPISODE}/{recall_id}", MAX_FEEDBACK_ID) and keys[0] != keys[1]
    assert [e.applied_as for e in entries][0] == (fit_id(f"{EPISODE}:{recall_id}", MAX_FEEDBACK_ID),)
    assert entries == reinforcements([(recall_id, NAMESPACE), ("0190" + "f" * 28, None)], -1.0, EPISODE)  # stable
    assert [(e.recall, e.reward, e.namespace) for e in entries] == [
        (recall_id, -1.0, NAMESPACE),
        ("0190" + "f" * 28, -1.0, None),
    ]


def test_an_answer_is_rewarded_once(store: MemoryStore, recalls: list[tuple[str, str | None]], selected: int) -> None:
    before = qs(store)
    assert store.reinforce_many(reinforcements(recalls, 1.0, SERVED)) == selected
    rewarded = qs(store)
    assert rewarded != before
    assert store.reinforce_many(reinforcements(recalls, 1.0, SERVED)) == 0  # a repeat, a resumed job...
    assert qs(store) == rewarded


@pytest.mark.parametrize(
    "old_key",
    [
        pytest.param(lambda fid, rid: fit_id(f"{fid}:{rid}", MAX_FEEDBACK_ID), id="loop-before-issue-19"),
        pytest.param(lambda fid, rid: fit_id(f"{fid}/{rid}", MAX_FEEDBACK_ID), id="served-and-langchain"),
    ],
)
def test_a_batch_applied_under_an_older_key_is_not_applied_again(
    store: MemoryStore, recalls: list[tuple[str, str | None]], selected: int, old_key: Callable[[str, str], str]
) -> None:
    """A run killed after its batch was reinforced by older code, resumed by this one: nothing moves."""
    old = [Reinforcement(rid, 1.0, old_key(EPISODE, rid), ns) for rid, ns in recalls]
    assert store.reinforce_many(old) == selected
    applied = qs(store)

    assert store.reinforce_many(reinforcements(recalls, 1.0, EPISODE)) == 0
    assert qs(store) == applied


def test_the_older_key_is_what_stops_the_second_reward(
    store: MemoryStore, recalls: list[tuple[str, str | None]], selected: int
) -> None:
    """The loop's key changed form: without ``applied_as`` the batch above would be rewarded twice."""
    store.reinforce_many(
        [Reinforcement(rid, 1.0, fit_id(f"{EPISODE}:{rid}", MAX_FEEDBACK_ID), ns) for rid, ns in recalls]
    )
    applied = qs(store)
    bare = [e._replace(applied_as=()) for e in reinforcements(recalls, 1.0, EPISODE)]
    assert store.reinforce_many(bare) == selected and qs(store) != applied


def test_applied_as_is_checked_before_anything_is_written(
    store: MemoryStore, recalls: list[tuple[str, str | None]]
) -> None:
    rid, ns = recalls[0]
    before = qs(store)
    with pytest.raises(ConfigError, match="applied_as must be a tuple of feedback ids"):
        store.reinforce_many([Reinforcement(rid, 1.0, "ok", ns, "not-a-tuple")])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="at most 128 characters"):
        store.reinforce_many([Reinforcement(rid, 1.0, "ok", ns, ("é" * 129,))])
    assert qs(store) == before
