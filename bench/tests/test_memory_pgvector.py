"""The pgvector benchmark on the real PostgreSQL + pgvector test server: a small run writes every report."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from bench import memory_pgvector as mp
from bench.memory_pgvector_report import add_estimate_s
from connectors.errors import ConfigError
from tests.support.postgres import throwaway_server


@pytest.fixture(scope="module")
def pg_server() -> Iterator[str]:
    """A PostgreSQL + pgvector test server for this module, started as ``tests/conftest.py`` starts the
    suite's (bench may not import that conftest): in a fresh ``/tmp/evolve-pg-*``, not under pytest's
    root, which pytest resets to mode 0700 and so locks out the server's own user."""
    with throwaway_server() as url:
        yield url


@pytest.mark.postgres
def test_a_small_run_measures_the_database_index_and_writes_every_report(pg_server: str, tmp_path: Path) -> None:
    results = mp.main(["--sizes", "2000", "--queries", "20", "--url", pg_server, "--sqlite", "--out", str(tmp_path)])
    r = results["sizes"]["2000"]
    assert r["index"]["kind"] == "pgvector"  # the default config on PostgreSQL
    assert r["hnsw_before_add"] and "USING hnsw" in r["hnsw_before_add"]
    assert r["recall_at_10"] >= 0.95  # the HNSW walk in the database finds the exact ten nearest
    assert r["sqlite"]["recall_at_10"] == 1.0  # exact at this size: the comparison's reference
    assert r["reopen"]["index"] == "database" and r["reopen"]["reopen_s"] > 0
    assert r["bytes_after_add"]["hnsw_index"] > 0 and r["bytes_at_end"]["database"] > r["bytes_after_add"]["hnsw_index"]
    peak = r["server_memory"]["peak"]
    assert peak is not None and peak["pss_mb"] > 0  # the test server runs here, so its processes are readable
    assert len(r["add"]["batch_items_per_s"]) == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("add_items_per_s", "retrieve_p50_ms", "retrieve_p95_ms", "index_search_p50_ms", "reinforce_call_p50_ms",
                "write_call_p50_ms", "grouped_add_items_per_s", "reopen_s", "client_rss_mb", "bytes_per_item",
                "server_pss_mb"):  # fmt: skip
        assert summary[f"pgvector_{key}_2k"] > 0, key
    assert summary["pgvector_recall_at_10_2k"] >= 0.95
    md = (tmp_path / "memory_pgvector.md").read_text()
    assert "| recall@10 of the whole recall vs exact search |" in md and "| 2,000 items |" in md
    assert "| 2,000 | recall p50 (ms) |" in md  # the same-run comparison with the in-process index
    engine = create_engine(pg_server, poolclass=NullPool)
    with engine.connect() as conn:  # the per-size database is dropped after the run
        assert conn.exec_driver_sql("SELECT 1 FROM pg_database WHERE datname = 'evolve_bench_2000'").first() is None
    engine.dispose()


@pytest.mark.postgres
def test_an_index_built_after_the_load_serves_and_an_earlier_size_stays_in_the_results(
    pg_server: str, tmp_path: Path
) -> None:
    mp.main(["--sizes", "1000", "--queries", "10", "--url", pg_server, "--out", str(tmp_path)])
    results = mp.main(
        ["--sizes", "2000", "--queries", "20", "--url", pg_server, "--index-after-load", "--out", str(tmp_path)]
    )
    r = results["sizes"]["2000"]
    assert r["index_after_load"] and r["hnsw_before_add"] is None  # loaded with no HNSW index in the database
    assert r["bytes_after_add"]["hnsw_index"] == 0 and r["bytes_after_index"]["hnsw_index"] > 0
    assert r["index_build_s"] > 0 and r["index"]["kind"] == "pgvector"  # the default store's open built it
    assert r["recall_at_10"] >= 0.95 and r["reopen"]["index"] == "database"
    assert set(results["sizes"]) == {"1000", "2000"}  # the size measured before is kept, each says when
    assert all(v["measured_at"] for v in results["sizes"].values())
    md = (tmp_path / "memory_pgvector.md").read_text()
    assert "| 1,000 items | 2,000 items |" in md and "2,000 items: loaded with no HNSW index" in md
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["pgvector_bytes_per_item_2k"] == round(r["bytes_after_index"]["database"] / 2000)  # index counted


def test_an_extrapolated_load_grows_with_the_graph() -> None:
    rates = [2000.0, 1500.0, 1300.0, 1200.0]  # items/s per 10,000-item batch, slowing as the graph grows
    est = add_estimate_s(rates, 10_000, 1_000_000)
    assert est is not None and est > 1_000_000 / 1200  # slower than the last batch's rate all the way
    assert add_estimate_s(rates[:2], 10_000, 1_000_000) is None  # too few batches to fit


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ConfigError, match="sizes must be >= 1000"):
        mp.main(["--sizes", "10", "--url", "postgresql+psycopg://nobody@/nowhere"])
