"""Q in context (``RetrievalConfig.context_q``): a memory that helped one task keeps its rank there when it
fails a look-alike, its Q in a context is the rewards of that context's recalls folded from the recall log,
and the context is logged, checked and added to older stores."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from connectors import ConfigError
from memory import MemoryConfig, MemoryStore, RetrievalConfig
from memory.recall.context_q import context_values, fold
from memory.recall.planning import QOver
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


def config(context_q: bool, start: str = "neutral") -> MemoryConfig:
    retrieval = RetrievalConfig(k1=5, k2=1, delta=-1.0, lam=0.7, context_q=context_q, context_start=start)  # type: ignore[arg-type]
    return MemoryConfig(retrieval=retrieval, alpha=0.5)


@pytest.fixture
def twins(open_store: Callable[..., MemoryStore]) -> Callable[[bool], tuple[MemoryStore, str, str]]:
    def make(context_q: bool, start: str = "neutral") -> tuple[MemoryStore, str, str]:
        store = open_store(config(context_q, start), embedder=TableEmbedder())
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
    twins: Callable[..., tuple[MemoryStore, str, str]],
) -> None:
    # the neutral start folds from q_init: test_memory_context_q's neutral tests
    store, white, _ = twins(True, "global")
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


# ------------------------------------------------------------- where a context has not rewarded a memory
class DockEmbedder:
    """Two look-alike tasks whose questions are their own memories' intents (similarity 1.000) and 0.788
    from each other's (38° apart): the finding of issue 40, item 6, in two dimensions."""

    name, dim = "table-docks", 2
    VECTORS = {
        "Gate code at Dock 4": direction(0),
        "Gate code at Dock 14": direction(38),
        "What is the gate code at Dock 4?": direction(0),
        "What is the gate code at Dock 14?": direction(38),
    }

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([self.VECTORS[t] for t in texts], dtype=np.float32)


DOCK_4, DOCK_14 = "What is the gate code at Dock 4?", "What is the gate code at Dock 14?"


def dock_config(context_q: bool, start: str) -> MemoryConfig:
    retrieval = RetrievalConfig(k1=5, k2=1, delta=-1.0, lam=0.7, context_q=context_q, context_start=start)  # type: ignore[arg-type]
    return MemoryConfig(retrieval=retrieval, alpha=0.5)


def look_alike_failed(
    open_store: Callable[..., MemoryStore], context_q: bool, start: str
) -> tuple[MemoryStore, str, str]:
    """Dock 14's memory is recalled for Dock 4 (the only memory yet) and fails there (global Q −0.5); then
    Dock 4's own memory is written. Dock 14 never recalled anything."""
    store = open_store(dock_config(context_q, start), embedder=DockEmbedder())
    m14 = store.add("Gate code at Dock 14", "Dock 14's gate code is 7730.").id
    store.reinforce(store.retrieve(DOCK_4, context="dock-4"), -1.0)
    m4 = store.add("Gate code at Dock 4", "Dock 4's gate code is 1182.").id
    assert store.get(m14).q == pytest.approx(-0.5)
    return store, m4, m14


@pytest.mark.parametrize(
    ("context_q", "start", "own_wins"),
    [(False, "global", False), (True, "global", False), (True, "neutral", True), (False, "neutral", False)],
)
def test_a_neutral_start_keeps_a_q_earned_on_a_look_alike_from_outweighing_similarity(
    open_store: Callable[..., MemoryStore], context_q: bool, start: str, own_wins: bool
) -> None:
    store, m4, m14 = look_alike_failed(open_store, context_q, start)
    recall = store.retrieve(DOCK_14, context="dock-14")
    # global: Dock 14's own memory (similarity 1.000, Q −0.5 from Dock 4's failure) loses to Dock 4's
    # (0.788, Q 0); neutral: Dock 14 never rewarded either, both rank at Q_init and similarity decides.
    assert recall.ids == ((m14,) if own_wins else (m4,))
    assert store.retrieve(DOCK_14, record=False).ids == (m4,)  # without a context: the global Q, any start
    logged = store.explain(recall.id)
    assert logged["candidates"][0]["q"] == pytest.approx(0.0 if own_wins else -0.5)


def test_a_neutral_start_folds_a_context_from_q_init_not_from_the_q_that_ranked_the_memory(
    open_store: Callable[..., MemoryStore],
) -> None:
    store, _, m14 = look_alike_failed(open_store, True, "neutral")
    by_similarity = replace(store.config.retrieval, lam=0.0, context_start="global")  # logs Q −0.5 for m14
    recall = store.retrieve(DOCK_14, context="dock-14", config=by_similarity)
    assert recall.ids == (m14,) and "context_start" not in store.explain(recall.id)["config"]
    store.reinforce(recall, 1.0)
    with store.engine.connect() as conn:
        from_then = context_values(conn, "default", ["dock-14"], alpha=0.5)
        from_init = context_values(conn, "default", ["dock-14"], alpha=0.5, first=0.0)
    assert from_then == {"dock-14": {m14: pytest.approx(-0.5 + 0.5 * (1 + 0.5))}}
    assert from_init == {"dock-14": {m14: pytest.approx(0.5)}}
    again = store.retrieve(DOCK_14, context="dock-14")  # the store's own setting: neutral
    assert store.explain(again.id)["candidates"][0]["q"] == pytest.approx(0.5)
    assert store.explain(again.id)["config"]["context_start"] == "neutral"


def test_fold_from_a_start_is_the_closed_form_of_the_rewards() -> None:
    rng = np.random.default_rng(7)
    alpha = 0.3
    rows = [(f"ctx-{c}", f"m{i}", float(rng.uniform(-1, 1)), float(rng.choice([-1.0, 1.0])))
            for c, i in rng.integers(0, 3, size=(200, 2))]  # fmt: skip
    for first in (None, 0.0, 0.25):
        folded_q = fold(rows, alpha=alpha, first=first)
        for context, values in folded_q.items():
            for item, q in values.items():
                mine = [(q_then, r) for c, i, q_then, r in rows if (c, i) == (context, item)]
                start = mine[0][0] if first is None else first
                rewards = np.array([r for _, r in mine])
                n = len(rewards)
                closed = (1 - alpha) ** n * start + (alpha * (1 - alpha) ** (n - 1 - np.arange(n)) * rewards).sum()
                assert q == pytest.approx(closed)
    assert fold(rows, alpha=alpha) == fold(rows, alpha=alpha, first=None)


@pytest.mark.parametrize("floor", [0.0, 0.15])
def test_the_visits_schedule_folds_with_each_contexts_own_count(floor: float) -> None:
    """n is the rewards that memory had in that context, not anywhere: a loop over the rows, counting."""
    rng = np.random.default_rng(11)
    rows = [(f"ctx-{c}", f"m{i}", float(rng.uniform(-1, 1)), float(rng.choice([-1.0, 1.0])))
            for c, i in rng.integers(0, 3, size=(300, 2))]  # fmt: skip
    start = {"ctx-0": {"m0": 0.4}}  # what an expired recall left folded: counted as one reward there
    for first in (None, 0.0):
        expected: dict[str, dict[str, float]] = {"ctx-0": {"m0": 0.4}}
        counts = {("ctx-0", "m0"): 1}
        for context, item, q_then, reward in rows:
            q = expected.setdefault(context, {}).get(item, q_then if first is None else first)
            n = counts.get((context, item), 0)
            counts[(context, item)] = n + 1
            expected[context][item] = q + max(floor, 1 / (n + 2)) * (reward - q)
        assert fold(rows, alpha=0.3, start=start, first=first, schedule="visits", floor=floor) == expected
    if floor == 0.0:  # the running mean with the start counted once
        for context, values in fold(rows, alpha=0.3, first=0.0, schedule="visits").items():
            for item, q in values.items():
                mine = [r for c, i, _, r in rows if (c, i) == (context, item)]
                assert q == pytest.approx(sum(mine) / (len(mine) + 1), abs=1e-12)


def test_the_constant_schedule_folds_as_before() -> None:
    rows = [("a", "m1", 0.2, 1.0), ("a", "m1", 0.2, -1.0), ("b", "m1", 0.0, 1.0)]
    assert fold(rows, alpha=0.3, schedule="constant", floor=0.9) == fold(rows, alpha=0.3)
    with pytest.raises(ConfigError, match="alpha schedule must be one of"):
        fold(rows, alpha=0.3, schedule="mean")


def test_q_over_matches_a_vectorised_lookup() -> None:
    rng = np.random.default_rng(3)
    ids = np.array([f"m{i}" for i in range(10)])
    stored = rng.uniform(-1, 1, size=10)
    values = {f"m{i}": float(rng.uniform(-1, 1)) for i in rng.choice(14, size=6, replace=False)}
    named = np.array([i in values for i in ids])
    mapped = np.array([values.get(i, np.nan) for i in ids])
    for rest in (None, 0.0, -0.2):
        expected = np.where(named, mapped, stored if rest is None else rest)
        np.testing.assert_array_equal(QOver(values, rest=rest).of(ids, stored), expected)
    np.testing.assert_array_equal(QOver({}).of(ids, stored), stored)


@pytest.mark.parametrize("bad", ["zero", "", None, 0, ["neutral"]])
def test_context_start_must_be_named(bad: object) -> None:
    with pytest.raises(ConfigError, match="context_start must be one of \\('global', 'neutral'\\)"):
        RetrievalConfig(context_start=bad)  # type: ignore[arg-type]
