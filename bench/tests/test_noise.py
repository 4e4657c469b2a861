"""The noisy-ratings bench: the rule reader reads what the best memory shows (answers, revealed answers,
BFCL calls), a run on a real family pairs its cells by seed, and the keys and report carry every cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.noise import main, rule_reply
from connectors import Message

SUCCESS = "<experience>\nTask: Door code of Halle 7?\nOutcome: success\nTrajectory (condensed):\nAnswer given: 4471\nFeedback: Correct.\n</experience>"
FAILURE = "<experience>\nTask: Door code of Halle 8?\nOutcome: failure\nTrajectory (condensed):\n(not kept)\nFeedback: Wrong. The expected answer is: 9902.\n</experience>"
CALL = "<experience>\nTask: Area?\nOutcome: failure\nTrajectory (condensed):\n(not kept)\nFeedback: Wrong: No function call found. A correct call: area(base=10, height=5)\n</experience>"
CALLED = "<experience>\nTask: Area?\nOutcome: success\nTrajectory (condensed):\nCalled area(base=10) -> (described)\nFeedback: Correct.\n</experience>"
RATED_BAD = "<experience>\nTask: Door code?\nOutcome: failure\nTrajectory (condensed):\n(not kept)\nFeedback: Wrong.\n</experience>"


@pytest.mark.parametrize(
    ("shown", "answer"),
    [
        (SUCCESS, "4471"),
        (FAILURE, "9902"),
        (SUCCESS + FAILURE, "9902"),  # rendered best last: the last one is read
        (CALL, "[area(base=10, height=5)]"),
        (CALLED, "[area(base=10)]"),
        (RATED_BAD, "unknown"),  # a wrong "bad" rating reveals nothing
        ("Task: Door code?", "unknown"),
    ],
)
def test_the_rule_reader_answers_with_what_the_best_memory_shows(shown: str, answer: str) -> None:
    assert rule_reply([Message("user", f"Past experience:\n{shown}\n\nTask: Door code?")]) == answer


def test_a_run_reports_every_cell_with_keys_and_wrong_rho_is_refused(tmp_path: Path) -> None:
    argv = ["--families", "lookalikes", "--conditions", "similarity", "q_context", "--rhos", "0", "0.3",
            "--seeds", "2", "--embedder", "hash", "--out", str(tmp_path), "--quiet"]  # fmt: skip
    result = main(argv)
    cells = result["families"]["lookalikes"]["cells"]
    assert set(cells) == {"similarity", "q_context"} and set(cells["similarity"]) == {"rho0", "rho3"}
    assert all(len(seeds) == 2 and len(seeds[0]["per_epoch"]) == 8 for c in cells.values() for seeds in c.values())
    assert all(r["flips"] == 0 for r in cells["similarity"]["rho0"]) and any(
        r["flips"] for r in cells["similarity"]["rho3"]
    )
    keys = json.loads((tmp_path / "summary.json").read_text())
    assert "noise_lookalikes_q_context_rho3_last_mean_rule" in keys
    assert "noise_lookalikes_q_minus_similarity_rho3_last_ci_low_rule" in keys
    assert "### lookalikes (24 tasks, 8 epochs)" in (tmp_path / "noise.md").read_text()
    assert (tmp_path / "noise_lookalikes.png").stat().st_size > 10_000
    with pytest.raises(SystemExit):
        main([*argv[:6], "--rhos", "1.5"])
    with pytest.raises(SystemExit):  # a floor without the schedule it belongs to is refused, not dropped
        main([*argv, "--alpha-floor", "0.2"])
