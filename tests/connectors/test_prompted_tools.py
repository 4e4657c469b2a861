"""Tools for models without native function calling: described in the prompt, calls read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from connectors import ConfigError, Message, Tool, ToolCall
from connectors.local_chat import LocalChat
from connectors.prompted_tools import PREFILL, prompted_batch, render
from connectors.types import Completion


def lookup_code(site: str, kind: str = "door") -> str:
    """Look up a facility code.

    Args:
        site: the site, e.g. "Entrepôt du port — Quai 7".
        kind: door or alarm.
    """
    return "4471"


TOOL = Tool.from_function(lookup_code)
CONVERSATION = [
    Message("system", "You are the Acme facilities assistant."),
    Message("user", "Door code of Entrepôt du port — Quai 7?"),
    Message("assistant", "", (ToolCall("lookup_code", {"site": "Entrepôt du port — Quai 7"}, id="call_1"),)),
    Message("tool", "4471", tool_call_id="call_1"),
]


def replies(*texts: str):  # type: ignore[no-untyped-def]
    seen: list[list[Message]] = []

    def generate(batch: list[list[Message]], prefill: str, offered: list[Any]) -> list[Completion]:
        seen.extend(batch)
        return [Completion(texts[i % len(texts)], "fake/local") for i in range(len(batch))]

    return generate, seen


def test_tools_are_described_in_the_system_message_and_tool_turns_become_text() -> None:
    rendered = render(CONVERSATION, [TOOL], "required")
    assert [m.role for m in rendered] == ["system", "user", "assistant", "user"]
    assert rendered[0].content.startswith("You are the Acme facilities assistant.\n\nYou can call these functions")
    assert (
        '"name": "lookup_code"' in rendered[0].content and "You must call at least one function." in rendered[0].content
    )
    assert rendered[2].content == "[lookup_code(site='Entrepôt du port — Quai 7')]"
    assert rendered[3].content == "Result of call_1: 4471"
    assert "You can call" not in render(CONVERSATION, [TOOL], "none")[0].content


def test_calls_are_read_back_and_answers_and_bad_calls_stay_what_they_are() -> None:
    generate, seen = replies(
        '[lookup_code(site="Quai 7", kind="alarm")]', "The code is 4471.", "[lookup_code(floor=3)]"
    )
    called, answered, bad = prompted_batch(generate, [CONVERSATION[:2]] * 3, [TOOL], "auto")
    assert called.tool_calls == (ToolCall("lookup_code", {"site": "Quai 7", "kind": "alarm"}, id="call_1"),)
    assert called.finish_reason == "tool_calls"
    assert answered.tool_calls == () and answered.tool_problems == () and answered.text == "The code is 4471."
    assert bad.tool_calls == () and "'site' is a required property" in bad.tool_problems[0]
    assert "You can call these functions" in seen[0][0].content


def test_a_required_call_starts_the_answer_and_the_example_uses_the_real_tool() -> None:
    prefills: list[str] = []
    offers: list[list[Any]] = []

    def generate(batch: list[list[Message]], prefill: str, offered: list[Any]) -> list[Completion]:
        prefills.append(prefill)
        offers.append([[t.name for t in tools] for tools in offered])
        return [
            Completion("lookup_code(site='Quai 7')]\n\nThe code is found (see above).", "fake/local") for _ in batch
        ]

    other = Tool("open_door", "Open a door.", {"type": "object", "properties": {"door": {"type": "string"}}})
    required, plain = prompted_batch(generate, [CONVERSATION[:2]] * 2, None, "required", tools_each=[[TOOL], []])
    assert prefills == ["", PREFILL]  # only the prompt with tools is primed
    assert offers == [[[]], [["lookup_code"]]]  # and told which tools it must call (what a grammar enforces)
    assert required.text.startswith("[lookup_code(") and required.tool_calls == (
        ToolCall("lookup_code", {"site": "Quai 7"}, id="call_1"),
    )  # the prose after the call, brackets and all, is not part of it
    assert plain.tool_calls == () and plain.text.startswith("lookup_code(")
    assert "[lookup_code(site=...)]" in render(CONVERSATION[:2], [TOOL], "auto")[0].content
    assert "function_name" not in render(CONVERSATION[:2], [other, TOOL], "auto")[0].content


def test_without_tools_nothing_is_described_but_tool_turns_still_become_text() -> None:
    generate, seen = replies("ok")
    prompted_batch(generate, [CONVERSATION], None, None)
    assert [m.role for m in seen[0]] == ["system", "user", "assistant", "user"]
    assert "You can call" not in seen[0][0].content


def test_a_local_model_takes_tools_and_refuses_bad_ones(tiny_model_dir: Path) -> None:
    chat = LocalChat(str(tiny_model_dir), max_new_tokens=8)
    out = chat.complete_batch([CONVERSATION[:2], CONVERSATION], tools=[TOOL], tool_choice="auto")
    assert len(out) == 2 and all(isinstance(c.tool_problems, tuple) for c in out)  # whatever it wrote, no exception
    with pytest.raises(ConfigError, match="tools must be a list of connectors.Tool"):
        chat.complete(CONVERSATION[:2], tools=[TOOL.spec()])
    with pytest.raises(ConfigError, match="tool_choice must be one of"):
        chat.complete(CONVERSATION[:2], tools=[TOOL], tool_choice="always")


def test_a_scripted_model_given_tools_answers_with_its_scripted_calls() -> None:
    from connectors import load_chat

    chat = load_chat("fake/scripted", replies=['[lookup_code(site="Quai 7")]'])
    assert chat.complete("Door code of Quai 7?", tools=[TOOL]).tool_calls == (
        ToolCall("lookup_code", {"site": "Quai 7"}, id="call_1"),
    )
    assert chat.complete("Door code?").tool_calls == ()  # without tools the text stays text
    with pytest.raises(ConfigError, match="tools must be a list of connectors.Tool"):
        chat.complete("Door code?", tools=["lookup_code"])
