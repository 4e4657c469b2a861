"""bench.grouping: the store's default threshold merges no two tasks of any bundled family (with the real
MiniLM), the former 0.9 did, and the report says both."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench import grouping
from memory import MemoryConfig


def test_grouping_counts_merged_tasks_and_grouped_phrasings() -> None:
    a, b = np.array([1.0, 0.0]), np.array([0.96, 0.28])  # cosine 0.96
    vecs = np.stack([a, a, b, b]).astype(np.float32)
    owners = ["t1", "t1", "t2", "t2"]
    order = np.arange(4)
    assert grouping.grouping_at(vecs, owners, 0.95, order) == {"merged_tasks": 1.0, "phrasings_grouped": 1.0}
    assert grouping.grouping_at(vecs, owners, 0.97, order) == {"merged_tasks": 0.0, "phrasings_grouped": 1.0}
    assert grouping.grouping_at(vecs, owners, 1.0, np.array([0, 2, 1, 3]))["merged_tasks"] == 0.0


@pytest.mark.slow
def test_the_default_threshold_is_the_calibrated_one_and_merges_no_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = grouping.main(["--orders", "2", "--out", str(tmp_path)])
    assert result["calibrated"] == MemoryConfig().group_threshold
    for family in grouping.FAMILIES:
        ladder = result["families"][family]["ladder"]
        assert ladder[f"{result['calibrated']:.2f}"]["merged_tasks"] == 0.0
        if family != "format_rules":  # one phrasing per task there: nothing to group, nothing merged
            assert ladder["0.90"]["merged_tasks"] > 0.25  # what the former default did
    summary = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    assert summary["grouping_threshold_calibrated"] == MemoryConfig().group_threshold
    assert "| lookalikes | 24 |" in (tmp_path / "grouping.md").read_text(encoding="utf-8")
