"""``bench.context_q_recall`` on a small store: each history's three recalls timed and reported, the keys merged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import context_q_recall


def test_a_small_run_writes_the_report_and_the_keys(tmp_path: Path) -> None:
    result = context_q_recall.main(["--items", "40", "--recalls", "3", "--history", "0", "6", "--out", str(tmp_path)])
    assert set(result["histories"]) == {"0", "6"}
    keys = json.loads((tmp_path / "summary.json").read_text())
    assert {f"context_q_recall_{arm}_ms_p50_h6" for arm in context_q_recall.ARMS} <= set(keys)
    assert all(keys[k] > 0 for k in keys)
    assert "| 6 |" in (tmp_path / "context_q_recall.md").read_text()


def test_a_history_below_zero_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        context_q_recall.main(["--history", "-1", "--out", str(tmp_path)])
