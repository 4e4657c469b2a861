"""BFCL's single-turn categories: our AST checker gives the official checker's recorded verdicts, the
decoder reads call syntax and JSON, and ``BfclEnv`` scores real rows with feedback an agent can use."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from connectors.errors import ConfigError
from connectors.tools import Tool, parse_tool_calls
from evolve.envs.bfcl.ast_check import calls_text, check_calls, reference_calls, standardise
from evolve.envs.bfcl.decode import NO_CALL, decode_answer
from evolve.envs.bfcl.single import SINGLE_TURN, BfclEnv, bfcl_tasks, prompt_of
from evolve.envs.tasks import Task, TaskEnv

RESULTS = Path(__file__).resolve().parents[3] / "bench" / "results"
UNANSWERABLE = {"live_simple_106-63-0", "live_simple_112-68-0"}
"""Rows whose possible answer lists no allowed value for an argument (``[]``): no call passes BFCL's check."""


def needs_bfcl() -> None:
    pytest.importorskip("bfcl_eval", reason="pip install --no-deps bfcl-eval (make test installs it)")


@cache
def tasks_of(category: str) -> tuple[Task, ...]:
    return tuple(bfcl_tasks(category))


# ---------------------------------------------------------------- agreement with the official checker
@cache
def recorded() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    lines = (RESULTS / "bfcl_checker_answers.jsonl").read_text(encoding="utf-8").splitlines()
    answers = [json.loads(line) for line in lines if line.strip()]
    agreement = json.loads((RESULTS / "bfcl_checker_agreement.json").read_text(encoding="utf-8"))
    return answers, {v["id"]: v for v in agreement["verdicts"]}


def test_our_checker_gives_every_recorded_official_verdict() -> None:
    answers, official = recorded()
    assert len(answers) >= 300 and {a["id"] for a in answers} == set(official)
    verdicts = [official[a["id"]]["official_valid"] for a in answers]
    assert verdicts.count(True) >= 100 and verdicts.count(False) >= 100
    assert {a["category"] for a in answers} == set(SINGLE_TURN)
    wrong = []
    for answer, theirs in zip(answers, verdicts, strict=True):
        ours = check_calls(answer["functions"], answer["ground_truth"], answer["model_output"], answer["category"])
        if ours.valid != theirs or (not ours.valid and not ours.error):
            wrong.append((answer["id"], theirs, ours.error, official[answer["id"]]["official_error"]))
    assert wrong == []


def test_recorded_call_text_decodes_to_the_recorded_calls() -> None:
    answers, _ = recorded()
    misread = [a["id"] for a in answers if json.loads(json.dumps(decode_answer(a["model_text"]))) != a["model_output"]]
    assert misread == []


# ---------------------------------------------------------------- BFCL's rules, one at a time
def fn(name: str = "area", required: tuple[str, ...] = ("base",), **types: Any) -> dict[str, Any]:
    props = {k: (v if isinstance(v, dict) else {"type": v}) for k, v in (types or {"base": "integer"}).items()}
    return {"name": name, "parameters": {"type": "dict", "properties": props, "required": list(required)}}


def verdict(
    function: dict[str, Any], allowed: dict[str, list[Any]], args: dict[str, Any], category: str = "simple_python"
) -> tuple[bool, str]:
    result = check_calls([function], [{function["name"]: allowed}], [{function["name"]: args}], category)
    return result.valid, result.error


def test_a_wrong_value_says_what_came_and_what_was_allowed() -> None:
    assert verdict(fn(), {"base": [10]}, {"base": 12}) == (
        False,
        "wrong value for 'base': got 12, expected one of [10]",
    )
    assert verdict(fn(), {"base": [10]}, {"base": 10}) == (True, "")


def listed(item: str, kind: str = "array") -> dict[str, Any]:
    return {"type": kind, "items": {"type": item}}


@pytest.mark.parametrize(
    ("schema", "allowed", "value", "valid"),
    [
        ("float", [5.0], 5, True),  # Python's int → float promotion
        ("integer", [5], 5.0, False),
        ("integer", [1], True, False),  # a bool is not an int
        ("string", ["New York, NY"], "new york ny", True),
        ("string", ["New York"], "Newark", False),
        ("string", ["", "cm"], "", True),  # "" among the allowed values
        ("string", ["", "cm"], " - ", True),  # standardises to ""
        ("string", ["", "cm"], None, False),
        (listed("string"), [["a b", "C"]], ["A-B", "c"], True),
        (listed("string"), [["a", "b"]], ["b", "a"], False),
        (listed("integer"), [[1, 2], ""], [], True),  # BFCL reads an allowed "" as an empty list
        (listed("float", "tuple"), [[1.5, 2.5]], (1.5, 2.5), True),
        ("any", ["my_data"], "My Data", True),
        ("integer", ["x"], "x", True),  # a "variable": the allowed values' own type, compared exactly
    ],
)
def test_types_and_values_follow_bfcl(schema: Any, allowed: list[Any], value: Any, valid: bool) -> None:
    assert verdict(fn(x=schema, required=()), {"x": allowed}, {"x": value})[0] is valid


def test_list_elements_are_type_checked_one_level_down() -> None:
    floats = fn(xs=listed("float"), required=("xs",))
    assert verdict(floats, {"xs": [[1.0, 2.0]]}, {"xs": [1.0, 2.0]})[0]
    valid, error = verdict(floats, {"xs": [[1.0, 2.0]]}, {"xs": [1, 2]})  # no promotion inside a list
    assert not valid and "element type in 'xs'" in error


def test_dicts_compare_key_by_key() -> None:
    f = fn(d={"type": "dict"}, required=("d",))
    allowed = {"d": [{"city": ["Paris"], "zip": ["", 75001]}]}
    assert verdict(f, allowed, {"d": {"city": "paris"}})[0]
    assert verdict(f, allowed, {"d": {"city": "Paris", "zip": 75001.0}})[0]  # compared by ==
    assert verdict(f, allowed, {"d": {"City": "Paris"}}) == (
        False,
        "unexpected key 'City' in 'd' (allowed: 'city', 'zip')",
    )
    assert verdict(f, allowed, {"d": {"zip": 75001}})[1] == "'d' is missing the key 'city': expected one of ['Paris']"


def test_arguments_missing_unknown_or_not_asked_for() -> None:
    f = fn(base="integer", unit="string", note="string")
    allowed: dict[str, list[Any]] = {"base": [10], "unit": ["", "cm"]}
    assert verdict(f, allowed, {"base": 10})[0]
    assert verdict(f, allowed, {"unit": "cm"}) == (False, "area is missing the required argument 'base'")
    assert verdict(f, allowed, {"base": 10, "colour": "red"})[1].startswith("unknown argument 'colour' for area")
    assert verdict(f, allowed, {"base": 10, "note": "x"}) == (False, "argument 'note' should not be given here")
    assert verdict(f, {"base": [10], "unit": ["cm"]}, {"base": 10}) == (
        False,
        "area is missing the argument 'unit': expected one of ['cm']",
    )


def test_parallel_calls_match_in_any_order_and_multiple_needs_the_expected_function() -> None:
    f, g = fn("f"), fn("g")
    truth = [{"f": {"base": [1]}}, {"f": {"base": [2]}}]
    assert check_calls([f], truth, [{"f": {"base": 2}}, {"f": {"base": 1}}], "parallel").valid
    assert check_calls([f], truth, [{"f": {"base": 1}}], "parallel").error == "expected 2 function calls, got 1"
    both = check_calls([f], truth, [{"f": {"base": 1}}, {"f": {"base": 3}}], "parallel")
    assert not both.valid and both.error.startswith("no call matches the expected f(base=2)")
    assert check_calls([f, g], [{"g": {"base": [1]}}], [{"g": {"base": 1}}], "multiple").valid
    assert (
        check_calls([f, g], [{"g": {"base": [1]}}], [{"f": {"base": 1}}], "multiple").error
        == "called 'f', expected a call to 'g'"
    )
    assert check_calls([f], [truth[0]], [], "simple_python").error == "expected exactly one function call, got 0"


def test_parallel_matching_is_greedy_like_bfcl() -> None:
    """The first expected call takes the first call that fits, even when a later one needed it."""
    f = fn("f", required=(), base="integer", unit="string")
    truth = [{"f": {"base": [1], "unit": ["", "cm"]}}, {"f": {"base": [1], "unit": ["cm"]}}]
    assert not check_calls([f], truth, [{"f": {"base": 1, "unit": "cm"}}, {"f": {"base": 1}}], "parallel").valid
    assert check_calls([f], truth, [{"f": {"base": 1}}, {"f": {"base": 1, "unit": "cm"}}], "parallel").valid


def test_standardise_drops_case_spaces_and_bfcls_punctuation() -> None:
    assert standardise("April 1, 2024") == standardise("april-1_2024.") == "april12024"
    assert standardise("it's") == 'it"s'


# ---------------------------------------------------------------- reading answers
@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ("[area(base=10, height=5)]", [{"area": {"base": 10, "height": 5}}]),
        ("area(base=10), math.sqrt(x=-2.5)", [{"area": {"base": 10}}, {"math.sqrt": {"x": -2.5}}]),
        (
            "```python\n[f(xs=[1, 2], d={'k': (1, 2)}, v=my_data, n=2**10)]\n```",
            [{"f": {"xs": [1, 2], "d": {"k": (1, 2)}, "v": "my_data", "n": 1024}}],
        ),
        ('{"name": "area", "arguments": {"base": 10}}', [{"area": {"base": 10}}]),
        (
            '[{"name": "f", "arguments": "{\\"a\\": \\"x\\"}"}, {"name": "g", "parameters": {}}]',
            [{"f": {"a": "x"}}, {"g": {}}],
        ),
        ("[]", []),
    ],
)
def test_decode_reads_call_syntax_and_json(text: str, calls: list[Any]) -> None:
    assert decode_answer(text) == calls


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("The area is 25 square units.", NO_CALL),
        ("", NO_CALL),
        ("Sure! [area(base=10)]", "only the calls"),
        ("[area(base=10, height=5", "Could not read"),
        ("area(10, 5)", "by name"),
        ("area(base=lambda: 1)", "not a literal"),
        ("area(base=9**9**9)", "too large"),
        ("[area(base=10), 42]", "only function calls"),
    ],
)
def test_decode_explains_what_it_cannot_read(text: str, says: str) -> None:
    result = decode_answer(text)
    assert isinstance(result, str) and says in result


def test_call_text_round_trips_through_the_decoder_and_the_tool_parser() -> None:
    calls: list[dict[str, dict[str, Any]]] = [
        {"f": {"s": 'it\'s "q"', "x": 1.5e-7, "xs": [1, {"k": None}], "b": False}},
        {"g.h": {}},
    ]
    text = calls_text(calls)
    assert decode_answer(text) == calls
    tools = [Tool("f", "", {"type": "object"}), Tool("g.h", "", {"type": "object"})]
    assert [c.name for c in parse_tool_calls(text, tools).calls] == ["f", "g.h"]


# ---------------------------------------------------------------- tasks and the environment
def test_simple_python_has_400_tasks_with_unique_ids_and_the_row_in_meta() -> None:
    needs_bfcl()
    tasks = tasks_of("simple_python")
    assert len(tasks) == 400 and len({t.id for t in tasks}) == 400
    first = tasks[0]
    assert first.id == "simple_python_0" and first.family == "simple_python" and first.checker == "bfcl"
    assert first.prompt == "Find the area of a triangle with a base of 10 units and height of 5 units."
    assert set(first.meta) == {"functions", "ground_truth", "category"}
    assert first.answer == "calculate_triangle_area(base=10, height=5)"
    assert [t.id for t in bfcl_tasks("parallel", limit=3)] == ["parallel_0", "parallel_1", "parallel_2"]


def test_system_messages_stay_in_the_prompt() -> None:
    question = [[{"role": "system", "content": "You book movies."}, {"role": "user", "content": "List movies."}]]
    assert prompt_of(question) == "You book movies.\n\nList movies."
    needs_bfcl()
    task = next(t for t in tasks_of("live_simple") if t.id == "live_simple_58-27-0")
    assert task.prompt.startswith("You are an AI chatbot") and task.prompt.endswith("list movies in Mumbai?")


@pytest.mark.parametrize("category", SINGLE_TURN)
def test_a_correct_call_scores_one_on_every_row(category: str) -> None:
    needs_bfcl()
    env = BfclEnv(tasks_of(category))
    failed = {}
    for task in env.tasks:
        env.reset(task)
        obs = env.step(str(task.answer))
        if obs.reward != 1.0:
            failed[task.id] = obs.text
    assert set(failed) == UNANSWERABLE & {t.id for t in env.tasks}
    assert all("accepts no call" in text for text in failed.values())


@pytest.mark.parametrize("category", SINGLE_TURN)
def test_tools_are_the_rows_functions_without_fn(category: str) -> None:
    needs_bfcl()
    env = BfclEnv(tasks_of(category))
    for task in env.tasks:
        env.reset(task.id)
        tools = env.tools()
        assert all(isinstance(t, Tool) and t.fn is None for t in tools)
        assert [t.name for t in tools] == [f["name"] for f in task.meta["functions"]]
        assert all(t.parameters["type"] == "object" for t in tools)


def test_wrong_answers_score_zero_with_feedback_and_never_raise() -> None:
    needs_bfcl()
    env = BfclEnv(tasks_of("simple_python")[:2])
    reveal = "A correct call: calculate_triangle_area(base=10, height=5)"
    cases = {
        "[calculate_triangle_area(base=12, height=5)]": "wrong value for 'base': got 12, expected one of [10]",
        "[triangle_area(base=10, height=5)]": "called 'triangle_area', expected a call to 'calculate_triangle_area'",
        "The area is 25 square units.": "No function call found; expected a call to calculate_triangle_area(...)",
        "[calculate_triangle_area(base=10,": "Could not read the answer as function calls",
        "calculate_triangle_area(base='ten', height=5)": "wrong type for 'base': got string 'ten', expected integer",
    }
    for answer, says in cases.items():
        env.reset("simple_python_0")
        obs = env.step(answer)
        assert (obs.reward, obs.done) == (0.0, True)
        assert obs.text.startswith("Wrong: ") and says in obs.text and obs.text.endswith(reveal), obs.text
        assert obs.info["task_id"] == "simple_python_0" and obs.info["category"] == "simple_python"
        assert says in obs.info["error"]
    env.reset("simple_python_0")
    obs = env.step('{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}')
    assert (obs.reward, obs.text, obs.info["calls"]) == (
        1.0,
        "Correct.",
        [{"calculate_triangle_area": {"base": 10, "height": 5}}],
    )


def test_the_environment_refuses_misuse_with_config_errors() -> None:
    needs_bfcl()
    env = BfclEnv(tasks_of("simple_python")[:1])
    with pytest.raises(ConfigError, match="before reset"):
        env.tools()
    with pytest.raises(ConfigError, match="before reset"):
        env.step("[f(a=1)]")
    with pytest.raises(ConfigError, match="unknown task id"):
        env.reset("simple_python_999")
    with pytest.raises(ConfigError, match="single-turn"):
        bfcl_tasks("multi_turn_base")
    with pytest.raises(ConfigError, match="limit"):
        bfcl_tasks("parallel", limit=-1)
    with pytest.raises(ConfigError, match="bfcl_tasks"):
        BfclEnv([Task(id="t", prompt="p", answer="a")])


def test_task_env_runs_bfcl_tasks_through_the_registered_checker() -> None:
    needs_bfcl()
    env = TaskEnv(list(tasks_of("multiple")[:1]))
    task = env.tasks[0]
    env.reset(task.id)
    assert env.step(str(task.answer)).reward == 1.0
    env.reset(task.id)
    obs = env.step("no idea")
    assert obs.reward == 0.0 and "No function call found" in obs.text and str(task.answer) in obs.text
    assert reference_calls(task.meta["functions"], task.meta["ground_truth"]) == decode_answer(str(task.answer))
