"""How the BFCL learning bench splits a category's tasks into train and test, per seed.

``unseen``: any disjoint tasks; in BFCL almost every task calls its own function (simple_python: 57 of
400 tasks share a function with another), so the test tasks call functions never seen in training.
``same_tools``: new questions to functions seen in training, as an app with a fixed toolset meets them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from connectors import ConfigError
from evolve import Task

SPLITS = ("unseen", "same_tools")
TEST_TASKS = {"unseen": "unseen test tasks", "same_tools": "new questions to the functions seen in training"}


def split(
    tasks: Sequence[Task], train: int, test: int, seed: int, how: str = "unseen"
) -> tuple[list[Task], list[Task]]:
    """Disjoint train and test tasks drawn by ``seed``; ConfigError when the category has too few.

    ``unseen``: any tasks (the test ones mostly call functions never seen in training). ``same_tools``:
    new questions to functions seen in training, as an app with a fixed toolset meets them: one task of
    a function that several tasks call goes to train, another of the same function to test."""
    if train < 1 or test < 1:
        raise ConfigError(f"--train and --test must be >= 1, got {train} and {test}")
    rng = np.random.default_rng(seed)
    if how == "same_tools":
        return same_tools_split(tasks, train, test, rng)
    if how != "unseen":
        raise ConfigError(f"unknown split {how!r}; expected one of {', '.join(SPLITS)}")
    if train + test > len(tasks):
        raise ConfigError(f"{train} train + {test} test tasks asked, but the category has {len(tasks)}")
    order = rng.permutation(len(tasks))
    return [tasks[i] for i in order[:train]], [tasks[i] for i in order[train : train + test]]


def same_tools_split(
    tasks: Sequence[Task], train: int, test: int, rng: np.random.Generator
) -> tuple[list[Task], list[Task]]:
    by_tools: dict[tuple[str, ...], list[Task]] = {}
    for t in tasks:
        by_tools.setdefault(called(t), []).append(t)
    shared = [group for group in by_tools.values() if len(group) > 1]
    if max(train, test) > len(shared):
        raise ConfigError(
            f"split same_tools: {train} train and {test} test tasks need as many functions called by two or more "
            f"tasks, but the category has {len(shared)}"
        )
    train_tasks: list[Task] = []
    test_tasks: list[Task] = []
    for i in rng.permutation(len(shared))[: max(train, test)]:
        group = [shared[i][j] for j in rng.permutation(len(shared[i]))]
        if len(train_tasks) < train:
            train_tasks.append(group[0])
        if len(test_tasks) < test:
            test_tasks.append(group[1])
    return train_tasks, test_tasks


def called(task: Task) -> tuple[str, ...]:
    """The functions a task's correct answer calls (multi-turn tasks: none known, so each is its own)."""
    truth = task.meta.get("ground_truth")
    if not isinstance(truth, list) or not truth or not isinstance(truth[0], dict):
        return (task.id,)
    return tuple(sorted(name for call in truth for name in call))
