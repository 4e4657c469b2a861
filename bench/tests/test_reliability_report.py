"""The reliability report: parts run in their own process, a broken guarantee is marked and fails the run."""

from __future__ import annotations

from bench.reliability import broken, render, run_part

PART = {
    "title": "Crashes",
    "rows": [["SIGKILL trials", 50], ["acknowledged writes lost", 0], ["feedback applied twice", 2]],
    "notes": "one note",
    "seconds": 1.5,
}


def test_a_guarantee_that_is_not_zero_is_named_and_marked() -> None:
    assert broken(PART["rows"]) == ["feedback applied twice"]  # trials are a count, not a guarantee
    text = render({"crash": PART}, quick=True, total=2.0)
    assert "| SIGKILL trials | 50 |" in text and "| acknowledged writes lost | 0 |" in text
    assert "| feedback applied twice | 2 **(must be 0)** |" in text
    assert "`python -m bench.reliability_crash`" in text


def test_a_part_that_cannot_run_is_reported_with_its_error() -> None:
    out = run_part("does_not_exist", quick=True)
    assert "No module named 'bench.reliability_does_not_exist'" in out["error"]
    assert "**FAILED**" in render({"does_not_exist": out}, quick=True, total=1.0)
