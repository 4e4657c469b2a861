"""LangChain chat models get tools through bind_tools; tool turns cross the seam both ways."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage

from connectors import ConfigError, Message, Tool, ToolCall, load_chat
from connectors.langchain_chat import to_langchain


def reserve_room(building: str, people: int) -> str:
    """Reserve a meeting room in a building."""
    return f"{building}: {people}"


TOOL = Tool.from_function(reserve_room)


class BindingModel(GenericFakeChatModel):
    """A fake chat model that records what ``bind_tools`` was given."""

    bound: list[Any] = []

    def bind_tools(self, tools: Any, **kwargs: Any) -> BindingModel:
        self.bound.append((tools, kwargs))
        return self


def test_tools_are_bound_and_the_model_s_calls_come_back() -> None:
    reply = AIMessage(
        content="",
        tool_calls=[{"name": "reserve_room", "args": {"building": "Tour Eiffel — B", "people": 4}, "id": "call_9"}],
        invalid_tool_calls=[
            {"name": "reserve_room", "args": "{oops", "id": "call_10", "error": "bad JSON", "type": "invalid_tool_call"}
        ],
    )
    model = BindingModel(messages=iter([reply]))
    chat = load_chat("langchain/fake-binding", model=model)
    done = chat.complete("Reserve a room for 4 in Tour Eiffel — B", tools=[TOOL], tool_choice="required")
    assert model.bound == [([TOOL.spec()], {"tool_choice": "required"})]
    assert done.tool_calls == (ToolCall("reserve_room", {"building": "Tour Eiffel — B", "people": 4}, id="call_9"),)
    assert done.tool_problems == ("tool 'reserve_room': bad JSON: {oops",)


def test_a_model_without_bind_tools_is_a_clear_error() -> None:
    chat = load_chat("langchain/fake-list", model=FakeListChatModel(responses=["hi"]))
    with pytest.raises(ConfigError, match="cannot be given tools"):
        chat.complete("hello", tools=[TOOL])
    assert chat.complete("hello").text == "hi"  # without tools it answers as before


def test_tool_turns_become_langchain_messages() -> None:
    call = ToolCall("reserve_room", {"building": "B", "people": 2}, id="call_1")
    converted = to_langchain([Message("assistant", "", (call,)), Message("tool", "booked", tool_call_id="call_1")])
    assert converted[0].tool_calls == [
        {"name": "reserve_room", "args": {"building": "B", "people": 2}, "id": "call_1", "type": "tool_call"}
    ]
    assert isinstance(converted[1], ToolMessage) and converted[1].tool_call_id == "call_1"
