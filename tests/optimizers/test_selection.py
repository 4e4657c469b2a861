"""Parent selection: the best version, or a draw from the Pareto front of per-example scores."""

from __future__ import annotations

import random

import pytest

from connectors import ConfigError
from optimizers.selection import pareto_front, sample_ids, select_parent, win_counts
from optimizers.types import Version

VAL = ["x", "y", "z"]


def version(vid: str, scores: list[float]) -> Version:
    return Version(vid, {"solver.system": vid}, dict(zip(VAL, scores, strict=True)) if scores else {})


VERSIONS = [
    version("v0", [0.0, 0.0, 0.0]),  # dominated by everyone
    version("hard", [1.0, 0.0, 0.0]),  # alone solves x: on the front despite the lowest mean of the front
    version("broad", [0.0, 1.0, 1.0]),  # best mean
    version("weak", [0.0, 0.5, 0.5]),  # dominated by broad
]


def test_pareto_front_keeps_exactly_the_non_dominated() -> None:
    assert pareto_front({v.id: v.scores for v in VERSIONS}) == ["hard", "broad"]


def test_pareto_front_keeps_ties_and_handles_disjoint_scores() -> None:
    assert pareto_front({"a": {"x": 1.0}, "b": {"x": 1.0}}) == ["a", "b"]
    assert pareto_front({"a": {"x": 1.0}, "b": {"y": 0.0}}) == ["a", "b"]
    assert pareto_front({}) == []


def test_win_counts() -> None:
    assert win_counts({v.id: v.scores for v in VERSIONS[1:3]}, VAL) == {"hard": 1, "broad": 2}


def test_best_picks_the_highest_mean_and_head_wins_ties() -> None:
    assert select_parent(VERSIONS, "v0", mode="best", example_ids=VAL).id == "broad"
    tied = [version("a", [1.0, 0.0, 1.0]), version("b", [0.0, 1.0, 1.0])]
    assert select_parent(tied, "b", mode="best", example_ids=VAL).id == "b"
    assert select_parent(tied, "a", mode="best", example_ids=VAL).id == "a"


def test_pareto_draws_only_non_dominated_versions_and_not_only_the_best() -> None:
    rng = random.Random(0)
    picks = [select_parent(VERSIONS, "v0", mode="pareto", example_ids=VAL, rng=rng).id for _ in range(200)]
    assert set(picks) == {"hard", "broad"}
    assert picks.count("broad") > picks.count("hard")  # weights 1 + wins: 3 against 2


def test_without_scores_head_is_the_parent() -> None:
    unscored = [version("v0", []), version("v1", [])]
    assert select_parent(unscored, "v1", mode="pareto", example_ids=VAL).id == "v1"
    assert select_parent(VERSIONS, "v0", mode="best", example_ids=[]).id == "v0"


def test_unknown_head_or_mode_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="head 'nope'"):
        select_parent(VERSIONS, "nope")
    with pytest.raises(ConfigError, match="'best' or 'pareto'"):
        select_parent(VERSIONS, "v0", mode="random")  # type: ignore[arg-type]


def test_sample_ids_is_seeded_keeps_order_and_takes_all_when_few() -> None:
    ids = [f"t{i}" for i in range(10)]
    a = sample_ids(random.Random(1), ids, 4)
    assert a == sample_ids(random.Random(1), ids, 4)
    assert len(a) == 4 and a == sorted(a, key=ids.index)
    assert sample_ids(random.Random(1), ids[:3], 4) == ids[:3]
