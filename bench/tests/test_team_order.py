"""The team-order benchmark end to end at a small size: the conditions, the paired keys, the page."""

from __future__ import annotations

import json
from pathlib import Path

from bench import team_order


def test_the_benchmark_learns_the_order_and_writes_its_keys(tmp_path: Path) -> None:
    team_order.main(["--seeds", "2", "--rounds", "4", "--out", str(tmp_path)])
    summary = json.loads((tmp_path / "summary.json").read_text("utf-8"))
    assert summary["team_order_spec_last_mean"] == 0.5  # every fixed order gets at most one kind right
    assert summary["team_order_best_fixed_last_mean"] == 0.5
    assert summary["team_order_learned_served_mean"] > 0.5
    for key in ("mean", "ci_low", "ci_high"):
        assert f"team_order_learned_minus_fixed_last_{key}" in summary
    page = (tmp_path / "team_order.md").read_text("utf-8")
    assert "learned − spec order" in page and "rounder > vat > labeller" in page
