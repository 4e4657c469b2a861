"""BFCL's single-turn Python categories as tasks and an environment: the question is the prompt, the
functions are the episode's tools (described, never run), and the answer is the calls in BFCL's call
syntax, checked by ``evolve.envs.bfcl.ast_check`` (BFCL's AST rules).

``bfcl_tasks(category)`` gives ``Task``s with the checker ``"bfcl"`` (so ``TaskEnv`` can run them too);
``BfclEnv`` adds ``tools()`` and puts the decoded calls and the checker's error in ``Observation.info``.
A failed answer's feedback says what was wrong and shows a correct call.

Example:
    >>> env = BfclEnv(bfcl_tasks("simple_python", limit=1))                      # doctest: +SKIP
    >>> env.reset("simple_python_0")                                            # doctest: +SKIP
    'Find the area of a triangle with a base of 10 units and height of 5 units.'
    >>> [t.name for t in env.tools()]                                           # doctest: +SKIP
    ['calculate_triangle_area']
    >>> env.step("[calculate_triangle_area(base=10, height=5)]").reward          # doctest: +SKIP
    1.0
    >>> env.step("The area is 25.").text                                        # doctest: +SKIP
    'Wrong: No function call found; expected a call to calculate_triangle_area(...). A correct call: ...'
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connectors.environment import Observation
from connectors.errors import ConfigError
from connectors.tools import Tool
from evolve.envs.bfcl.ast_check import Call, calls_text, check_calls, decode_answer, reference_calls
from evolve.envs.bfcl.data import read_rows, tool_of
from evolve.envs.bfcl.decode import NO_CALL
from evolve.envs.tasks import CHECKERS, Task, TaskEnv, register_checker

logger = logging.getLogger(__name__)

SINGLE_TURN = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple")
"""The categories read here: Python function calls, checked by BFCL's AST rules."""
CHECKER = "bfcl"


def bfcl_tasks(category: str, *, limit: int | None = None) -> list[Task]:
    """The rows of a single-turn BFCL ``category`` (first ``limit`` of them) as tasks.

    A task's id is BFCL's, its prompt the question's messages (system ones included) joined, its
    family the category, its answer a correct call's text (what the feedback reveals), and its
    ``meta`` the row's ``functions``, ``ground_truth`` and ``category``.

    Raises:
        ConfigError: an unknown or multi-turn category, a bad ``limit``, or bfcl-eval not installed.
    """
    if category not in SINGLE_TURN:
        raise ConfigError(f"not a single-turn BFCL category: {category!r}; expected one of {', '.join(SINGLE_TURN)}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError(f"limit must be a non-negative integer or None, got {limit!r}")
    register()
    rows = read_rows(category)
    return [task_of(row, category) for row in rows[:limit]]


def task_of(row: Mapping[str, Any], category: str) -> Task:
    """One BFCL row (with its ``ground_truth``) as a task; see ``bfcl_tasks``."""
    register()
    functions, truth = row["function"], row["ground_truth"]
    meta = {"functions": functions, "ground_truth": truth, "category": category}
    answer = calls_text(reference_calls(functions, truth))
    return Task(
        id=row["id"], prompt=prompt_of(row["question"]), answer=answer, checker=CHECKER, family=category, meta=meta
    )


def prompt_of(question: Sequence[Sequence[Mapping[str, Any]]]) -> str:
    """A BFCL question (turns of ``{"role", "content"}`` messages) as one text, system messages kept."""
    return "\n\n".join(str(m["content"]).strip() for turn in question for m in turn if str(m["content"]).strip())


def register() -> None:
    """Add the ``"bfcl"`` checker to ``evolve.envs.tasks.CHECKERS`` (once) so ``TaskEnv`` runs these tasks."""
    if CHECKERS.get(CHECKER) is not check_task:
        register_checker(CHECKER, check_task, replace=True)


@dataclass(frozen=True)
class Graded:
    """One answer, graded: the reward, the feedback text, the calls read from it, the checker's error."""

    reward: float
    feedback: str
    calls: list[Call]
    error: str


def grade(task: Task, answer: str) -> Graded:
    """Decode ``answer`` and check its calls against ``task``'s row; never raises on the answer's text."""
    meta = task.meta
    decoded = decode_answer(answer)
    calls = decoded if isinstance(decoded, list) else []
    if not decoded or decoded == NO_CALL:
        names = [f"{next(iter(g))}(...)" for g in meta["ground_truth"]]
        wanted = f"a call to {names[0]}" if len(names) == 1 else f"{len(names)} calls: {', '.join(names)}"
        error = f"{NO_CALL}; expected {wanted}"
    elif isinstance(decoded, str):
        error = decoded
    else:
        error = check_calls(meta["functions"], meta["ground_truth"], calls, meta["category"]).error
    if not error:
        return Graded(1.0, "Correct.", calls, "")
    return Graded(0.0, f"Wrong: {error}. {_reveal(task)}", calls, error)


def _reveal(task: Task) -> str:
    functions, truth = task.meta["functions"], task.meta["ground_truth"]
    reference = reference_calls(functions, truth)
    if not check_calls(functions, truth, reference, task.meta["category"]).valid:
        return f"BFCL's possible answer for this row accepts no call; the intended one is: {task.answer}"
    return f"A correct call: {task.answer}" if len(reference) == 1 else f"Correct calls: {task.answer}"


def check_task(task: Task, answer: str) -> tuple[float, str]:
    """The ``"bfcl"`` checker for ``TaskEnv``: (reward, what was wrong)."""
    graded = grade(task, answer)
    return graded.reward, f"{graded.error}." if graded.error else ""


class BfclEnv(TaskEnv):
    """An ``Environment`` over BFCL single-turn tasks whose episode also has ``tools()``.

    ``reset(task)`` returns the question; ``tools()`` the row's functions as ``Tool``s with no ``fn``
    (the calls are checked, not run); ``step(answer)`` reads the calls in ``answer`` (BFCL's call
    syntax or JSON) and ends the episode with reward 1.0 or 0.0. One instance serves one thread.

    Example:
        >>> env = BfclEnv(bfcl_tasks("parallel", limit=5))                      # doctest: +SKIP
        >>> env.reset("parallel_0"); len(env.tools())                           # doctest: +SKIP
        1
    """

    def __init__(self, tasks: Sequence[Task]) -> None:
        register()
        for task in tasks:
            if not isinstance(task, Task) or not {"functions", "ground_truth", "category"} <= set(task.meta):
                raise ConfigError(f"BfclEnv takes tasks from bfcl_tasks(...), got {task!r:.120}")
        super().__init__(tasks)  # ids checked unique; len() and get(id) as TaskEnv's
        self._episode: Task | None = None
        self._tools: dict[str, list[Tool]] = {}

    def reset(self, task: Task | Mapping[str, Any] | str) -> str:
        """Start an episode on ``task`` (one of this env's tasks, its id, or its dict); returns the question."""
        key = task if isinstance(task, str) else task.get("id", "") if isinstance(task, Mapping) else task.id
        chosen = self.get(str(key))
        self._current = self._episode = chosen
        return chosen.prompt

    def tools(self) -> list[Tool]:
        """The functions of the episode started by the last ``reset``, as tools without ``fn``."""
        if self._episode is None:
            raise ConfigError("tools() called before reset(task); call reset(task) first")
        task = self._episode
        if task.id not in self._tools:
            self._tools[task.id] = [tool_of(f) for f in task.meta["functions"]]
        return list(self._tools[task.id])

    def step(self, action: str) -> Observation:
        """Check the calls in ``action``; the episode ends whatever the reward."""
        task = self._current
        if task is None:
            raise ConfigError("step() called before reset(task), or after the episode ended; call reset(task) first")
        if not isinstance(action, str):
            raise ConfigError(f"task {task.id!r}: expected the answer as a string, got {type(action).__name__}")
        self._current = None
        graded = grade(task, action)
        info = {
            "task_id": task.id, "category": task.meta["category"], "calls": graded.calls,
            "error": graded.error, "expected": task.answer,
        }  # fmt: skip
        return Observation(text=graded.feedback, reward=graded.reward, done=True, info=info)


__all__ = [
    "CHECKER", "SINGLE_TURN", "BfclEnv", "Graded", "bfcl_tasks", "check_task", "grade", "prompt_of", "register", "task_of",
]  # fmt: skip
