"""Another Q update on the noisy-ratings bench: its run is written beside today's, never over it, and the
paired report pools by seed and applies the gate (above pooled, below on no family)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.noise import main
from bench.noise_alpha import compare, gate
from evolve.intervals import paired_interval


def report(by_family: dict[str, list[float]], floor: float | None = None) -> dict[str, Any]:
    cells = {
        f: {"cells": {"q_context": {"rho2": [{"last": v, "auc": v} for v in values]}}}
        for f, values in by_family.items()
    }
    out: dict[str, Any] = {"reader": "rule", "seeds": [0, 1, 2], "families": cells}
    return out if floor is None else {**out, "alpha_schedule": "visits", "alpha_floor": floor}


def test_the_pooled_difference_is_each_seeds_mean_over_the_families_and_the_gate_reads_it() -> None:
    today = report({"a": [0.5, 0.6, 0.7], "b": [0.2, 0.3, 0.4]})
    better = report({"a": [0.6, 0.7, 0.8], "b": [0.25, 0.3, 0.45]}, 0.1)
    rows = compare(today, better)["rho2"]
    assert rows["a"]["last"] == paired_interval(baseline=[0.5, 0.6, 0.7], treatment=[0.6, 0.7, 0.8])
    pooled = paired_interval(baseline=[0.35, 0.45, 0.55], treatment=[0.425, 0.5, 0.625])
    got = rows["pooled"]["auc"]
    assert (got.mean, got.low, got.high) == pytest.approx((pooled.mean, pooled.low, pooled.high), abs=1e-12)
    assert gate(compare(today, better)) == (True, [])
    worse_on_b = report({"a": [0.9, 1.0, 1.0], "b": [0.1, 0.2, 0.3]}, 0.1)
    passed, why = gate(compare(today, worse_on_b))
    assert not passed and why[0].startswith("ρ = 0.2: below today's on b, last epoch")


def test_the_visits_rule_is_written_beside_todays_results(tmp_path: Path) -> None:
    argv = ["--families", "lookalikes", "--conditions", "q_context", "--rhos", "0.3", "--seeds", "2",
            "--embedder", "hash", "--out", str(tmp_path), "--quiet"]  # fmt: skip
    result = main([*argv, "--alpha-schedule", "visits", "--alpha-floor", "0.2"])
    assert (result["alpha_schedule"], result["alpha_floor"]) == ("visits", 0.2)
    assert not (tmp_path / "noise.json").exists() and (tmp_path / "noise_visits20.json").exists()
    keys = json.loads((tmp_path / "summary.json").read_text())
    assert "noise_lookalikes_q_context_rho3_last_mean_rule_visits20" in keys
    assert not any(k.endswith("_rule") for k in keys)
    with pytest.raises(SystemExit):
        main([*argv, "--alpha-schedule", "visits", "--alpha-floor", "1.5"])
