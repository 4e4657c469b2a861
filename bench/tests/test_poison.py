"""The poisoned-memory bench end to end on a real family: the second writer's memories arrive by import and
by promotion, are recalled without a defence and never with quarantine, and the keys carry every cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.noise import family_env
from bench.poison import main, poison_batch


def test_poison_arrives_is_recalled_and_quarantine_keeps_the_clean_figures(tmp_path: Path) -> None:
    argv = ["--families", "lookalikes", "--conditions", "similarity", "q_context", "--pis", "0", "0.3",
            "--paths", "import", "promote", "--defences", "none", "quarantine", "--seeds", "2",
            "--embedder", "hash", "--out", str(tmp_path), "--quiet"]  # fmt: skip
    cells = main(argv)["families"]["lookalikes"]["cells"]
    clean, held = cells["similarity"]["pi0"], cells["similarity"]["pi3/import/quarantine"]
    assert all(r["poison_recall"] > 0.1 for r in cells["similarity"]["pi3/import/none"])  # imported: recalled
    assert all(r["poison_share"] > 0.2 for r in cells["q_context"]["pi3/import/none"])  # about π of the memory
    assert [r["per_epoch"] for r in held] == [r["per_epoch"] for r in clean]  # nothing of his is recalled
    assert all(r["poison_recall_per_epoch"] == [0.0] * 8 for r in held)
    assert all(r["poison_share"] > 0 for r in cells["q_context"]["pi3/promote/none"])  # promoted: rated good twice
    assert all(r["poison_share"] == 0 for r in cells["similarity"]["pi3/promote/none"])  # α = 0: never promoted
    keys = json.loads((tmp_path / "summary.json").read_text())
    assert "poison_lookalikes_q_context_pi3_trust_last_mean_rule" in keys
    assert "poison_lookalikes_similarity_pi3_promote_poison_recall_rule" in keys
    with pytest.raises(SystemExit):
        main([*argv[:6], "--pis", "1.5"])


def test_the_second_writer_writes_about_pi_of_what_is_written_with_wrong_answers() -> None:
    _, tasks_of, _ = family_env("facility_codes")
    tasks = tasks_of(0)
    batch = poison_batch(tasks, 0.3, seed=0, epoch=1)
    assert len(batch) == round(0.3 / 0.7 * len(tasks)) and len({t.id for t, _, _ in batch}) == len(batch)
    assert all(wrong != str(t.answer) for t, _, wrong in batch)
    assert batch == poison_batch(tasks, 0.3, seed=0, epoch=1) and batch != poison_batch(tasks, 0.3, seed=0, epoch=2)
    assert poison_batch(tasks, 0.0, seed=0, epoch=1) == []
