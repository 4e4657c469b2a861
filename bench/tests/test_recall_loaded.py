"""``bench.recall_loaded`` on a small store: every phase and arm timed and reported, the keys merged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import recall_loaded


def test_a_small_run_times_every_phase_and_arm_and_merges_its_keys(tmp_path: Path) -> None:
    result = recall_loaded.main(["--items", "1000", "--recalls", "40", "--out", str(tmp_path)])
    assert set(result["phases"]) == set(recall_loaded.PHASES)
    for arms in result["phases"].values():
        assert set(arms) == set(recall_loaded.ARMS)
        assert all(0 < r["p50_ms"] <= r["p95_ms"] for r in arms.values())
    keys = json.loads((tmp_path / "summary.json").read_text())
    assert "ann_retrieve_p95_over_p50_loaded_1k" in keys and "recall_loaded_writer_deferred_p95_ms_1k" in keys
    assert "| writer | deferred |" in (tmp_path / "recall_loaded.md").read_text()


def test_too_small_a_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        recall_loaded.main(["--items", "10", "--out", str(tmp_path)])
