"""Grouping is identity, not resemblance: memories of one task share an intent, memories of different
tasks never do, however alike their questions read (docs/design/decisions.md, "Grouping is identity")."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from connectors import HashEmbedder
from memory import MemoryStore, WriteEntry
from memory.storage.schema import memory_items

LOOKALIKE = "Visitor badge colour for the Quartz laboratory in the north wing?"
NAMESPACE = "équipe de recherche / agent de réponse numéro un"


def entry(intent: str, task: str | None, *, success: bool = False) -> WriteEntry:
    return WriteEntry(
        intent, trajectory="answered blue", feedback="wrong", success=success, namespace=NAMESPACE, task=task
    )


def intents_of(store: MemoryStore) -> dict[str, str]:
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(memory_items.c.id, memory_items.c.intent_id).where(memory_items.c.namespace == NAMESPACE)
        )
        return {r[0]: r[1] for r in rows}


def test_identical_questions_of_different_tasks_stay_apart_and_one_tasks_paraphrases_join(tmp_path: Path) -> None:
    with MemoryStore(f"sqlite:///{tmp_path / 'm.db'}", embedder=HashEmbedder()) as store:
        quartz, quartzite, again = store.write_many([
            entry(LOOKALIKE, "badge colour · Quartz laboratory (north wing)"),
            entry(LOOKALIKE, "badge colour · Quartzite laboratory (north wing)"),  # same words, another task
            entry("Which colour is the visitor badge at Quartz?", "badge colour · Quartz laboratory (north wing)"),
        ])  # fmt: skip
        [later] = store.write_many(
            [entry("Quartz lab: what badge colour do visitors wear?", "badge colour · Quartz laboratory (north wing)")]
        )
        groups = intents_of(store)
        assert groups[quartz.id] == groups[again.id] == groups[later.id]  # one task, across writes
        assert groups[quartzite.id] != groups[quartz.id]  # cosine 1.0, and still two tasks
    with MemoryStore(f"sqlite:///{tmp_path / 'm.db'}", embedder=HashEmbedder()) as reopened:  # another process's view
        [last] = reopened.write_many(
            [entry("badge for Quartzite?", "badge colour · Quartzite laboratory (north wing)")]
        )
        assert intents_of(reopened)[last.id] == groups[quartzite.id]


def test_without_a_task_intents_are_grouped_by_similarity_as_before(tmp_path: Path) -> None:
    with MemoryStore(f"sqlite:///{tmp_path / 'm.db'}", embedder=HashEmbedder()) as store:
        a, b = store.write_many([entry(LOOKALIKE, None), entry(LOOKALIKE, None)])
        assert intents_of(store)[a.id] == intents_of(store)[b.id]


def test_a_task_names_the_same_intent_only_inside_its_namespace(tmp_path: Path) -> None:
    with MemoryStore(f"sqlite:///{tmp_path / 'm.db'}", embedder=HashEmbedder()) as store:
        mine = store.write_many([entry(LOOKALIKE, "t1")])[0]
        theirs = store.write_many(
            [WriteEntry(LOOKALIKE, trajectory="x", feedback="y", success=True, namespace="other", task="t1")]
        )[0]
        with store.engine.connect() as conn:
            rows = dict(conn.execute(select(memory_items.c.id, memory_items.c.intent_id)).all())
        assert rows[mine.id] != rows[theirs.id]
