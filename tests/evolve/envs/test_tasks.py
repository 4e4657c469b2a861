"""Task environments: checkers, feedback modes, JSONL loading and the reset/step contract."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from connectors.environment import Environment, Observation
from connectors.errors import ConfigError
from evolve.envs.tasks import (
    CHECKERS,
    Task,
    TaskEnv,
    check,
    load_tasks,
    matches_normalised,
    register_checker,
    strip_code_fences,
)


def task(**kw: Any) -> Task:
    kw.setdefault("id", "t1")
    kw.setdefault("prompt", "What is the code?")
    return Task(**kw)


def reward(given: str, /, **kw: Any) -> float:
    return check(task(**kw), given)[0]


def write_jsonl(path: Path, *rows: Any) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------- checkers


@pytest.mark.parametrize("answer", ["4471", "  4471\n"])
def test_exact_strips_only(answer: str) -> None:
    assert reward(answer, answer="4471", checker="exact") == 1.0


@pytest.mark.parametrize("answer", ["4471.", "The code is 4471", "abc"])
def test_exact_rejects_anything_else(answer: str) -> None:
    assert reward(answer, answer="4471", checker="exact") == 0.0


def test_exact_is_case_sensitive() -> None:
    assert reward("paris", answer="Paris", checker="exact") == 0.0


@pytest.mark.parametrize(
    "answer",
    ["4471", "4471.", "The code is 4471.", "the code is **4471**!", "Answer: 4471", "(4471)", "«4471»", "`4471`"],
)
def test_normalised_accepts_expected_inside_a_short_answer(answer: str) -> None:
    assert reward(answer, answer="4471") == 1.0


@pytest.mark.parametrize(
    "answer", ["44711", "The code is 44711.", "14471", "4471.5", "4471-b", "447 1", "code-4471x", ""]
)
def test_normalised_rejects_near_misses(answer: str) -> None:
    assert reward(answer, answer="4471") == 0.0


def test_normalised_rejects_a_long_answer_that_merely_mentions_the_expected() -> None:
    long = "I tried many codes like 1234 and 5678 and 9999 and also 4471 but none of them really worked out."
    assert reward(long, answer="4471") == 0.0
    assert not matches_normalised("4471", long)


def test_normalised_casefolds_collapses_whitespace_and_matches_multiword_answers() -> None:
    assert reward("  new\n  YORK ", answer="New York") == 1.0
    assert reward("I think it is New York.", answer="New York") == 1.0
    assert reward("York New", answer="New York") == 0.0


def test_normalised_keeps_meaningful_symbols() -> None:
    assert reward("C#", answer="C++") == 0.0
    assert reward("I would use C++.", answer="C++") == 1.0
    assert reward("3", answer="-3") == 0.0


def test_list_answer_accepts_any_of_them() -> None:
    for checker in ("exact", "normalised", "contains"):
        assert reward("colour", answer=["color", "colour"], checker=checker) == 1.0
        assert reward("collar", answer=["color", "colour"], checker=checker) == 0.0


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("The total is 1,234.", 1234),
        ("-3.5", -3.5),
        ("x = −3.5", -3.5),  # unicode minus
        ("1e3", 1000),
        ("about 2.5E-3 units", 0.0025),
        ("Step 1: 2 + 2. Step 2: so the answer is 4", 4),
        ("1,234,567.25", "1234567.25"),
        ("$42", "42"),
        (".5", 0.5),
    ],
)
def test_numeric_reads_the_last_number(answer: str, expected: Any) -> None:
    assert reward(answer, answer=expected, checker="numeric") == 1.0


@pytest.mark.parametrize("answer", ["4 then 5", "41", "no idea", "2024-05-04 is 5", "x4"])
def test_numeric_rejects_wrong_or_missing_numbers(answer: str) -> None:
    assert reward(answer, answer=4, checker="numeric") == 0.0


def test_numeric_tolerance_is_relative_to_large_values_and_absolute_near_zero() -> None:
    assert reward("1000.0005", answer=1000, checker="numeric", tolerance=1e-6) == 1.0
    assert reward("1000.01", answer=1000, checker="numeric", tolerance=1e-6) == 0.0
    assert reward("0.01", answer=0, checker="numeric", tolerance=0.1) == 1.0
    assert reward("0.2", answer=0, checker="numeric", tolerance=0.1) == 0.0


def test_numeric_explains_a_missing_number() -> None:
    assert check(task(answer=4, checker="numeric", feedback="none"), "four")[1] == "Wrong."
    assert "No number found" in check(task(answer=4, checker="numeric"), "four")[1]


def test_regex_searches_case_insensitively() -> None:
    assert reward("The CODE is 4471", answer=r"code is \d{4}\b", checker="regex") == 1.0
    assert reward("code is 44", answer=r"code is \d{4}\b", checker="regex") == 0.0
    assert reward("yes", answer=["^no$", "^yes$"], checker="regex") == 1.0


def test_contains_ignores_case_and_whitespace() -> None:
    assert reward("Well, the capital is  PARIS, France", answer="paris, france", checker="contains") == 1.0
    assert reward("Lyon", answer="Paris", checker="contains") == 0.0


# ---------------------------------------------------------------- python checker

ADD_TESTS = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n"


def test_python_passes_a_correct_program_inside_fences() -> None:
    answer = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```\nHope it helps."
    assert check(task(checker="python", tests=ADD_TESTS), answer) == (1.0, "Correct.")


def test_python_fails_a_wrong_program_with_the_traceback_tail() -> None:
    r, text = check(task(checker="python", tests=ADD_TESTS), "def add(a, b):\n    return a - b\n")
    assert r == 0.0
    assert text.startswith("Wrong.")
    assert "AssertionError" in text
    assert "evolve-task-" not in text  # the temp path is replaced by a stable name


def test_python_reports_a_syntax_error() -> None:
    r, text = check(task(checker="python", tests=ADD_TESTS), "```python\ndef add(a, b) return a + b\n```")
    assert r == 0.0
    assert "SyntaxError" in text


def test_python_kills_a_program_that_runs_past_its_timeout() -> None:
    r, text = check(task(checker="python", tests="pass", timeout=0.5), "while True:\n    pass\n")
    assert r == 0.0
    assert "timed out after 0.5 s" in text


def test_python_feedback_is_the_tail_of_a_long_output() -> None:
    flood = "import sys\nfor i in range(20000):\n    print(f'line {i}', file=sys.stderr)\nsys.exit(3)\n"
    r, text = check(task(checker="python", tests="pass", feedback="none"), flood)
    assert (r, text) == (0.0, "Wrong.")  # mode "none" hides the detail
    r, text = check(task(checker="python", tests="pass"), flood)
    assert text.splitlines()[-1] == "line 19999"
    assert "line 0\n" not in text and len(text.splitlines()) <= 21


def test_python_with_no_code_fails() -> None:
    assert check(task(checker="python", tests="pass"), "```python\n```")[0] == 0.0


def test_python_reveals_a_reference_solution_when_given() -> None:
    t = task(checker="python", tests=ADD_TESTS, answer="def add(a, b):\n    return a + b")
    text = check(t, "def add(a, b):\n    return 0")[1]
    assert "A reference solution:\ndef add(a, b):" in text


def test_strip_code_fences() -> None:
    assert strip_code_fences("```py\nx = 1\n```\n```python\ny = 2\n```") == "x = 1\n"
    assert strip_code_fences("```python\nx = 1\n") == "x = 1\n"  # truncated answer, no closing fence
    assert strip_code_fences("x = 1") == "x = 1"


# ---------------------------------------------------------------- feedback modes and custom checkers


def test_feedback_modes() -> None:
    assert check(task(answer="4471"), "4470") == (0.0, "Wrong. The expected answer is: 4471.")
    assert check(task(answer="4471", feedback="hint", hint="It is prime."), "4470") == (
        0.0,
        "Wrong. Hint: It is prime.",
    )
    assert check(task(answer="4471", feedback="none"), "4470") == (0.0, "Wrong.")
    assert check(task(answer="4471", feedback="none"), "4471") == (1.0, "Correct.")


def test_custom_checker_with_partial_credit() -> None:
    register_checker("half", lambda t, a: 0.5, replace=True)
    try:
        r, text = check(task(answer="x", checker="half"), "anything")
        assert r == 0.5
        assert text == "Partly correct (score 0.50). The expected answer is: x."
        with pytest.raises(ConfigError, match="already exists"):
            register_checker("half", lambda t, a: True)
    finally:
        CHECKERS.pop("half", None)


def test_custom_checker_needs_no_answer_and_tasks_keep_their_own_meta() -> None:
    register_checker("polite", lambda t, a: "please" in a.lower(), replace=True)
    try:
        meta = {"source": "x"}
        t = task(checker="polite", feedback="none", meta=meta)
        meta["source"] = "changed"
        assert t.meta == {"source": "x"}
        assert check(t, "Please do") == (1.0, "Correct.")
        assert check(t, "Do it") == (0.0, "Wrong.")
    finally:
        CHECKERS.pop("polite", None)


def test_a_checker_returning_out_of_range_is_a_config_error() -> None:
    register_checker("broken", lambda t, a: 2.0, replace=True)
    try:
        with pytest.raises(ConfigError, match="in \\[0, 1\\]"):
            check(task(answer="x", checker="broken"), "x")
    finally:
        CHECKERS.pop("broken", None)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"checker": "fuzzy", "answer": "x"}, "unknown checker 'fuzzy'"),
        ({"feedback": "loud", "answer": "x"}, "'feedback' must be one of"),
        ({"feedback": "hint", "answer": "x"}, "needs a non-empty 'hint'"),
        ({"checker": "numeric", "answer": "four"}, "numeric 'answer'"),
        ({"checker": "regex", "answer": "("}, "not a valid regular expression"),
        ({"checker": "python"}, "needs 'tests'"),
        ({}, "'answer' must be"),
        ({"answer": "x", "timeout": 0}, "'timeout' must be positive"),
        ({"answer": "x", "tolerance": -1}, "'tolerance' must be a non-negative number"),
        ({"answer": "x", "meta": 5}, "'meta' must be an object"),
        ({"answer": {"a": 1}}, "'answer' must be"),
    ],
)
def test_invalid_tasks_are_rejected(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        task(**kw)


# ---------------------------------------------------------------- loading


def test_load_tasks_reads_fields_and_keeps_extra_keys_in_meta(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl",
        {"id": "a", "prompt": "p", "answer": "4471", "family": "codes", "source": "demo"},
        "",
        {"id": 2, "prompt": "q", "answer": [1, 2], "checker": "numeric", "tolerance": 0.5},
    )
    a, b = load_tasks(path)
    assert (a.id, a.family, a.meta) == ("a", "codes", {"source": "demo"})
    assert (b.id, b.answer, b.checker, b.tolerance) == ("2", (1, 2), "numeric", 0.5)
    assert Task.from_dict(b.to_dict()) == b


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ([], "expected at least one task"),
        (["", "  "], "expected at least one task"),
        ([{"id": "a", "prompt": "p", "answer": "x"}, '{"id": "b", "prompt": '], r"t\.jsonl:2: not valid JSON"),
        ([{"id": "a", "prompt": "p", "answer": "x"}] * 2, r"t\.jsonl:2: duplicate task id 'a' \(first on line 1\)"),
        ([{"id": "a", "prompt": "p", "answer": "x", "checker": "fuzzy"}], r"t\.jsonl:1: .*unknown checker 'fuzzy'"),
        ([{"id": "a", "answer": "x"}], r"t\.jsonl:1: task is missing 'prompt'"),
        ([["not", "an", "object"]], r"t\.jsonl:1: expected a JSON object"),
    ],
)
def test_load_tasks_errors_name_the_file_and_line(tmp_path: Path, rows: list[Any], match: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows), encoding="utf-8")
    with pytest.raises(ConfigError, match=match):
        load_tasks(path)


def test_load_tasks_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read task file"):
        load_tasks(tmp_path / "nope.jsonl")


# ---------------------------------------------------------------- the environment


def test_env_is_an_environment_and_runs_one_step_episodes(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", {"id": "a", "prompt": "Code?", "answer": "4471", "family": "codes"})
    env = TaskEnv(path)
    assert isinstance(env, Environment)
    assert env.reset("a") == "Code?"
    obs = env.step("It is 4471.")
    assert obs == Observation(
        "Correct.", 1.0, True, {"task_id": "a", "checker": "normalised", "family": "codes", "expected": "4471"}
    )


def test_env_reset_accepts_a_task_a_dict_or_an_id() -> None:
    env = TaskEnv([task(answer="4471")])
    assert env.reset(task(id="other", prompt="Other?", answer="x")) == "Other?"
    assert env.step("x").info["task_id"] == "other"
    assert env.reset({"id": "d", "prompt": "Dict?", "answer": "y"}) == "Dict?"
    assert env.step("nope").reward == 0.0
    with pytest.raises(ConfigError, match="unknown task id 'zzz'.*'t1'"):
        env.reset("zzz")


def test_env_step_before_reset_or_after_done_is_a_config_error() -> None:
    env = TaskEnv([task(answer="4471")])
    with pytest.raises(ConfigError, match="before reset"):
        env.step("4471")
    env.reset("t1")
    env.step("4471")
    with pytest.raises(ConfigError, match="reset"):
        env.step("4471")


def test_env_info_reveals_the_expected_answer_only_in_reveal_mode() -> None:
    env = TaskEnv([task(answer=["a", "b"]), task(id="h", answer="a", feedback="hint", hint="first letter")])
    env.reset("t1")
    obs = env.step("c")
    assert obs.info["expected"] == ["a", "b"] and obs.text == "Wrong. The expected answer is: a."
    env.reset("h")
    obs = env.step("c")
    assert "expected" not in obs.info and obs.text == "Wrong. Hint: first letter" and obs.done


def test_env_rejects_duplicate_ids_and_non_string_actions() -> None:
    with pytest.raises(ConfigError, match="duplicate task id 't1'"):
        TaskEnv([task(answer="x"), task(answer="y")])
    env = TaskEnv([task(answer="x")])
    env.reset("t1")
    with pytest.raises(ConfigError, match="as a string"):
        env.step(None)  # type: ignore[arg-type]


def test_envs_built_from_one_list_are_independent() -> None:
    tasks = [task(answer="x"), task(id="t2", answer="y")]
    one, two = TaskEnv(tasks), TaskEnv(tasks)
    one.reset("t1")
    two.reset("t2")
    assert (one.step("x").reward, two.step("x").reward) == (1.0, 0.0)


def test_python_tasks_run_under_this_interpreter() -> None:
    t = task(checker="python", tests=f"import sys\nassert sys.executable == {sys.executable!r}\n")
    assert check(t, "pass")[0] == 1.0
