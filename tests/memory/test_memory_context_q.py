"""Q in context (``RetrievalConfig.context_q``): a memory that helped one task keeps its rank there when it
fails a look-alike, its Q in a context is the rewards of that context's recalls folded from the recall log,
and the context is logged, checked and added to older stores."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from connectors import ConfigError
from memory import MemoryConfig, MemoryStore, RetrievalConfig
from memory.context_q import context_values
from tests.memory.conftest import sqlite_only


def direction(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


class TableEmbedder:
    """Fixed vectors: the Quartzite memory at 0°, the Quartz memory at 37° (cosine 0.8 apart); the question
    about Quartz at 15° is nearer the *Quartzite* memory (0.97) than its own (0.93) — look-alikes."""

    name, dim = "table-2d", 2
    VECTORS = {
        "Visitor badge colour at Quartzite": direction(0),
        "Visitor badge colour at Quartz": direction(37),
        "Which badge colour do Quartzite visitors get?": direction(-5),
        "Which badge colour do Quartz visitors get?": direction(15),
    }

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([self.VECTORS[t] for t in texts], dtype=np.float32)


QUARTZITE, QUARTZ = "Which badge colour do Quartzite visitors get?", "Which badge colour do Quartz visitors get?"


def config(context_q: bool) -> MemoryConfig:
    return MemoryConfig(retrieval=RetrievalConfig(k1=5, k2=1, delta=-1.0, lam=0.7, context_q=context_q), alpha=0.5)


@pytest.fixture
def twins(open_store: Callable[..., MemoryStore]) -> Callable[[bool], tuple[MemoryStore, str, str]]:
    def make(context_q: bool) -> tuple[MemoryStore, str, str]:
        store = open_store(config(context_q), embedder=TableEmbedder())
        white = store.add("Visitor badge colour at Quartzite", "Quartzite badges are white.").id
        grey = store.add("Visitor badge colour at Quartz", "Quartz badges are grey.").id
        return store, white, grey

    return make


@pytest.mark.parametrize("context_q", [False, True])
def test_a_failure_on_a_look_alike_does_not_push_a_memory_down_for_its_own_task(
    twins: Callable[[bool], tuple[MemoryStore, str, str]], context_q: bool
) -> None:
    store, white, grey = twins(context_q)
    first = store.retrieve(QUARTZITE, context="badge-quartzite")
    assert first.ids == (white,)
    store.reinforce(first, 1.0)  # white helped Quartzite
    wrong = store.retrieve(QUARTZ, context="badge-quartz")
    assert wrong.ids == (white,)  # nearer, and now with the higher Q: the look-alike's memory
    store.reinforce(wrong, -1.0)  # ...which fails Quartz
    assert store.retrieve(QUARTZ, context="badge-quartz", record=False).ids == (grey,)  # Quartz moved on, both ways
    again = store.retrieve(QUARTZITE, context="badge-quartzite", record=False)
    # One Q per memory: the failure on Quartz made white rank below grey for Quartzite too (Q −0.25 < 0).
    # Q in context: white keeps the +0.5 it earned for Quartzite.
    assert again.ids == ((white,) if context_q else (grey,))
    assert store.get(white).q == pytest.approx(-0.25)  # the global Q moves either way


def test_the_q_in_a_context_is_its_rewards_folded_from_the_q_it_was_first_recalled_with(
    twins: Callable[[bool], tuple[MemoryStore, str, str]],
) -> None:
    store, white, _ = twins(True)
    store.reinforce(store.retrieve(QUARTZITE, context="badge-quartzite"), 1.0, feedback_id="answer-1")
    wrong = store.retrieve(QUARTZ, context="badge-quartz")
    for _ in range(2):  # the same feedback twice counts once
        store.reinforce(wrong, -1.0, feedback_id="answer-2")
    with store.engine.connect() as conn:
        values = context_values(conn, "default", ["badge-quartzite", "badge-quartz", "never-recalled"], alpha=0.5)
    assert values == {"badge-quartzite": {white: 0.5}, "badge-quartz": {white: pytest.approx(0.5 + 0.5 * (-1 - 0.5))}}
    assert store.explain(wrong.id)["context"] == "badge-quartz"


def test_another_store_on_the_same_database_ranks_by_the_same_q_in_context(
    twins: Callable[[bool], tuple[MemoryStore, str, str]], open_store: Callable[..., MemoryStore]
) -> None:
    store, white, grey = twins(True)
    store.reinforce(store.retrieve(QUARTZITE, context="badge-quartzite"), 1.0)
    store.reinforce(store.retrieve(QUARTZ, context="badge-quartz"), -1.0)
    other = open_store(config(True), embedder=TableEmbedder())
    assert other.retrieve(QUARTZITE, context="badge-quartzite").ids == (white,)
    assert other.retrieve(QUARTZ, context="badge-quartz").ids == (grey,)


def test_without_a_context_a_recall_ranks_by_the_global_q_and_logs_none(
    twins: Callable[[bool], tuple[MemoryStore, str, str]],
) -> None:
    store, white, grey = twins(True)
    store.reinforce(store.retrieve(QUARTZITE, context="badge-quartzite"), 1.0)
    store.reinforce(store.retrieve(QUARTZ, context="badge-quartz"), -1.0)
    plain = store.retrieve(QUARTZITE)
    assert plain.ids == (grey,) and plain.context is None and store.explain(plain.id)["context"] is None


LONG = "badge-" + "Ünïcödé site name with spaces " * 6  # 186 characters, still a valid context


@pytest.mark.parametrize(
    ("contexts", "match"),
    [
        (["a"], "one context .or None. per query: 2 expected"),
        ("ab", "one context .or None. per query"),
        (["a", ""], "non-empty string of at most 200 characters"),
        (["a", "x" * 201], "non-empty string of at most 200 characters"),
        (["a", 7], "non-empty string of at most 200 characters"),
        (["a", "tab\x00null"], "recall context"),
    ],
)
def test_a_bad_context_is_refused_before_anything_is_logged(
    twins: Callable[[bool], tuple[MemoryStore, str, str]], contexts: object, match: str
) -> None:
    store, _, _ = twins(True)
    with pytest.raises(ConfigError, match=match):
        store.retrieve_many([QUARTZ, QUARTZITE], contexts=contexts)  # type: ignore[arg-type]
    recall = store.retrieve_many([QUARTZ, QUARTZITE], contexts=[LONG, None])[0]
    assert store.explain(recall.id)["context"] == LONG


@sqlite_only
def test_a_store_from_before_contexts_gains_the_column_and_keeps_its_recalls(db_url: str, tmp_path: Path) -> None:
    with MemoryStore(db_url, embedder=TableEmbedder(), config=config(True)) as store:
        old = store.retrieve(QUARTZ).id
    with sqlite3.connect(tmp_path / "memory.db") as conn:
        conn.execute("DROP INDEX ix_memory_recalls_context")
        conn.execute("ALTER TABLE memory_recalls DROP COLUMN context")
    with MemoryStore(db_url, embedder=TableEmbedder(), config=config(True)) as store:
        assert store.explain(old)["context"] is None
        assert store.explain(store.retrieve(QUARTZ, context="badge-quartz").id)["context"] == "badge-quartz"


def test_context_q_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="context_q must be True or False"):
        RetrievalConfig(context_q="yes")  # type: ignore[arg-type]
