"""The team-order benchmark end to end at a small size: both families, the conditions, the paired keys, the page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import team_order
from connectors import Message


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


def test_the_registers_family_has_its_own_keys_and_section_and_resumes(tmp_path: Path) -> None:
    team_order.main(["--family", "registers", "--seeds", "1", "--rounds", "4", "--out", str(tmp_path)])
    team_order.main(["--family", "registers", "--seeds", "2", "--rounds", "4", "--resume", "--out", str(tmp_path)])
    path = tmp_path / "team_order_registers.json"
    kept = json.loads(path.read_text("utf-8"))
    assert [r["seed"] for r in kept["runs"]] == [0, 1]  # the second call ran only the seed that was missing
    kept["runs"] = kept["runs"][1:]  # a gap: seed 1 run elsewhere, seed 0 not yet
    path.write_text(json.dumps(kept), "utf-8")
    team_order.main(["--family", "registers", "--seeds", "2", "--rounds", "4", "--resume", "--out", str(tmp_path)])
    assert [r["seed"] for r in json.loads(path.read_text("utf-8"))["runs"]] == [0, 1]
    summary = json.loads((tmp_path / "summary.json").read_text("utf-8"))
    assert summary["team_order_registers_spec_last_mean"] == 0.5  # the clerk acting last answers one kind only
    assert summary["team_order_registers_learned_served_mean"] == 1.0
    assert "team_order_spec_last_mean" not in summary  # the price desk's keys are its own
    assert "## registers family, rules reader" in (tmp_path / "team_order.md").read_text("utf-8")
    with pytest.raises(SystemExit):  # another run's settings are not resumed
        team_order.main(["--family", "registers", "--seeds", "2", "--rounds", "3", "--resume", "--out", str(tmp_path)])


def test_a_clerk_answers_only_from_its_own_register() -> None:
    family = team_order.Family("registers")
    keys = team_order.register_rule(family.systems["keys"])
    library = next(t for t in family.tasks if t.meta["place"] == "Library")
    handed = f"{library.prompt}\n<output of parking>\n5906\n</output of parking>"
    assert keys([Message("user", handed)]) == library.answer
    parking = team_order.register_rule(family.systems["parking"])
    assert parking([Message("user", library.prompt)]) == "That place is not in my register."
