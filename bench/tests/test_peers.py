"""The peers benchmark: exact ground truth, each system in fresh processes, Evolve's advantage, the pages.

Only raw FAISS and Evolve run here (both are in the project's environment); a peer that is not
installed and one above its size limit must be reported as not measured, never crash the run.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import peers
from bench.peers_report import advantages, size_tables
from bench.peers_run import log_cost, npy_len, npy_rows, recall_at_k
from connectors.errors import ConfigError


def test_exact_top_k_agrees_with_a_full_sort_across_chunks() -> None:
    rng = np.random.default_rng(3)
    base, queries = rng.standard_normal((1234, 16)).astype(np.float32), rng.standard_normal((7, 16)).astype(np.float32)
    found = peers.exact_top_k(base, queries, 10, chunk=100)  # 13 chunks, the last one shorter than k
    expected = np.argsort(-(queries @ base.T), axis=1)[:, :10]
    np.testing.assert_array_equal(found, expected)
    assert recall_at_k(found.tolist(), expected) == 1.0
    assert recall_at_k([row[:5].tolist() + [-1] * 5 for row in found], expected) == 0.5


def test_rows_are_read_from_the_file_in_chunks_and_only_float32_matrices_are_accepted(tmp_path: Path) -> None:
    x = np.arange(60, dtype=np.float32).reshape(20, 3)
    np.save(tmp_path / "x.npy", x)
    assert npy_len(tmp_path / "x.npy") == 20
    np.testing.assert_array_equal(npy_rows(tmp_path / "x.npy", 5, 9), x[5:9])
    np.save(tmp_path / "y.npy", x.astype(np.float64))
    with pytest.raises(ValueError, match="2-d float32"):
        npy_rows(tmp_path / "y.npy", 0, 2)


def test_the_logs_cost_is_measured_on_each_query_both_ways_in_alternating_order() -> None:
    calls: list[tuple[str, int]] = []
    out = log_cost(lambda i: calls.append(("logged", i)), lambda i: calls.append(("bare", i)), 4)
    assert calls == [("bare", 0), ("logged", 0), ("logged", 1), ("bare", 1),
                     ("bare", 2), ("logged", 2), ("logged", 3), ("bare", 3)]  # fmt: skip
    assert set(out) == {"p50_warm_ms", "p95_warm_ms", "p50_no_log_ms", "p95_no_log_ms"}


def test_a_system_that_was_built_but_failed_to_serve_keeps_its_build_figures_and_says_why() -> None:
    systems = {
        "evolve-adaptive": {"insert_items_per_s": 2400.0, "p50_ms": 4.6, "bytes_per_item": 4662.0},
        "qdrant": {"insert_items_per_s": 533.0, "bytes_per_item": 4142.0, "build_rss_mb": 4041.6,
                   "error": "serve exited 1: Unable to allocate 2.86 GiB"},
        "lancedb": {"error": "build exited 1: no module"},
    }  # fmt: skip
    size = {"reference": "evolve-adaptive", "queries": 10, "updates": 2, "systems": systems}
    size["advantage"] = advantages(systems, "evolve-adaptive")
    md = "\n".join(size_tables("1000000", size))
    assert "| qdrant | 533 | — | — | — | — | — | 4,142 | — | 4,042 |" in md
    assert "- **qdrant**: serve exited 1: Unable to allocate" in md and "- **lancedb**: build exited 1" in md
    assert "| lancedb |" not in md.split("Evolve's advantage")[0]


def test_advantage_is_above_one_where_evolve_is_ahead_whatever_the_metric_direction() -> None:
    systems: dict[str, dict[str, Any]] = {
        "evolve-hnsw": {"p50_ms": 1.0, "insert_items_per_s": 1000.0, "recall_at_10": 0.99},
        "slow-store": {"p50_ms": 4.0, "insert_items_per_s": 4000.0, "recall_at_10": None},
    }
    row = advantages(systems, "evolve-hnsw")["slow-store"]
    assert row["p50_ms"] == 4.0 and row["insert_items_per_s"] == 0.25 and row["recall_at_10"] is None


def test_a_small_run_measures_each_system_and_reports_what_it_could_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(peers.LIMITS, "qdrant", (1000, "its local mode is too slow for this test"))
    where = ["--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out"), "--peer-python", sys.executable]
    results = peers.main([*where, "--sizes", "2000", "--queries", "40", "--updates", "12", "--peers", "evolve-adaptive",
                          "evolve-flat", "faiss-flat", "faiss-hnsw", "usearch", "qdrant"])  # fmt: skip
    systems = results["sizes"]["2000"]["systems"]
    evolve, flat = systems["evolve-adaptive"], systems["faiss-flat"]  # the default index: exact at this size
    assert flat["recall_at_10"] == 1.0 and systems["evolve-flat"]["recall_at_10"] == 1.0
    assert evolve["recall_at_10"] >= 0.95 and evolve["queries"] == 40
    assert evolve["update_items_per_s"] == pytest.approx(5 * evolve["update_calls_per_s"])  # reinforce: k2 = 5
    assert evolve["p50_no_log_ms"] > 0 and evolve["p50_warm_ms"] > 0 and evolve["version"] is None
    assert flat["update_calls_per_s"] is None and "payload" in flat["update_note"]
    assert 384 * 4 <= flat["bytes_per_item"] < 384 * 4 + 100  # the vectors and FAISS's header, nothing else
    assert flat["reopen_s"] > 0 and flat["rss_mb"] > 0 and flat["insert_items_per_s"] > 0
    if importlib.util.find_spec("usearch") is None:  # the project's environment has no usearch
        assert "No module named 'usearch'" in systems["usearch"]["error"]
    assert "not run above 1,000 items" in systems["qdrant"]["error"]

    adv = results["sizes"]["2000"]["advantage"]["faiss-flat"]
    assert adv["p50_ms"] == pytest.approx(flat["p50_ms"] / evolve["p50_ms"])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["peers_faiss_flat_p50_advantage_2k"] == round(adv["p50_ms"], 3)
    assert summary["peers_p50_closest_2k"] in {"faiss-flat", "faiss-hnsw"}  # Evolve variants are not peers
    assert summary["peers_evolve_adaptive_recall_at_10_2k"] == round(evolve["recall_at_10"], 4)
    md = (tmp_path / "out" / "peers.md").read_text()
    assert "## 2,000 items" in md and "| faiss-hnsw |" in md and "Not measured" in md
    assert "- **qdrant**: not run above 1,000 items" in md and "each logged and not (`record=False`), alternating" in md

    peers.main([*where, "--sizes", "1000", "--queries", "20", "--peers", "faiss-flat"])  # another size, later
    kept = json.loads((tmp_path / "out" / "peers.json").read_text())["sizes"]
    assert list(kept) == ["1000", "2000"] and kept["2000"]["systems"]["evolve-adaptive"] == evolve
    assert "## 1,000 items" in (tmp_path / "out" / "peers.md").read_text()


def test_a_stopped_run_keeps_each_system_it_measured_and_resume_goes_on_from_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = ["--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out"), "--peer-python", sys.executable]
    small = ["--sizes", "1500", "--queries", "20", "--updates", "5"]
    measure = peers.measure

    def stopped_at_the_second(system: str, data: Path, args: object) -> dict:
        if system == "faiss-hnsw":
            raise KeyboardInterrupt  # the session ends here
        return measure(system, data, args)  # type: ignore[arg-type]

    monkeypatch.setattr(peers, "measure", stopped_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        peers.main([*where, *small, "--peers", "faiss-flat", "faiss-hnsw"])
    written = json.loads((tmp_path / "out" / "peers.json").read_text())["sizes"]["1500"]["systems"]
    assert list(written) == ["faiss-flat"] and written["faiss-flat"]["measured_at"]
    ran: list[str] = []
    monkeypatch.setattr(peers, "measure", lambda system, data, args: ran.append(system) or measure(system, data, args))
    results = peers.main([*where, *small, "--peers", "faiss-flat", "faiss-hnsw", "--resume"])
    systems = results["sizes"]["1500"]["systems"]
    assert ran == ["faiss-hnsw"] and systems["faiss-flat"] == written["faiss-flat"]
    assert "| faiss-hnsw |" in (tmp_path / "out" / "peers.md").read_text()


def test_the_dataset_is_made_once_and_reused(tmp_path: Path) -> None:
    first = peers.dataset(1500, 30, 7, tmp_path)
    stamp = (first / "truth.npy").stat().st_mtime_ns
    assert peers.dataset(1500, 30, 7, tmp_path) == first and (first / "truth.npy").stat().st_mtime_ns == stamp
    base, queries, truth = (np.load(first / f) for f in ("base.npy", "queries.npy", "truth.npy"))
    assert base.shape == (1500, 384) and queries.shape == (30, 384) and truth.shape == (30, 10)
    full = np.argsort(-(queries @ base.T), axis=1)[:, :10]
    assert all(set(a) == set(b) for a, b in zip(truth.tolist(), full.tolist(), strict=True))
    assert peers.dataset(1500, 30, 8, tmp_path) != first  # another seed, other data


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ConfigError, match="sizes must be >= 1000"):
        peers.main(["--sizes", "10"])
    with pytest.raises(ConfigError, match="queries in"):
        peers.main(["--sizes", "1000", "--queries", "5000"])
