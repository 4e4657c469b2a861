"""Configuration objects: defaults from the paper, clear errors, the similarity-only baseline."""

from __future__ import annotations

from dataclasses import replace

import pytest

from connectors.errors import ConfigError
from memory.config import MemoryConfig, RetrievalConfig, similarity_only
from memory.storage.records import MemoryItem, Recall


def test_defaults_are_the_papers() -> None:
    cfg = MemoryConfig()
    r = cfg.retrieval
    assert (cfg.alpha, cfg.q_init, r.lam, r.k1, r.k2, r.epsilon, r.z_clip) == (0.3, 0.0, 0.5, 10, 5, 0.0, 3.0)
    assert (cfg.group_threshold, cfg.credit, cfg.index, cfg.capacity) == (0.98, "uniform", "auto", None)
    assert cfg.alpha_schedule == "constant"  # Q ← Q + α·(r − Q) with the same α every reward


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k1": 3, "k2": 5}, r"k1 must be >= k2 .* got k1=3, k2=5"),
        ({"k2": 0}, r"RetrievalConfig.k2 must be an integer >= 1, got 0"),
        ({"k1": 2.5}, r"RetrievalConfig.k1 must be an integer >= 1, got 2.5"),
        ({"lam": 1.5}, r"RetrievalConfig.lam must be a number in \[0.0, 1.0\], got 1.5"),
        ({"epsilon": -0.1}, r"RetrievalConfig.epsilon must be a number in \[0.0, 1.0\], got -0.1"),
        ({"delta": float("nan")}, r"RetrievalConfig.delta must be a number in \[-1.0, 1.0\], got nan"),
        ({"z_clip": 0}, r"RetrievalConfig.z_clip must be > 0"),
    ],
)
def test_retrieval_config_errors_name_field_range_and_value(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RetrievalConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 2}, r"MemoryConfig.alpha must be a number in \[0.0, 1.0\], got 2"),
        ({"alpha": True}, r"MemoryConfig.alpha must be a number"),
        ({"q_init": float("inf")}, r"MemoryConfig.q_init must be a number in \[-1000000000000.0, 1000000000000.0\]"),
        ({"group_threshold": 0.0}, r"group_threshold must be a number in \(0, 1\], got 0.0"),
        ({"credit": "shapley"}, r"credit must be one of \('uniform', 'score'\), got 'shapley'"),
        (
            {"index": "annoy"},
            r"index must be one of \('auto', 'adaptive', 'flat', 'hnsw', 'ivf', 'pgvector'\), got 'annoy'",
        ),
        ({"capacity": 0}, r"capacity must be an integer >= 1, got 0"),
        ({"failure_keeps": "answer"}, r"failure_keeps must be one of \('feedback', 'attempt', 'both'\), got 'answer'"),
        ({"retrieval": {"k1": 3}}, r"retrieval must be a RetrievalConfig, got dict"),
        ({"alpha_schedule": "bayes"}, r"alpha_schedule must be one of \('constant', 'visits'\) .*got 'bayes'"),
        ({"alpha_schedule": None}, r"alpha_schedule must be one of .*got None"),
        ({"alpha_floor": 1.5}, r"MemoryConfig.alpha_floor must be a number in \[0.0, 1.0\], got 1.5"),
        ({"alpha_floor": -0.1}, r"MemoryConfig.alpha_floor must be a number in \[0.0, 1.0\], got -0.1"),
        ({"alpha_floor": True}, r"MemoryConfig.alpha_floor must be a number"),
        ({"alpha_floor": float("nan")}, r"MemoryConfig.alpha_floor must be a number"),
        ({"recall_log_delay": -0.01}, r"MemoryConfig.recall_log_delay must be a number in \[0.0, 10.0\], got -0.01"),
        ({"recall_log_delay": "10ms"}, r"MemoryConfig.recall_log_delay must be a number"),
        (
            {"recall_log_delay": 0.05, "durability": "full"},
            r"recall_log_delay must be 0 \(or None\) with durability='full'",
        ),
    ],
)
def test_memory_config_errors_name_field_range_and_value(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MemoryConfig(**kwargs)  # type: ignore[arg-type]


def test_replace_validates_too() -> None:
    with pytest.raises(ConfigError, match="lam"):
        replace(RetrievalConfig(), lam=-1)


def test_similarity_only_keeps_everything_but_the_learning() -> None:
    cfg = MemoryConfig(retrieval=RetrievalConfig(k1=20, k2=3, delta=0.4, lam=0.7, epsilon=0.1), capacity=9)
    base = similarity_only(cfg)
    assert (base.alpha, base.retrieval.lam, base.retrieval.epsilon) == (0.0, 0.0, 0.0)
    assert (base.retrieval.k1, base.retrieval.k2, base.retrieval.delta, base.capacity) == (20, 3, 0.4, 9)
    assert similarity_only().retrieval.k1 == 10
    assert similarity_only(replace(cfg, alpha_schedule="visits")).alpha_schedule == "constant"  # Q stays frozen


def test_recall_helpers() -> None:
    item = MemoryItem("m1", "default", "sort a list", "use sorted()", 0.3, 1, 0.0, {"success": True})
    recall = Recall("r1", "default", "sort", (item,), (0.5,), (), pool_size=1, filtered=0, explored=False)
    assert recall and len(recall) == 1 and recall.ids == ("m1",) and item.success is True
    assert recall.render() == "Relevant past experience:\n\n[1] sort a list\nuse sorted()"
    assert Recall("r2", "default", "x", (), (), (), 0, 0, False).render() == ""


def test_the_recall_log_delay_follows_durability_unless_set() -> None:
    assert MemoryConfig().log_delay == 0.01 and MemoryConfig(durability="full").log_delay == 0.0
    assert MemoryConfig(recall_log_delay=0.0).log_delay == 0.0 and MemoryConfig(recall_log_delay=0.2).log_delay == 0.2
