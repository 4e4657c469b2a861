"""Tools: schemas from functions, refused schemas, and the tolerant reader of calls a model writes."""

from __future__ import annotations

import random
import string
from typing import Literal

import pytest

from connectors.errors import ConfigError
from connectors.tools import Tool, ToolCall, parse_tool_calls


def book_flight(
    origin: str,
    destination: str,
    passengers: int = 1,
    cabin: Literal["economy", "business"] = "economy",
    stops: list[str] | None = None,
) -> str:
    """Book a flight for the Équipe support — nuit (fr) travel desk.

    Args:
        origin: IATA code of the departure airport.
        destination: IATA code of the arrival airport,
            for instance "CDG".
        passengers: how many seats.
    """
    return f"{origin}->{destination} x{passengers} {cabin} via {stops or []}"


def factorial(number: int) -> int:
    """The factorial of a non-negative integer."""
    return 1 if number <= 1 else number * factorial(number - 1)


TOOLS = [Tool.from_function(book_flight), Tool.from_function(factorial, name="math.factorial")]


def test_a_function_becomes_a_tool_with_types_defaults_and_descriptions() -> None:
    tool = TOOLS[0]
    assert tool.description == "Book a flight for the Équipe support — nuit (fr) travel desk."
    props = tool.parameters["properties"]
    assert tool.parameters["required"] == ["origin", "destination"]
    assert props["passengers"] == {"type": "integer", "description": "how many seats."}
    assert props["cabin"] == {"enum": ["economy", "business"]}
    assert props["stops"] == {"type": "array", "items": {"type": "string"}}
    assert props["destination"]["description"] == 'IATA code of the arrival airport, for instance "CDG".'
    assert tool.spec() == {
        "type": "function",
        "function": {"name": "book_flight", "description": tool.description, "parameters": dict(tool.parameters)},
    }
    assert tool.fn is book_flight


def test_bad_tools_are_refused_with_what_was_expected() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    def odd(when: complex) -> None: ...

    with pytest.raises(ConfigError, match="parameter 'x' needs a type hint"):
        Tool.from_function(untyped)
    with pytest.raises(ConfigError, match="parameter 'when': type <class 'complex'> has no JSON Schema form"):
        Tool.from_function(odd)
    with pytest.raises(ConfigError, match=r"not a valid JSON Schema at properties/n/type: 'integr' is not valid"):
        Tool("count", "", {"type": "object", "properties": {"n": {"type": "integr"}}})
    with pytest.raises(ConfigError, match='must have "type": "object"'):
        Tool("count", "", {"type": "string"})
    with pytest.raises(ConfigError, match="must be a JSON Schema object, got str"):
        Tool("count", "", '{"type": "object"}')  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="Tool.name must be 1-64 letters"):
        Tool("réserver vol", "", {"type": "object"})


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "math.factorial", "arguments": {"number": 5}}</tool_call>',
        'Sure!\n```json\n{"name": "math.factorial", "parameters": {"number": 5}}\n```',
        '{"name": "math.factorial", "arguments": "{\\"number\\": 5}"}',  # OpenAI's arguments string
        "[math.factorial(number=5)]",  # BFCL's format
        "I will call math.factorial(number=5) now.",
    ],
)
def test_a_call_is_read_in_every_format_a_model_writes(text: str) -> None:
    parsed = parse_tool_calls(text, TOOLS)
    assert parsed.calls == (ToolCall("math.factorial", {"number": 5}, id="call_1"),)
    assert parsed.problems == () and parsed.attempted


def test_several_calls_and_a_plain_answer() -> None:
    parsed = parse_tool_calls(
        '[book_flight(origin="CDG", destination="NRT", passengers=2), math.factorial(number=3)]', TOOLS
    )
    assert [(c.name, c.id) for c in parsed.calls] == [("book_flight", "call_1"), ("math.factorial", "call_2")]
    assert parsed.calls[0].arguments_json() == '{"origin": "CDG", "destination": "NRT", "passengers": 2}'
    plain = parse_tool_calls("The factorial of 5 is 120.", TOOLS)
    assert plain.calls == () and not plain.attempted  # an answer, not a failed call
    for prose in ("The factorial (of 5) is 120.", "Seats (2) are booked; see note(a) [1].", "f(x) = x!"):
        assert not parse_tool_calls(prose, TOOLS).attempted, prose


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[delete_everything(path='/')]", "unknown tool 'delete_everything' (known: book_flight, math.factorial)"),
        (
            "[math.factorial(number='five')]",
            "tool 'math.factorial': arguments at number 'five' is not of type 'integer'",
        ),
        ('[book_flight(origin="CDG")]', "tool 'book_flight': arguments 'destination' is a required property"),
        (
            '[book_flight(origin="CDG", destination="NRT", cabin="first")]',
            "'first' is not one of ['economy', 'business']",
        ),
        ("<tool_call>{'name': 'math.factorial'}</tool_call>", "whose JSON cannot be parsed"),
        ("[math.factorial(5)]", "arguments must be given by name"),
        ("[math.factorial(number=five)]", "an argument is not a literal value"),
        ("[math.factorial(number=5]", "cannot be parsed"),
    ],
)
def test_a_bad_call_is_a_recorded_problem_not_an_exception(text: str, problem: str) -> None:
    parsed = parse_tool_calls(text, TOOLS)
    assert parsed.calls == () and parsed.attempted
    assert problem in parsed.problems[0]


def test_no_text_makes_the_reader_raise() -> None:
    rng = random.Random(7)
    alphabet = string.printable + "éü—<>{}[]()\"'=,.:"
    pieces = ["<tool_call>", "</tool_call>", "[", "]", "{", "}", "math.factorial(", "number=", '"name":', "```"]
    for _ in range(2000):
        text = "".join(
            rng.choice(pieces) if rng.random() < 0.3 else rng.choice(alphabet) for _ in range(rng.randint(0, 60))
        )
        parsed = parse_tool_calls(text, TOOLS)
        assert all(isinstance(p, str) for p in parsed.problems)


def test_a_tool_conversation_round_trips_through_the_openai_form() -> None:
    from connectors.types import Message, as_messages

    call = ToolCall("book_flight", {"origin": "CDG", "destination": "NRT"}, id="call_1")
    asked = Message("assistant", "", (call,))
    answered = Message("tool", "booked: CDG->NRT — siège 12A", tool_call_id="call_1")
    wire = [asked.to_dict(), answered.to_dict()]
    assert wire[0]["tool_calls"][0] == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "book_flight", "arguments": '{"origin": "CDG", "destination": "NRT"}'},
    }
    assert as_messages(wire) == [asked, answered]
    assert repr(answered) == "Message(role='tool', content='booked: CDG->NRT — siège 12A', tool_call_id='call_1')"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"role": "tool", "content": "120"}, "a tool message needs the tool_call_id"),
        ({"role": "user", "content": "hi", "tool_call_id": "call_1"}, "only a tool message has one"),
        ({"role": "user", "content": "hi", "tool_calls": (ToolCall("f"),)}, "belong to an assistant message"),
        ({"role": "assistant", "content": "", "tool_calls": [ToolCall("f")]}, "must be a tuple of ToolCall"),
    ],
)
def test_a_malformed_tool_message_is_refused(kwargs: dict, message: str) -> None:
    from connectors.types import Message

    with pytest.raises(ConfigError, match=message):
        Message(**kwargs)


def test_an_openai_tool_call_with_unparsable_arguments_is_a_clear_error() -> None:
    from connectors.types import as_messages

    bad = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{x"}}],
    }
    with pytest.raises(ConfigError, match=r"messages\[0\].tool_calls must hold"):
        as_messages([bad])
