"""bench.seeds_summary: runs merge cell by cell, and runs that cannot be paired are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.seeds_summary import markdown, merge
from connectors import ConfigError


def cell(last: list[float]) -> dict[str, Any]:
    return {
        "status": "ok",
        "last": sum(last) / len(last),
        "last_per_seed": last,
        "cum": 1.0,
        "cum_per_seed": [1.0] * len(last),
    }


def run(path: Path, conditions: dict[str, Any], *, epochs: int = 8) -> Path:
    settings = {
        "model": "local/smollm2",
        "embedder": "minilm",
        "epochs": epochs,
        "seeds": [0, 1, 2],
        "paraphrases": True,
    }
    body = {
        "settings": settings,
        "seconds": 9.0,
        "machine": {"cpu": "AMD EPYC"},
        "envs": {"lookalikes": {"tasks": 24, "conditions": conditions}},
    }
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def test_runs_merge_and_the_paired_verdict_reads_across_them(tmp_path: Path) -> None:
    a = run(tmp_path / "a.json", {"similarity": cell([0.2, 0.3, 0.25]), "q_memory": cell([0.3, 0.4, 0.35])})
    b = run(tmp_path / "b.json", {"q_context": cell([0.6, 0.7, 0.65]), "tfgrpo": {"status": "not run"}})
    merged = merge([a, b])
    assert list(merged["envs"]["lookalikes"]["conditions"]) == ["similarity", "q_memory", "q_context"]
    text = markdown(merged)
    assert "| lookalikes (24) | not run | 0.250" in text
    assert (
        "Q in context against Q-memory: last epoch 0.650 vs 0.350 (paired over 3 seeds: +0.300 [+0.300, +0.300], above)"
        in text
    )
    assert "| lookalikes | q_memory | 0.300 0.400 0.350 | 1.000 1.000 1.000 |" in text  # every seed's figure


def test_a_cell_twice_or_another_protocol_is_refused(tmp_path: Path) -> None:
    a = run(tmp_path / "a.json", {"similarity": cell([0.2, 0.3, 0.25])})
    with pytest.raises(ConfigError, match="lookalikes / similarity is in two runs"):
        merge([a, run(tmp_path / "b.json", {"similarity": cell([0.2, 0.3, 0.25])})])
    with pytest.raises(ConfigError, match="seeds cannot be paired"):
        merge([a, run(tmp_path / "c.json", {"q_memory": cell([0.2, 0.3, 0.25])}, epochs=3)])
