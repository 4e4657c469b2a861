"""Running a model's tool calls: results, and every failure as an observation the model reads."""

from __future__ import annotations

import time

import pytest

from connectors import Tool, ToolCall
from evolve.tools.runs import RESULT_LIMIT, run_call, run_calls


def lookup_code(site: str, kind: str = "door") -> dict:
    """Look up a facility code."""
    if site == "Quai 9":
        raise KeyError("no such site: Quai 9")
    if site == "slow":
        time.sleep(5)
    if site == "huge":
        return {"log": "x" * (RESULT_LIMIT * 2)}
    return {"site": site, "kind": kind, "code": "4471"}


TOOLS = [Tool.from_function(lookup_code), Tool("remote_only", "Run elsewhere.", {"type": "object"})]


def call(**arguments: object) -> ToolCall:
    return ToolCall("lookup_code", arguments, id="call_7")


@pytest.mark.parametrize(
    ("the_call", "ok", "result"),
    [
        (
            call(site="Entrepôt du port — Quai 7"),
            True,
            '{"site": "Entrepôt du port — Quai 7", "kind": "door", "code": "4471"}',
        ),
        (call(site="Quai 9"), False, "error: KeyError: 'no such site: Quai 9'"),
        (call(floor=3), False, "error: tool 'lookup_code': arguments 'site' is a required property"),
        (
            ToolCall("delete_all", {}, id="c"),
            False,
            "error: unknown tool 'delete_all' (known: lookup_code, remote_only)",
        ),
        (ToolCall("remote_only", {}, id="c"), False, "error: tool 'remote_only' has no function to run here"),
    ],
)
def test_a_call_gives_its_result_or_says_what_went_wrong(the_call: ToolCall, ok: bool, result: str) -> None:
    run = run_call(the_call, TOOLS)
    assert (run.ok, run.result) == (ok, result)


def test_a_hanging_tool_times_out_and_a_huge_result_is_cut() -> None:
    started = time.perf_counter()
    slow = run_call(call(site="slow"), TOOLS, timeout=0.2)
    assert not slow.ok and slow.result == "error: tool 'lookup_code' did not answer within 0.2 s"
    assert time.perf_counter() - started < 2  # the loop does not wait for the tool
    huge = run_call(call(site="huge"), TOOLS)
    assert len(huge.result) < RESULT_LIMIT + 60 and huge.result.endswith("more characters cut]")


def test_results_answer_their_calls_as_tool_messages() -> None:
    messages = run_calls([call(site="A"), ToolCall("lookup_code", {"site": "B"}, id="call_8")], TOOLS)
    assert [(m.role, m.tool_call_id) for m in messages] == [("tool", "call_7"), ("tool", "call_8")]
