"""The BFCL learning bench end to end on real BFCL tasks, with a scripted model that copies a correct call
from its recalled memories: memory must show under MemRL's protocol, the frozen store must not learn on
the test tasks, and the report, plots and summary keys must carry every cell."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from bench.bfcl_learning import Profile, run, split, summary_keys
from connectors import ConfigError, HashEmbedder, Message, load_chat
from evolve import bfcl_tasks

REVEALED = re.compile(r"A correct call: (.+?)(?:\n|$)")


def copier(messages: Sequence[Message]) -> str:
    """Answers with the correct call a recalled failure revealed for this very question, else in prose."""
    text = messages[-1].content
    question = text.rsplit("Task: ", 1)[-1]
    for block in re.findall(r"<experience>(.*?)</experience>", text, re.S):
        if question.strip() in block:
            found = REVEALED.search(block)
            if found:
                return f"[{found.group(1)}]"
    return "The answer depends on the inputs."


def test_memory_learns_the_calls_it_was_shown_and_frozen_memory_stays_frozen(tmp_path: Path) -> None:
    chat = load_chat("fake/scripted", replies=copier)
    profile = Profile(
        categories=("simple_python",), conditions=("no_memory", "q_memory"), epochs=2, train=3, test=2, seeds=2
    )

    result = run(
        profile, name="test", chat=chat, embedder=HashEmbedder(), model="fake/scripted", out=tmp_path, batch_size=4
    )

    cells = result["categories"]["simple_python"]["conditions"]
    assert cells["no_memory"]["last_per_seed"] == [0.0, 0.0] and cells["no_memory"]["transfer_per_seed"] == [0.0, 0.0]
    assert cells["q_memory"]["per_epoch"] == [0.0, 1.0]  # epoch 1 fails and is shown the call; epoch 2 copies it
    assert cells["q_memory"]["transfer_per_seed"] == [0.0, 0.0]  # unseen tasks: nothing of theirs was stored
    seed0 = cells["q_memory"]["per_seed"][0]
    assert not set(seed0["train_ids"]) & set(seed0["test_ids"])
    assert seed0["memory_size"] == seed0["memory_after_test"] == 6  # 3 tasks x 2 epochs; the test tasks wrote none
    keys = json.loads((tmp_path / "summary.json").read_text())
    for cond in ("no_memory", "q_memory"):
        for metric in ("last", "cum", "transfer"):
            assert f"learning_bfcl_simple_python_{cond}_{metric}_ci_low" in keys
    assert keys["learning_bfcl_simple_python_q_memory_last"] == 1.0
    assert keys == {**keys, **summary_keys(result)}
    assert (tmp_path / "bfcl_learning_simple_python.png").stat().st_size > 0
    assert "| q_memory | 1.000" in (tmp_path / "bfcl_learning.md").read_text()


def test_splits_are_disjoint_per_seed_and_too_many_tasks_is_a_clear_error() -> None:
    tasks = bfcl_tasks("multiple")
    train, test = split(tasks, 150, 50, seed=1)
    assert len({t.id for t in train + test}) == 200
    assert split(tasks, 5, 5, seed=1) != split(tasks, 5, 5, seed=2)
    with pytest.raises(ConfigError, match="the category has 200"):
        split(tasks, 150, 51, seed=0)
