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


def run(path: Path, conditions: dict[str, Any], *, epochs: int = 8, former: bool = False) -> Path:
    settings: dict[str, Any] = {
        "model": "local/smollm2",
        "embedder": "minilm",
        "epochs": epochs,
        "seeds": [0, 1, 2],
        "paraphrases": True,
    }
    if not former:  # runs made since MemoryConfig.failure_keeps say what each condition's failures kept
        settings["failure_keeps"] = {name: "feedback" for name in conditions}
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
    assert "| lookalikes (24) | not run | 0.250 [0.126, 0.374] / 1.000 [1.000, 1.000] | 0.350" in text
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


def test_a_run_made_before_failure_keeps_is_read_under_what_it_measured(tmp_path: Path) -> None:
    former = run(
        tmp_path / "former.json",
        {"q_memory": cell([0.3, 0.4, 0.35]), "q_memory_feedback_only": cell([0.5, 0.6, 0.55])},
        former=True,
    )
    today = run(tmp_path / "today.json", {"similarity": cell([0.2, 0.3, 0.25])})
    conditions = merge([former, today])["envs"]["lookalikes"]["conditions"]
    assert conditions["q_memory_keeps_answer"]["last"] == pytest.approx(0.35)  # it kept the wrong answer
    assert conditions["q_memory"]["last"] == pytest.approx(0.55)  # its feedback-only failures are today's default
    text = markdown(merge([former, today]))
    assert "failure memories without the wrong answer (the default) against with it: last epoch 0.550 vs 0.350" in text
    assert "Q-memory against similarity-only: last epoch 0.550 vs 0.250" in text
