"""The BFCL learning bench end to end on real BFCL tasks, with a scripted model that copies a correct call
from its recalled memories: memory must show under MemRL's protocol, the frozen store must not learn on
the test tasks, and the report, plots and summary keys must carry every cell."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from bench.bfcl_learning import Profile, run, summary_keys
from bench.bfcl_splits import called, split
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


def test_the_same_tools_split_asks_new_questions_to_the_functions_trained_on() -> None:
    tasks = bfcl_tasks("simple_python")
    train, test = split(tasks, 12, 12, seed=0, how="same_tools")
    assert not {t.id for t in train} & {t.id for t in test}
    assert sorted(map(called, train)) == sorted(map(called, test))  # every test function was seen once in training
    assert split(tasks, 12, 12, seed=1, how="same_tools") != (train, test)
    with pytest.raises(ConfigError, match="the category has 7"):
        split(bfcl_tasks("multiple"), 8, 8, seed=0, how="same_tools")  # only 7 functions are called twice there
    with pytest.raises(ConfigError, match="unknown split 'seen'"):
        split(tasks, 2, 2, seed=0, how="seen")


def test_add_keeps_the_earlier_conditions_and_refuses_other_settings(tmp_path: Path) -> None:
    chat = load_chat("fake/scripted", replies=copier)
    first = Profile(categories=("simple_python",), conditions=("no_memory",), epochs=1, train=2, test=2, seeds=2,
                    split="same_tools")  # fmt: skip
    later = Profile(**{**first.__dict__, "conditions": ("q_memory",)})

    def go(profile: Profile, add: bool = False) -> dict[str, Any]:
        return run(profile, name="test", chat=chat, embedder=HashEmbedder(), model="fake/scripted", out=tmp_path,
                   batch_size=4, add=add)  # fmt: skip

    go(first)
    result = go(later, add=True)

    assert list(result["categories"]["simple_python"]["conditions"]) == ["no_memory", "q_memory"]
    saved = json.loads((tmp_path / "bfcl_learning_same_tools.json").read_text())
    assert saved["categories"] == json.loads(json.dumps(result["categories"]))
    keys = json.loads((tmp_path / "summary.json").read_text())
    assert "learning_bfcl_simple_python_no_memory_transfer_same_tools_ci_low" in keys
    assert "learning_bfcl_simple_python_q_memory_last" not in keys  # this split reports transfer only
    with pytest.raises(ConfigError, match="ran other settings"):
        go(Profile(**{**later.__dict__, "epochs": 2}), add=True)
    with pytest.raises(ConfigError, match="no earlier report"):
        go(Profile(**{**later.__dict__, "split": "unseen"}), add=True)
