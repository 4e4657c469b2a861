"""Numeric and structural edges: Q stays finite, deep meta is refused cleanly, a write states its outcome."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.errors import ConfigError
from memory.config import MemoryConfig
from memory.store import MemoryStore, WriteEntry
from memory.write.checks import MAX_META_DEPTH, MAX_VALUE, row_norms

Open = Callable[..., MemoryStore]
HUGE = 1.7e308


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"k": [value]}
    return value


def test_finite_inputs_near_the_float_limit_are_refused_before_q_can_overflow(store: MemoryStore) -> None:
    with pytest.raises(ConfigError, match=r"q must be within ±1e\+12"):
        store.add("deploy the service", "lesson", q=HUGE)
    item = store.add("deploy the service", "lesson", q=MAX_VALUE)
    recall = store.retrieve("deploy the service")
    with pytest.raises(ConfigError, match=r"reward must be within ±1e\+12, got -1.7e\+308"):
        store.reinforce(recall, -HUGE)
    assert store.reinforce(recall, -MAX_VALUE) == 1
    q = store.get(item.id).q
    assert math.isfinite(q) and q == pytest.approx(MAX_VALUE - 0.3 * 2 * MAX_VALUE)
    stats = store.stats()
    assert all(math.isfinite(stats["q"][k]) for k in ("mean", "std", "min", "max"))


def test_a_q_init_beyond_the_bound_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="q_init"):
        MemoryConfig(q_init=HUGE)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    q=st.floats(min_value=-MAX_VALUE, max_value=MAX_VALUE),
    rewards=st.lists(st.floats(min_value=-MAX_VALUE, max_value=MAX_VALUE), min_size=1, max_size=6),
)
def test_every_accepted_q_and_reward_keep_every_stored_q_finite_and_exportable(
    tmp_path: Path, embedder: object, q: float, rewards: list[float]
) -> None:
    with MemoryStore("sqlite://", embedder=embedder, config=MemoryConfig(alpha=1.0)) as store:  # type: ignore[arg-type]
        store.add("reset the router", "hold the button", q=q)
        for r in rewards:
            store.reinforce(store.retrieve("reset the router"), r)
        (item,) = store.items()
        assert math.isfinite(item.q) and abs(item.q) <= MAX_VALUE
        assert math.isfinite(store.stats()["q"]["std"])
        out = tmp_path / "export.jsonl"
        store.export(out)
        assert "Infinity" not in out.read_text(encoding="utf-8") and "NaN" not in out.read_text(encoding="utf-8")


@pytest.mark.parametrize("depth", [MAX_META_DEPTH + 1, 100_000])
def test_deeply_nested_meta_is_a_config_error_not_a_recursion_error(store: MemoryStore, depth: int) -> None:
    with pytest.raises(ConfigError, match=f"nested at most {MAX_META_DEPTH} levels"):
        store.add("a task", "a lesson", meta=nested(depth))
    with pytest.raises(ConfigError, match="provenance"):
        store.write("a task", trajectory="t", feedback="f", success=True, provenance=nested(depth))
    assert store.items() == []


def test_meta_at_the_depth_limit_is_stored_as_given(store: MemoryStore) -> None:
    meta = nested(MAX_META_DEPTH // 2 - 1)  # a mapping and a list per level, inside the top mapping
    item = store.add("a task", "a lesson", meta=meta)
    assert json.dumps(store.get(item.id).meta["k"]) == json.dumps(meta["k"])


def test_a_write_must_say_whether_the_attempt_succeeded(store: MemoryStore) -> None:
    with pytest.raises(ConfigError, match=r"success must be True or False.*add\(\.\.\., success=None\)"):
        store.write("a task", trajectory="t", feedback="f", success=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"entries\[1\]\.success"):
        store.write_many([
            WriteEntry("a task", trajectory="t", feedback="f", success=True),
            WriteEntry("b task", trajectory="t", feedback="f", success=None),  # type: ignore[arg-type]
        ])  # fmt: skip
    assert store.items() == []
    assert store.add("a task", "a lesson", success=None).success is None  # add may leave it unknown


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_nan_in_provenance_is_reported_as_provenance(store: MemoryStore, bad: float) -> None:
    with pytest.raises(ConfigError, match=r"entries\[0\]\.provenance must be JSON-serialisable without NaN"):
        store.write("a task", trajectory="t", feedback="f", success=True, provenance={"reward": bad})
    assert store.items() == []


def test_row_norms_are_the_whole_matrix_norms_bit_for_bit() -> None:
    # Taken in chunks so no float64 copy of a whole batch is made; a row's norm must not depend on that.
    vecs = np.random.default_rng(3).standard_normal((2500, 384)).astype(np.float32)
    assert np.array_equal(row_norms(vecs, rows=1024), np.linalg.norm(vecs.astype(np.float64), axis=1))
    assert row_norms(vecs[:0]).shape == (0,)
