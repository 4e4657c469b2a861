"""Running the tools a model called: each call's result, or its error or timeout, as a ``tool`` message
the model reads next. A tool that raises, hangs, or is asked for with arguments its schema refuses is an
observation for the model, never an exception in the loop.

Example:
    >>> from connectors import Tool, ToolCall
    >>> def add(a: int, b: int) -> int:
    ...     '''Add two integers.'''
    ...     return a + b
    >>> [m.content for m in run_calls([ToolCall("add", {"a": 2, "b": 3}, id="c1")], [Tool.from_function(add)])]
    ['5']
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from connectors import Message, Tool, ToolCall
from connectors.tools import argument_problem

RESULT_LIMIT = 2000
"""The most characters of one result a model is shown (the rest is cut, and the cut is said)."""


@dataclass(frozen=True)
class ToolRun:
    """One call and what came of it: ``ok`` is false for an error, a timeout or a refused call."""

    call: ToolCall
    result: str
    ok: bool

    def message(self) -> Message:
        return Message("tool", self.result, tool_call_id=self.call.id or self.call.name)


def run_call(call: ToolCall, tools: Sequence[Tool], *, timeout: float = 10.0) -> ToolRun:
    """Run one call: its result as text (JSON for anything but a string), or what went wrong."""
    known = {t.name: t for t in tools}
    tool = known.get(call.name)
    if tool is None:
        return ToolRun(call, f"error: unknown tool {call.name!r} (known: {', '.join(sorted(known)) or 'none'})", False)
    problem = argument_problem(tool, call.arguments)
    if problem:
        return ToolRun(call, f"error: {problem}", False)
    if tool.fn is None:
        return ToolRun(call, f"error: tool {call.name!r} has no function to run here", False)
    fn: Callable[..., Any] = tool.fn
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(**dict(call.arguments))
        except Exception as e:  # a tool's own failure is the model's observation
            box["error"] = f"{type(e).__name__}: {e}"

    worker = threading.Thread(target=target, daemon=True, name=f"tool-{call.name}")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return ToolRun(call, f"error: tool {call.name!r} did not answer within {timeout:g} s", False)
    if "error" in box:
        return ToolRun(call, f"error: {box['error']}", False)
    return ToolRun(call, _as_text(box.get("value")), True)


def run_calls(calls: Sequence[ToolCall], tools: Sequence[Tool], *, timeout: float = 10.0) -> list[Message]:
    """The ``tool`` messages answering ``calls``, in order."""
    return [run_call(c, tools, timeout=timeout).message() for c in calls]


def _as_text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > RESULT_LIMIT:
        return f"{text[:RESULT_LIMIT]}… [{len(text) - RESULT_LIMIT} more characters cut]"
    return text


__all__ = ["RESULT_LIMIT", "ToolRun", "run_call", "run_calls"]
