"""BFCL's multi_turn_base through BfclMultiTurnEnv: real BFCL data and APIs, BFCL's own checker, no model."""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from typing import Any

import pytest

from connectors import ConfigError, Tool, ToolCall
from connectors.environment import Environment, Observation
from evolve.envs.bfcl.multi_turn import CATEGORY, BfclMultiTurnEnv, call_text, multi_turn_tasks, task_of
from evolve.envs.tasks import Task, TaskEnv
from evolve.tools.runs import run_call

pytest.importorskip("bfcl_eval", reason="pip install --no-deps bfcl-eval (make test installs it)")


@pytest.fixture(scope="module")
def tasks() -> dict[str, Task]:
    return {t.id: t for t in multi_turn_tasks()}


def call(tools: Sequence[Tool], text: str) -> Any:
    """Run one BFCL call string (``sort('a.pdf')``, ``cd(folder='x')``) through the tool's own fn."""
    node = ast.parse(text, mode="eval").body
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    fn = next(t.fn for t in tools if t.name == node.func.id)
    assert fn is not None
    args = [ast.literal_eval(a) for a in node.args]
    return fn(*args, **{k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg})


def play(task: Task, turns: Sequence[Sequence[str]]) -> list[Observation]:
    """One episode: each turn's calls through ``tools()``, then ``step("done")``."""
    env = BfclMultiTurnEnv()
    assert env.reset(task) == task.prompt
    observations = []
    for calls in turns:
        for text in calls:
            result = call(env.tools(), text)
            assert isinstance(result, str)
        observations.append(env.step("done"))
    return observations


def test_the_200_tasks_load_with_what_the_env_needs(tasks: dict[str, Task]) -> None:
    assert len(tasks) == 200 and len({t.id for t in multi_turn_tasks(limit=5)}) == 5
    for task in tasks.values():
        assert task.family == CATEGORY and task.prompt == task.meta["turns"][0]
        assert len(task.meta["turns"]) == len(task.meta["ground_truth"]) >= 1
        assert task.meta["involved_classes"] and isinstance(task.meta["initial_config"], dict)
    assert tasks["multi_turn_base_0"].meta["excluded_function"] == ["cp"]
    assert sum(bool(t.meta["excluded_function"]) for t in tasks.values()) == 18
    assert isinstance(BfclMultiTurnEnv(), Environment)


def test_ground_truth_replayed_through_the_tools_scores_1_on_every_task(tasks: dict[str, Task]) -> None:
    failed = {}
    for task in tasks.values():
        last = play(task, task.meta["ground_truth"])[-1]
        if last.reward != 1.0 or not last.done:
            failed[task.id] = last.text
    assert not failed, failed
    classes = {c for t in tasks.values() for c in t.meta["involved_classes"]}
    assert classes == {
        "GorillaFileSystem", "MathAPI", "MessageAPI", "TicketAPI", "TradingBot", "TravelAPI", "TwitterAPI",
        "VehicleControlAPI",
    }  # fmt: skip


def test_a_turn_closes_with_the_next_request_and_the_calls_so_far(tasks: dict[str, Task]) -> None:
    task = tasks["multi_turn_base_0"]
    first, *_, last = play(task, task.meta["ground_truth"])
    assert (first.reward, first.done) == (0.0, False)
    assert first.text.startswith(task.meta["turns"][1])
    expected = (
        "Calls so far: cd(folder='document'), mkdir(dir_name='temp'), mv(source='final_report.pdf', destination='temp')"
    )
    assert first.text.endswith(expected)
    assert last.text.startswith("Passed")
    assert last.info["task_id"] == task.id and last.info["category"] == CATEGORY
    assert last.info["checker"] == {"valid": True}
    assert last.info["calls"][2] == ["sort('final_report.pdf')"] and len(last.info["calls"]) == 4
    json.dumps(dict(last.info))


def test_skipping_a_turn_fails_at_that_turn_with_its_expected_calls(tasks: dict[str, Task]) -> None:
    task = tasks["multi_turn_base_0"]
    gt = task.meta["ground_truth"]
    last = play(task, [gt[0], [], gt[2], gt[3]])[-1]
    assert (last.reward, last.done) == (0.0, True)
    assert "At turn 2 no function was called" in last.text
    assert (
        "the expected calls were: cd(folder='temp'), grep(file_name='final_report.pdf',pattern='budget analysis')"
        in last.text
    )
    assert last.info["checker"]["error_type"] == "multi_turn:empty_turn_model_response"
    assert last.info["checker"]["turn"] == 1 and last.info["calls"][1] == []


def test_a_wrong_argument_fails_on_the_state_it_left(tasks: dict[str, Task]) -> None:
    task = tasks["multi_turn_base_0"]
    wrong = ["cd(folder='document')", "mkdir(dir_name='tmp')", "mv(source='final_report.pdf', destination='tmp')"]
    last = play(task, [wrong, *task.meta["ground_truth"][1:]])[-1]
    assert last.reward == 0.0
    assert "At turn 1 the state of GorillaFileSystem differs: root is" in last.text
    assert "'tmp'" in last.text and "'temp'" in last.text and "mkdir(dir_name='temp')" in last.text
    assert set(last.info["checker"]["differences"]) == {"root"}
    json.dumps(dict(last.info))


def test_a_missing_result_fails_and_says_which(tasks: dict[str, Task]) -> None:
    task = tasks["multi_turn_base_100"]
    assert task.meta["ground_truth"][0] == ["get_stock_info(symbol='NVDA')"]
    last = play(task, [["get_stock_info(symbol='AAPL')"], *task.meta["ground_truth"][1:]])[-1]
    assert last.reward == 0.0
    assert 'At turn 1 your calls\' results lack what the expected calls return: {"price": 220.34' in last.text
    assert last.text.endswith("the expected calls were: get_stock_info(symbol='NVDA')")


def test_feedback_none_hides_the_expected_calls(tasks: dict[str, Task]) -> None:
    from dataclasses import replace

    task = replace(tasks["multi_turn_base_0"], feedback="none")
    last = play(task, [[], [], [], []])[-1]
    assert last.text == "Failed. At turn 1 no function was called, but the request needed some."


def test_episodes_never_share_state(tasks: dict[str, Task]) -> None:
    task = tasks["multi_turn_base_0"]
    a, b = BfclMultiTurnEnv(), BfclMultiTurnEnv()
    a.reset(task)
    b.reset(task)
    call(a.tools(), "cd(folder='document')")
    assert "temp" not in call(b.tools(), "ls()")
    call(a.tools(), "mkdir(dir_name='temp')")
    assert json.loads(call(b.tools(), "pwd()")) == {"current_working_directory": "/workspace"}
    assert "temp" in call(a.tools(), "ls()")
    old_tools = a.tools()
    a.reset(task)  # a new episode: fresh instances; the old tools no longer act or record
    assert "Error during execution" in call(old_tools, "ls()")
    assert json.loads(call(a.tools(), "pwd()")) == {"current_working_directory": "/workspace"}
    assert a.step("done").info["calls"] == [["pwd()"]]


def test_checks_leave_nothing_in_bfcl_instance_cache(tasks: dict[str, Task]) -> None:
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    before = set(vars(multi_turn_utils))
    task = tasks["multi_turn_base_100"]
    play(task, task.meta["ground_truth"])
    play(task, [[], []])
    assert set(vars(multi_turn_utils)) == before


def test_tools_return_errors_instead_of_raising(tasks: dict[str, Task]) -> None:
    """Unknown or missing arguments, and values that are not plain JSON, come back as BFCL's
    ``Error during execution: ...`` text; an API's own error comes back as its error dict in JSON."""
    env = BfclMultiTurnEnv()
    env.reset(tasks["multi_turn_base_0"])
    cd = next(t.fn for t in env.tools() if t.name == "cd")
    assert cd is not None
    assert cd(nowhere="x").startswith("Error during execution: ")
    assert cd().startswith("Error during execution: ")
    assert cd(folder=object()).startswith("Error during execution: the arguments of cd must be plain JSON values")
    assert json.loads(cd(folder="no_such_dir")) == {"error": "cd: 'no_such_dir': No such file or directory"}
    calls = env.step("done").info["calls"][0]
    assert calls == ["cd(nowhere='x')", "cd()", "cd(folder='no_such_dir')"]  # the unsafe call is not recorded


def test_tools_follow_the_task_and_run_through_the_tool_runner(tasks: dict[str, Task]) -> None:
    env = BfclMultiTurnEnv()
    env.reset(tasks["multi_turn_base_0"])
    names = {t.name for t in env.tools()}
    assert {"cd", "mv", "post_tweet"} <= names and "cp" not in names  # cp is excluded in this task
    run = run_call(ToolCall("cd", {"folder": "document"}, id="c1"), env.tools())
    assert run.ok and json.loads(run.result) == {"current_working_directory": "document"}
    refused = run_call(ToolCall("cd", {"folder": 3}, id="c2"), env.tools())
    assert not refused.ok and "is not of type 'string'" in refused.result
    assert env.step("done").info["calls"][0] == ["cd(folder='document')"]


def test_bad_use_is_a_config_error(tasks: dict[str, Task]) -> None:
    env = BfclMultiTurnEnv()
    with pytest.raises(ConfigError, match=r"step\(\) called before reset"):
        env.step("done")
    with pytest.raises(ConfigError, match=r"tools\(\) called before reset"):
        env.tools()
    with pytest.raises(ConfigError, match="meta lacks turns, initial_config, involved_classes, ground_truth"):
        env.reset(Task(id="plain", prompt="2 + 2?", answer="4"))
    with pytest.raises(ConfigError, match="missing initial_config"):
        task_of(
            {"id": "x", "question": [[{"role": "user", "content": "hi"}]], "involved_classes": [], "ground_truth": [[]]}
        )
    task = tasks["multi_turn_base_100"]
    env.reset(task)
    env.step("done")
    assert env.step("done").done
    with pytest.raises(ConfigError, match="after the episode ended"):
        env.step("again")
    single = TaskEnv([task])
    single.reset(task.id)
    with pytest.raises(ConfigError, match="play it in BfclMultiTurnEnv"):
        single.step("done")


def test_reset_takes_a_bfcl_row() -> None:
    from evolve.envs.bfcl.data import read_rows

    row = read_rows(CATEGORY)[3]
    env = BfclMultiTurnEnv()
    assert env.reset(row) == row["question"][0][0]["content"]


def test_call_text_writes_only_what_the_checker_can_safely_eval() -> None:
    assert call_text("mv", kwargs={"source": "a.txt", "destination": "b"}) == "mv(source='a.txt', destination='b')"
    assert call_text("sort", ("a.pdf",)) == "sort('a.pdf')"
    assert call_text("f", kwargs={"x": [1, 2.5, {"k": None}]}) == "f(x=[1, 2.5, {'k': None}])"
    assert call_text("f", kwargs={"x=1) or print(1": 2}) is None
    assert call_text("f", kwargs={"x": float("nan")}) is None
    assert call_text("f", kwargs={"x": object()}) is None


def test_episodes_in_threads_check_apart(tasks: dict[str, Task]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    chosen = [t for t in tasks.values() if "TravelAPI" in t.meta["involved_classes"]][:12] * 2
    with ThreadPoolExecutor(4) as pool:
        rewards = list(pool.map(lambda t: play(t, t.meta["ground_truth"])[-1].reward, chosen))
    assert rewards == [1.0] * len(chosen)
