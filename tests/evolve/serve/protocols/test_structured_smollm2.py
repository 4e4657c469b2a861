"""Structured output on SmolLM2-135M through ``evolve serve``, with the real clients: JSON of a schema, any JSON
object, the ``openai`` SDK's ``parse``, LangChain's ``with_structured_output`` (all three methods), and calls under
``tool_choice`` required and named — each valid on the first try (the model is asked once), because a local model
generates them under a grammar (``connectors.constrained``). Prompted only (``constrained=False``), every one of
them ended in a 502 after 14-151 s of retries: the model echoed the schema, answered in prose, or copied the call
example's ``...`` (``bench.structured_output`` measures both)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel

from tests.support.serve import KEY_OF, WEATHER_TOOL, Served, serving, write_serve_spec

pytestmark = pytest.mark.slow

CARD: Any = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["name", "population"],
    "additionalProperties": False,
}
TIME: Any = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK: Any = [{"role": "user", "content": "The city card of Zürich: its name and its population."}]
TOKENS = 96


class CityCard(BaseModel):
    """A city and its population."""

    name: str
    population: int


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    model = 'chat = "local/smollm2"\noptions = { threads = 2 }'
    with serving(write_serve_spec(tmp_path_factory.mktemp("serve-smollm2"), model=model)) as live:
        yield live


def asks(served: Served) -> int:
    """How many answers the model has generated so far (a retry is one more)."""
    return served.deployment.chat.calls


def test_json_of_a_schema_and_any_json_object_come_on_the_first_try(served: Served) -> None:
    client = served.client("alice")
    before = asks(served)
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "city_card", "schema": CARD, "strict": True}}
    card = client.chat.completions.create(model="codes", messages=ASK, response_format=fmt, max_tokens=TOKENS)
    jsonschema.validate(json.loads(card.choices[0].message.content or ""), CARD)
    anything = client.chat.completions.create(
        model="codes", messages=ASK, response_format={"type": "json_object"}, max_tokens=TOKENS
    )
    assert isinstance(json.loads(anything.choices[0].message.content or ""), dict)
    assert asks(served) - before == 2


def test_the_sdks_parse_gets_the_object_on_the_first_try(served: Served) -> None:
    before = asks(served)
    parsed = served.client("alice").chat.completions.parse(
        model="codes", messages=ASK, response_format=CityCard, max_tokens=TOKENS
    )
    assert isinstance(parsed.choices[0].message.parsed, CityCard)
    assert asks(served) - before == 1


@pytest.mark.parametrize("method", ["json_schema", "function_calling", "json_mode"])
def test_langchain_with_structured_output_gets_the_object_on_the_first_try(served: Served, method: str) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=served.url, api_key=KEY_OF["alice"], model="codes", max_retries=0, max_tokens=TOKENS)  # type: ignore[arg-type]
    before = asks(served)
    if method == "json_mode":  # JSON mode checks JSON, not keys: the prompt names them, and a dict comes back
        ask = 'Reply in JSON with the keys "name" and "population": the city card of Zürich.'
        got = llm.with_structured_output(CARD | {"title": "CityCard"}, method="json_mode").invoke(ask)
        assert isinstance(got, dict)
    else:
        got = llm.with_structured_output(CityCard, method=method).invoke("The city card of Zürich, please.")  # type: ignore[arg-type]
        assert isinstance(got, CityCard)
    assert asks(served) - before == 1


@pytest.mark.parametrize("choice", ["required", "named"])
def test_a_required_or_named_call_comes_on_the_first_try(served: Served, choice: str) -> None:
    before = asks(served)
    ask: Any = [{"role": "user", "content": "What's the weather in Zürich right now?"}]
    tool_choice: Any = "required" if choice == "required" else {"type": "function", "function": {"name": "get_time"}}
    done = served.client("alice").chat.completions.create(
        model="codes", messages=ask, tools=[WEATHER_TOOL, TIME], tool_choice=tool_choice, max_tokens=TOKENS
    )
    message = done.choices[0].message
    assert done.choices[0].finish_reason == "tool_calls" and message.tool_calls
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER_TOOL, TIME)}
    for call in message.tool_calls:
        assert call.function.name in schemas and (choice == "required" or call.function.name == "get_time")  # type: ignore[union-attr]
        jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])  # type: ignore[union-attr]
    assert asks(served) - before == 1
