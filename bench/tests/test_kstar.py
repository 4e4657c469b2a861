"""The K* benchmark end to end on a scripted model: pools, team figures with intervals, the verdict, the
pages and the ``kstar_*`` keys (the real run uses the local model: ``python -m bench.kstar``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from bench import kstar
from connectors import HashEmbedder, Message, load_chat


def scripted() -> object:
    """Copies of the prompt as written answer alike (Dublin, one channel); each variant answers its own way,
    and two of the four are right."""

    def reply(messages: Sequence[Message]) -> str:
        system = messages[0].content
        if "meticulous expert" in system:
            return "Dublin is the capital."
        if "few words" in system:
            return "Cork."
        if "answer first" in system:
            return "Dublin."
        return "Dublin."

    return load_chat("fake/scripted", replies=reply)


def test_the_benchmark_reports_teams_by_size_and_the_verdict(tmp_path: Path) -> None:
    result = kstar.run(["format_rules"], tasks=3, copies=16, seeds=2, temperature=0.7, model="fake/scripted",
                       chat=scripted(), embedder=HashEmbedder(64), out=tmp_path)  # type: ignore[arg-type]  # fmt: skip
    fam = result["families"]["format_rules"]
    assert sorted(fam["homogeneous"]) == [1, 2, 4, 8, 16] and sorted(fam["heterogeneous"]) == [2, 4]
    assert fam["homogeneous"][16]["kstar"]["mean"] == pytest.approx(1.0)  # copies that always agree: one channel
    assert fam["heterogeneous"][4]["kstar"]["mean"] > 1.5  # variants that differ
    assert fam["diverse2_vs_homog16"]["verdict"] in ("above", "level", "below")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["kstar_format_rules_homog_16_kstar"] == pytest.approx(1.0)
    assert "kstar_format_rules_diverse2_minus_homog16_mean" in summary
    assert "kstar_format_rules_hetero_2_accuracy_ci_low" in summary
    assert (tmp_path / "kstar_format_rules.png").read_bytes()[:4] == b"\x89PNG"
    assert fam["variants"][-1] == "with memory"  # the memory variant: trained one round, then recalled from
    again = kstar.run([], tasks=3, copies=16, seeds=2, temperature=0.7, model="fake/scripted", chat=scripted(),
                      embedder=HashEmbedder(64), out=tmp_path)  # type: ignore[arg-type]  # fmt: skip
    assert list(again["families"]) == ["format_rules"]  # a family measured before and not named is kept
    assert "## format_rules" in (tmp_path / "kstar.md").read_text()
