"""The instruments behind ``/metrics``: tenant names folded out of namespace labels, memory read with one query
and capped, database readings kept between scrapes, and a reading that fails leaving the scrape standing."""

from __future__ import annotations

import logging
import sys

import pytest

from connectors import ConfigError, HashEmbedder
from evolve.serve.metrics import Metrics, Readings, memory_sizes, namespace_label
from memory import MemoryStore


@pytest.mark.parametrize(
    ("namespace", "folded"),
    [
        ("codes/solver", "codes/solver"),  # the trained run's: no tenant in it
        ("codes@alice/solver", "codes@*/solver"),
        ("codes@Zürich-Nordhafen/critic", "codes@*/critic"),
        ("codes@alice", "codes@*"),
        ("codes@a-very-long-tenant-name/sol~0123456789abcdef", "codes@*"),  # shortened: its hash names the tenant
    ],
)
def test_a_namespace_label_folds_the_tenant_unless_asked(namespace: str, folded: str) -> None:
    assert namespace_label(namespace, tenants=False) == folded
    assert namespace_label(namespace, tenants=True) == namespace


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore("sqlite://", embedder=HashEmbedder())


def test_memory_sizes_sum_tenants_per_agent_and_cap_the_labels(store: MemoryStore) -> None:
    store.add("a", "x", namespace="codes@alice/solver", q=0.6)
    store.add("b", "y", namespace="codes@alice/solver", q=0.2)
    store.add("c", "z", namespace="codes@bob/solver", q=0.1)
    store.add("d", "w", namespace="codes/solver", q=-0.5)
    folded = memory_sizes(store.engine, tenants=False)
    assert set(folded) == {"codes@*/solver", "codes/solver"}
    assert folded["codes@*/solver"][0] == 3 and folded["codes@*/solver"][1] == pytest.approx(0.9)
    assert memory_sizes(store.engine, tenants=True)["codes@alice/solver"][0] == 2
    capped = memory_sizes(store.engine, tenants=True, limit=1)
    assert capped == {"codes@alice/solver": (2, pytest.approx(0.8)), "other": (2, pytest.approx(-0.4))}


def test_database_readings_are_kept_between_scrapes_for_the_refresh_interval(store: MemoryStore) -> None:
    now = [0.0]
    readings = Readings(store, None, None, tenants=False, refresh=30.0, clock=lambda: now[0])

    def memories() -> float:
        (family,) = [f for f in readings.collect() if f.name == "evolve_memories"]
        return sum(s.value for s in family.samples)

    store.add("a", "x", namespace="codes/solver")
    assert memories() == 1
    store.add("b", "y", namespace="codes/solver")
    now[0] = 29.0
    assert memories() == 1  # the reading of 0 s ago
    now[0] = 30.0
    assert memories() == 2


def test_a_reading_that_fails_is_logged_and_the_scrape_still_answers(
    store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    def ledger_down() -> dict[str, int]:
        raise OSError("database unreachable")

    metrics = Metrics(store=store, jobs=ledger_down)
    store.add("a", "x", namespace="codes/solver", q=0.5)
    with caplog.at_level(logging.WARNING):
        body, media_type = metrics.scrape()
    assert b'evolve_memories{namespace="codes/solver"} 1.0' in body and b"evolve_jobs" not in body
    assert media_type.startswith("text/plain") and "could not read the jobs: database unreachable" in caplog.text


def test_ratings_recalls_and_remembered_memories_are_counted() -> None:
    metrics = Metrics()
    metrics.rated(True)
    metrics.rated(False)
    metrics.recalled(0.003)
    metrics.remember()
    body = metrics.scrape()[0].decode()
    assert (
        'evolve_ratings_total{outcome="received"} 2.0' in body and 'evolve_ratings_total{outcome="applied"} 1.0' in body
    )
    assert "evolve_recall_seconds_count 1.0" in body and "evolve_memories_remembered_total 1.0" in body
    assert 'evolve_tokens_total{kind="prompt"} 0.0' in body  # every series there from the start, at 0


def test_without_prometheus_client_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ConfigError, match=r"/metrics needs prometheus-client \(in the serve, mcp and a2a extras\)"):
        Metrics()
