"""The ``openai`` SDK's async client against ``evolve serve``, as async agent apps (LangGraph, FastAPI
backends) use it: answers, streams, tool calls and structured output, many requests in flight at once,
each answered and recorded under its own id."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.evolve.serve.protocols.test_openai_http_tools import ASK, SCRIPT
from tests.support.serve import KEY_OF, QUESTION, WEATHER_TOOL, Served, serving, write_serve_spec

USER: Any = [{"role": "user", "content": QUESTION}]
SCRIPTED = SCRIPT.replace('"cut short" = "A long answer"', '"Harbor" = "The door code is 4471."')


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(write_serve_spec(tmp_path_factory.mktemp("serve-async"), model=SCRIPTED)) as live:
        yield live


def client(served: Served, tenant: str = "alice") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=served.url, api_key=KEY_OF[tenant], max_retries=0)


def test_the_async_client_gets_answers_streams_and_many_at_once(served: Served) -> None:
    async def scenario() -> None:
        async with client(served) as c:
            completion = await c.chat.completions.create(model="codes", messages=USER)
            assert completion.choices[0].message.content == "The door code is 4471."
            assert completion.choices[0].finish_reason == "stop" and completion.model_extra["evolve"]["recall_ids"]  # type: ignore[index]

            stream = await c.chat.completions.create(model="codes", messages=USER, stream=True)
            pieces = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
            assert "".join(pieces) == "The door code is 4471." and len([p for p in pieces if p]) > 1

            many = await asyncio.gather(*(c.chat.completions.create(model="codes", messages=USER) for _ in range(8)))
            assert len({m.id for m in many}) == 8
            assert all(m.choices[0].message.content == "The door code is 4471." for m in many)
        for m in many:  # every one recorded under its own id: feedback can find it
            assert served.deployment.response(m.id, tenant="alice")["answer"] == "The door code is 4471."

    asyncio.run(scenario())


def test_the_async_client_gets_tool_calls_and_structured_output(served: Served) -> None:
    async def scenario() -> None:
        async with client(served, "bob") as c:
            called = await c.chat.completions.create(model="codes", messages=ASK, tools=[WEATHER_TOOL])
            choice = called.choices[0]
            assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
            args = [json.loads(t.function.arguments) for t in choice.message.tool_calls]  # type: ignore[union-attr]
            assert args == [{"city": "Zürich"}, {"city": "São Paulo", "unit": "C"}]

            schema = {
                "type": "object",
                "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
                "required": ["name", "population"],
            }
            fmt: Any = {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}}
            ask: Any = [{"role": "user", "content": "Zürich city card: could not be used"}]
            card = await c.chat.completions.create(model="codes", messages=ask, response_format=fmt)
            assert json.loads(card.choices[0].message.content or "") == {"name": "Zürich", "population": 443037}

    asyncio.run(scenario())
