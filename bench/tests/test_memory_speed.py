"""The memory-speed benchmark: the brute-force reference agrees with the store, reports name every target."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench import memory_speed as ms
from bench.memory_speed_measure import DIM, GROUPED_BATCH, clustered
from bench.memory_speed_report import target_rows
from connectors.errors import ConfigError


def test_clustered_vectors_are_unit_rows_grouped_by_topic() -> None:
    x = clustered(5000, np.random.default_rng(0))
    assert x.shape == (5000, DIM) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    nearest = np.sort(x[:200] @ x.T, axis=1)[:, -2]  # best other item: a topic mate, far above random (≈0)
    assert np.median(nearest) > 0.4


def test_a_small_run_writes_every_report_and_the_reference_agrees(tmp_path: Path) -> None:
    pytest.importorskip("faiss")
    pytest.importorskip("matplotlib")
    results = ms.main(["--sizes", "2000", "--queries", "20", "--out", str(tmp_path)])
    r = results["sizes"]["2000"]
    assert r["recall_at_1"] == 1.0  # each query is a noisy copy of a stored item
    assert r["brute_force"]["same_choice"] == 1.0  # the Python scan picks what the store picks
    assert r["index_kinds"]["flat"]["recall_at_10"] == 1.0
    assert r["reopen_same_recall"] and r["reopen_index"] == "loaded"
    assert r["stored_items"] == 2000 + GROUPED_BATCH  # bytes are per item stored, the grouped add's too
    size = r["bytes_per_item"]
    assert size["index"] >= DIM * 4 and size["mirror"] >= DIM * 4  # each a copy of the vectors (flat index)
    assert DIM * 4 <= size["database"] < 2 * DIM * 4
    auto = r["adaptive_store"]  # the default index: exact at this size, reopened in a fresh process
    assert auto["index"]["holds"] == "exact" and auto["recall_at_10"] == 1.0
    assert (auto["reopen"]["index"], auto["reopen"]["mirror"]) == ("loaded", "loaded")
    assert auto["copies"]["same_recalls"] == 1.0 and auto["copies"]["distinct_vectors"] < 1000  # one node a vector
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("retrieval_ratio_vs_faiss_2k", "retrieval_speedup_vs_brute_force_2k", "add_items_per_s",
                "reinforce_updates_per_s", "grouped_add_items_per_s_2k", "index_flat_recall_at_10_2k",
                "write_call_p50_ms_2k", "reopen_s_2k", "rss_mb_2k", "rss_anon_mb_2k", "ann_retrieval_ratio_vs_index_2k",
                "adaptive_copies_same_recalls", "bytes_per_item_2k"):  # fmt: skip
        assert summary[key] > 0, key
    md = (tmp_path / "memory_speed.md").read_text()
    assert "| two-phase retrieve p50 / raw FAISS p50 at 100k | <= 1.3 | not measured in this run | — |" in md
    assert "| 2,000 | 20 |" in md
    assert (tmp_path / "memory_latency.png").stat().st_size > 5000


def test_targets_say_reached_or_by_how_much_they_were_missed() -> None:
    rows = target_rows({"retrieval_ratio_vs_faiss_100k": 1.5, "add_items_per_s": 25_000})
    assert "| 1.5 | missed by 15% |" in rows[0]
    assert any("| 25,000 | reached |" in row for row in rows)


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ConfigError, match="sizes must be >= 1000"):
        ms.main(["--sizes", "10"])
