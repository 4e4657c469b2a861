"""Single-step task environments over JSONL task files, with checkers that turn answers into rewards.

A task file holds one JSON object per line: ``{"id": "t1", "prompt": "...", "answer": "4471"}`` plus
optional ``checker``, ``family``, ``feedback``, ``hint``, ``tolerance``, ``tests``, ``timeout``; any
other key lands in ``Task.meta``. ``TaskEnv`` implements ``connectors.environment.Environment``: ``reset``
returns the prompt, ``step`` checks the answer and ends the episode with a reward and feedback text.

Example:
    >>> env = TaskEnv([Task(id="t1", prompt="What is the code?", answer="4471")])
    >>> env.reset("t1")
    'What is the code?'
    >>> env.step("The code is 4471.").reward
    1.0
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from connectors.db import check_chars
from connectors.environment import Observation
from connectors.errors import ConfigError
from evolve.envs.rules import check_task as _check_rules
from evolve.envs.rules import validate_task as _validate_rules
from evolve.envs.textmatch import (
    matches_normalised,
    parse_number,
    run_program,
    strip_code_fences,
)

logger = logging.getLogger(__name__)

CheckResult = bool | float | tuple[float, str]
"""What a checker returns: pass/fail, a score in [0, 1], or (score, detail) where detail explains it."""

MAX_TASK_ID = 200
"""The most characters in a task id: the run log keys episodes and validation scores by it (VARCHAR(200))."""
FEEDBACK_MODES = ("reveal", "hint", "none")
_ANSWER_CHECKERS = frozenset({"exact", "normalised", "numeric", "regex", "contains"})
_FIELDS = ("id", "prompt", "answer", "checker", "family", "feedback", "hint", "tolerance", "tests", "timeout")


@dataclass(frozen=True)
class Task:
    """One task: the prompt an agent sees, the expected answer and how an answer is checked.

    ``answer`` is a string, a number, or a list of accepted answers (any one passes). ``checker`` names
    an entry of ``CHECKERS``. ``feedback`` says what a failure reveals: ``"reveal"`` the expected
    answer, ``"hint"`` only ``hint``, ``"none"`` nothing. ``tests`` and ``timeout`` serve the
    ``python`` checker; ``tolerance`` the ``numeric`` one. ``meta["changes"]``, a list of
    ``{"round": R, "answer": A}``, makes a fact that changes mid-run: from round R on, the expected
    answer is A (``in_round``). Invalid fields raise ``ConfigError``.

    Example:
        >>> Task(id="sum", prompt="2 + 2 = ?", answer=4, checker="numeric").checker
        'numeric'
    """

    id: str
    prompt: str
    answer: Any = None
    checker: str = "normalised"
    family: str = "default"
    feedback: str = "reveal"
    hint: str | None = None
    tolerance: float = 1e-6
    tests: str | None = None
    timeout: float = 10.0
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if isinstance(self.answer, list):
            object.__setattr__(self, "answer", tuple(self.answer))
        if not isinstance(self.meta, Mapping):
            raise ConfigError(f"task {self.id!r}: 'meta' must be an object, got {self.meta!r}")
        object.__setattr__(self, "meta", dict(self.meta))  # our own copy: the caller's dict may change
        _validate(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Task:
        """Build a task from one JSON object; unknown keys (and a ``meta`` object) go to ``meta``."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"expected a JSON object with 'id' and 'prompt', got {type(data).__name__}")
        missing = [key for key in ("id", "prompt") if key not in data]
        if missing:
            raise ConfigError(f"task is missing {' and '.join(repr(k) for k in missing)}; got keys {sorted(data)}")
        task_id = data["id"]
        if isinstance(task_id, int) and not isinstance(task_id, bool):
            task_id = str(task_id)
        extra = {k: v for k, v in data.items() if k not in _FIELDS and k != "meta"}
        meta = data.get("meta", {})
        meta = {**meta, **extra} if isinstance(meta, Mapping) else meta  # a non-object is refused on init
        known = {k: data[k] for k in _FIELDS if k in data and k != "id"}
        return cls(id=task_id, meta=meta, **known)

    def in_round(self, round_: int) -> Task:
        """The task as round ``round_`` asks it: the answer of the last ``meta["changes"]`` entry whose
        round has come, or this task unchanged.

        Example:
            >>> t = Task(id="ext", prompt="Ann's extension?", answer="214", meta={"changes": [{"round": 3, "answer": "388"}]})
            >>> t.in_round(2).answer, t.in_round(3).answer
            ('214', '388')
        """
        answer = self.answer
        for change in self.meta.get("changes", ()):
            if change["round"] <= round_:
                answer = change["answer"]
        return self if answer == self.answer else replace(self, answer=answer)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-line form of the task; ``Task.from_dict(t.to_dict()) == t``."""
        out: dict[str, Any] = {name: getattr(self, name) for name in _FIELDS}
        if isinstance(self.answer, tuple):
            out["answer"] = list(self.answer)
        if self.meta:
            out["meta"] = dict(self.meta)
        return out


# ---------------------------------------------------------------- validation and loading
def _validate(task: Task) -> None:
    """Raise ConfigError naming the first field of ``task`` that is wrong."""
    where = f"task {task.id!r}"
    if not isinstance(task.id, str) or not task.id.strip():
        raise ConfigError(f"task 'id' must be a non-empty string, got {task.id!r}")
    if len(task.id) > MAX_TASK_ID:
        raise ConfigError(f"task 'id' must be at most {MAX_TASK_ID} characters, got {len(task.id)}: {task.id!r:.80}")
    check_chars("task 'id'", task.id)
    for name in ("prompt", "family", "checker", "feedback"):
        value = getattr(task, name)
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{where}: {name!r} must be a non-empty string, got {value!r}")
    if task.checker not in CHECKERS:
        raise ConfigError(
            f"{where}: unknown checker {task.checker!r}; expected one of {', '.join(sorted(CHECKERS))} "
            "(add your own with register_checker)"
        )
    if task.feedback not in FEEDBACK_MODES:
        raise ConfigError(f"{where}: 'feedback' must be one of {FEEDBACK_MODES}, got {task.feedback!r}")
    if task.feedback == "hint" and not (isinstance(task.hint, str) and task.hint.strip()):
        raise ConfigError(f"{where}: feedback 'hint' needs a non-empty 'hint' string, got {task.hint!r}")
    for name, positive in (("tolerance", False), ("timeout", True)):
        value = getattr(task, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ConfigError(f"{where}: {name!r} must be a non-negative number, got {value!r}")
        if positive and value == 0:
            raise ConfigError(f"{where}: 'timeout' must be positive, got {value!r}")
    _validate_answer(task, where)
    _validate_changes(task, where)


def _validate_changes(task: Task, where: str) -> None:
    """``meta["changes"]``: rounds after the first, increasing, each with an answer its checker accepts."""
    changes = task.meta.get("changes")
    if changes is None:
        return
    expected = 'a list of {"round": R, "answer": A} with increasing rounds R >= 2'
    if not isinstance(changes, list) or not changes:
        raise ConfigError(f"{where}: meta 'changes' must be {expected}, got {changes!r}")
    last = 1
    for change in changes:
        ok = isinstance(change, Mapping) and set(change) == {"round", "answer"}
        ok = ok and isinstance(change["round"], int) and not isinstance(change["round"], bool)
        if not ok or change["round"] <= last:
            raise ConfigError(f"{where}: meta 'changes' must be {expected}, got {change!r}")
        last = change["round"]
        try:
            replace(task, answer=change["answer"], meta={})  # validated as the task's own answer would be
        except ConfigError as e:
            raise ConfigError(f"{where}, change at round {last}: {str(e).removeprefix(where + ': ')}") from None


def _validate_answer(task: Task, where: str) -> None:
    """The built-in checkers' needs; a registered checker gets ``answer`` and ``tests`` as they are."""
    if task.checker == "rules":
        _validate_rules(task)  # known rules in meta["rules"] and a non-empty answer
    if task.checker == "python" and not (isinstance(task.tests, str) and task.tests.strip()):
        raise ConfigError(f"{where}: the python checker needs 'tests' (code that exits 0 when the answer passes)")
    if task.checker not in _ANSWER_CHECKERS:
        return
    for item in task.answer if isinstance(task.answer, tuple) else (task.answer,):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)) or not str(item).strip():
            raise ConfigError(
                f"{where}: 'answer' must be a non-empty string, a number or a list of them, got {task.answer!r}"
            )
        if task.checker == "numeric" and parse_number(str(item), whole=True) is None:
            raise ConfigError(f"{where}: the numeric checker needs a numeric 'answer', got {item!r}")
        if task.checker == "regex":
            try:
                re.compile(str(item))
            except re.error as exc:
                raise ConfigError(f"{where}: 'answer' {item!r} is not a valid regular expression ({exc})") from exc


def load_tasks(path: str | Path) -> list[Task]:
    """Read a JSONL task file (blank lines skipped); errors name the file and line.

    Raises:
        ConfigError: missing file, bad JSON, a missing 'id'/'prompt', an unknown checker, a duplicate
            id, or an empty file.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read task file {path}: {exc.strerror or exc}") from exc
    tasks: list[Task] = []
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            task = Task.from_dict(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from exc
        except ConfigError as exc:
            raise ConfigError(f"{path}:{lineno}: {exc}") from exc
        if task.id in first_line:
            raise ConfigError(f"{path}:{lineno}: duplicate task id {task.id!r} (first on line {first_line[task.id]})")
        first_line[task.id] = lineno
        tasks.append(task)
    if not tasks:
        raise ConfigError(f"{path}: expected at least one task, found none (the file is empty)")
    return tasks


def _accepted(task: Task) -> tuple[str, ...]:
    items = task.answer if isinstance(task.answer, tuple) else (task.answer,)
    return tuple(str(item) for item in items if item is not None)


# ---------------------------------------------------------------- checkers
def _check_exact(task: Task, answer: str) -> bool:
    return answer.strip() in {expected.strip() for expected in _accepted(task)}


def _check_normalised(task: Task, answer: str) -> bool:
    return any(matches_normalised(expected, answer) for expected in _accepted(task))


def _check_numeric(task: Task, answer: str) -> CheckResult:
    got = parse_number(answer)
    if got is None:
        return 0.0, "No number found in the answer."
    for expected in _accepted(task):
        want = parse_number(expected, whole=True)
        if want is not None and abs(got - want) <= task.tolerance * max(1.0, abs(want)):
            return True
    return False


def _check_regex(task: Task, answer: str) -> bool:
    return any(re.search(pattern, answer, re.IGNORECASE) for pattern in _accepted(task))


def _check_contains(task: Task, answer: str) -> bool:
    haystack = " ".join(answer.casefold().split())
    return any(" ".join(expected.casefold().split()) in haystack for expected in _accepted(task))


def _check_python(task: Task, answer: str) -> CheckResult:
    code = strip_code_fences(answer)
    if not code.strip():
        return 0.0, "The answer holds no code."
    passed, detail = run_program(f"{code.rstrip()}\n\n\n{task.tests}\n", timeout=task.timeout)
    return (1.0, "") if passed else (0.0, detail)


CHECKERS: dict[str, Callable[[Task, str], CheckResult]] = {
    "exact": _check_exact,
    "normalised": _check_normalised,
    "numeric": _check_numeric,
    "regex": _check_regex,
    "contains": _check_contains,
    "python": _check_python,
    "rules": _check_rules,
}
"""Checker name → ``fn(task, answer)``. Built in: ``exact`` (equal after ``strip``), ``normalised`` (see
``matches_normalised``), ``numeric`` (the last number in the answer, "1,234" / "-3.5" / "1e3", within
``tolerance · max(1, |expected|)``), ``regex`` (``answer`` is a pattern searched case-insensitively),
``contains`` (the expected text inside the answer, ignoring case and runs of whitespace), ``python``
(``answer`` is a program, fenced or not, run with ``tests`` appended; passes on exit code 0), ``rules`` (the
output rules in ``meta["rules"]`` and the content, see ``evolve.envs.rules``). With a list
``answer`` any accepted one passes. Extend with ``register_checker``."""


def register_checker(name: str, fn: Callable[[Task, str], CheckResult], *, replace: bool = False) -> None:
    """Add a checker to ``CHECKERS``; tasks may then name it. Register before loading such tasks.

    Example:
        >>> register_checker("yes", lambda task, answer: answer.strip().lower() == "yes", replace=True)
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"a checker name must be a non-empty string, got {name!r}")
    if not callable(fn):
        raise ConfigError(f"checker {name!r} must be callable (task, answer) -> bool | float, got {fn!r}")
    if name in CHECKERS and not replace:
        raise ConfigError(f"checker {name!r} already exists; pass replace=True to override it")
    CHECKERS[name] = fn


# ---------------------------------------------------------------- scoring and feedback
def check(task: Task, answer: str) -> tuple[float, str]:
    """Score ``answer`` with the task's checker: ``(reward in [0, 1], feedback text)``.

    Example:
        >>> check(Task(id="t", prompt="Code?", answer="4471"), "44711")
        (0.0, 'Wrong. The expected answer is: 4471.')
    """
    if not isinstance(answer, str):
        raise ConfigError(f"task {task.id!r}: expected the answer as a string, got {type(answer).__name__}")
    result = CHECKERS[task.checker](task, answer)
    score, detail = result if isinstance(result, tuple) else (result, "")
    reward = float(score)
    if not 0.0 <= reward <= 1.0:  # also rejects NaN
        raise ConfigError(f"checker {task.checker!r} returned {score!r}; expected a bool or a float in [0, 1]")
    return reward, feedback_text(task, reward, detail)


def feedback_text(task: Task, reward: float, detail: str = "") -> str:
    """``"Correct."`` for reward 1; otherwise the verdict, the checker's detail and what the mode allows.

    ``detail`` (say, a traceback) is left out in mode ``"none"``; ``"hint"`` adds ``task.hint``;
    ``"reveal"`` adds the expected answer.
    """
    if reward >= 1.0:
        return "Correct."
    parts = ["Wrong." if reward <= 0.0 else f"Partly correct (score {reward:.2f})."]
    if task.feedback != "none" and detail:
        parts.append(detail)
    if task.feedback == "hint" and task.hint:
        parts.append(f"Hint: {task.hint}")
    elif task.feedback == "reveal":
        parts.extend(_reveal(task))
    return ("\n" if any("\n" in part for part in parts) else " ").join(parts)


def _reveal(task: Task) -> list[str]:
    accepted = _accepted(task)
    if not accepted:
        return []
    first = accepted[0].strip()
    if task.checker == "python":
        return [f"A reference solution:\n{first}"]
    if task.checker == "regex":
        return [f"The answer should match the pattern: {first}"]
    if "\n" in first:
        return [f"The expected answer is:\n{first}"]
    return [f"The expected answer is: {first}" + ("" if first.endswith((".", "!", "?")) else ".")]


# ---------------------------------------------------------------- the environment
class TaskEnv:
    """An ``Environment`` of single-step tasks: ``reset`` shows the prompt, ``step`` checks the answer.

    Build it from a list of tasks (cheap: make one per worker thread from a list loaded once) or from
    a JSONL path. An instance keeps the current task, so it serves one thread at a time.

    Example:
        >>> env = TaskEnv([Task(id="t1", prompt="2 + 2?", answer=4, checker="numeric")])
        >>> env.reset("t1")
        '2 + 2?'
        >>> obs = env.step("It is 4.")
        >>> obs.reward, obs.done, obs.text
        (1.0, True, 'Correct.')
    """

    def __init__(self, tasks: Sequence[Task | Mapping[str, Any]] | str | Path) -> None:
        loaded = load_tasks(tasks) if isinstance(tasks, (str, Path)) else [_as_task(t) for t in tasks]
        self.tasks: list[Task] = loaded
        self._by_id: dict[str, Task] = {}
        for task in loaded:
            if task.id in self._by_id:
                raise ConfigError(f"duplicate task id {task.id!r} in the tasks given to TaskEnv")
            self._by_id[task.id] = task
        self._current: Task | None = None

    def __len__(self) -> int:
        return len(self.tasks)

    def get(self, task_id: str) -> Task:
        """The task with this id; ConfigError naming some known ids otherwise."""
        try:
            return self._by_id[task_id]
        except KeyError:
            known = ", ".join(repr(k) for k in list(self._by_id)[:5]) or "none"
            raise ConfigError(f"unknown task id {task_id!r}; known ids include {known}") from None

    def reset(self, task: Task | Mapping[str, Any] | str) -> str:
        """Start an episode on ``task`` (a Task, a JSON-line dict or a task id); returns its prompt."""
        self._current = self.get(task) if isinstance(task, str) else _as_task(task)
        return self._current.prompt

    def step(self, action: str) -> Observation:
        """Check ``action`` as the answer; the episode ends (``done=True``) whatever the reward."""
        task = self._current
        if task is None:
            raise ConfigError("step() called before reset(task), or after the episode ended; call reset(task) first")
        self._current = None
        reward, text = check(task, action)
        info: dict[str, Any] = {"task_id": task.id, "checker": task.checker, "family": task.family}
        if task.feedback == "reveal":
            info["expected"] = list(task.answer) if isinstance(task.answer, tuple) else task.answer
        return Observation(text=text, reward=reward, done=True, info=info)


def _as_task(task: Task | Mapping[str, Any]) -> Task:
    if isinstance(task, Task):
        return task
    if isinstance(task, Mapping):
        return Task.from_dict(task)
    raise ConfigError(f"expected a Task, a task dict or a task id, got {type(task).__name__}")
