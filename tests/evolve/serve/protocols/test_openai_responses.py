"""``POST /v1/responses`` on ``evolve serve``, driven by the real ``openai`` SDK: ``responses.create`` sync, async and
streamed, ``responses.stream`` and ``responses.parse``; function tools and their outputs; conversation state
(``previous_response_id``, ``store``, ``GET`` and ``DELETE``), per tenant; the response id takes ``/v1/feedback``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from connectors import Completion, ScriptedChat, Usage
from tests.support.serve import ANSWER, KEY_OF, QUESTION, Served, serving, write_serve_spec

# The first key found in the observation (the quoted conversation, then "Reply to: …") wins.
SCRIPT = (
    'chat = "fake/scripted"\noptions = { replies = { '
    '"tool result" = "It is 18 C in Zürich.", '
    '"the gate" = "The gate code is 9120.", '
    '"never JSON" = "I only speak prose.", '
    '"city card" = """{"name": "Zürich", "population": 443037}""", '
    "\"weather\" = \"[get_weather(city='Zürich'), get_weather(city='Bern')]\", "
    f'"Harbor" = "{ANSWER}" }} }}'
)
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": False,
}
ASK_WEATHER = "What's the weather in Zürich and Bern?"


class CityCard(BaseModel):
    name: str
    population: int


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(write_serve_spec(tmp_path_factory.mktemp("serve-responses"), model=SCRIPT)) as live:
        yield live


def prompt(served: Served) -> str:
    """What the answering agent's model was last asked (its last user message: the observation)."""
    return served.deployment.chat.backend.calls[-1][0][-1].content  # type: ignore[attr-defined, no-any-return]


def rate(served: Served, response_id: str, tenant: str = "alice", score: float = 1.0) -> httpx.Response:
    headers = {"Authorization": f"Bearer {KEY_OF[tenant]}"}
    return httpx.post(f"{served.url}/feedback", json={"response_id": response_id, "score": score}, headers=headers)


def remember(served: Served, tenant: str) -> None:
    """Memories near the question in the tenant's namespace, so an answer recalls some."""
    store = served.deployment.store
    assert store is not None
    for i, intent in enumerate([QUESTION, "Harbor warehouse door"]):
        store.add(f"{intent} (responses)", f"lesson {i}", namespace=f"{served.deployment.run_name(tenant)}/solver")


def test_a_response_is_the_teams_answer_with_honest_usage_and_its_id_takes_feedback(served: Served) -> None:
    remember(served, "alice")
    response = served.client("alice").responses.create(
        model="codes", input=QUESTION, instructions="Answer in one line.", metadata={"ticket": "T-17"}, user="u-17"
    )
    assert response.id.startswith("resp_") and response.status == "completed" and response.output_text == ANSWER
    assert response.instructions == "Answer in one line." and response.metadata == {"ticket": "T-17"}
    assert "Instructions from the app:\nAnswer in one line." in prompt(served)
    row = served.deployment.response(response.id, tenant="alice")
    assert row["answer"] == ANSWER and response.usage is not None and response.usage.total_tokens == row["tokens"] > 0
    assert response.usage.input_tokens + response.usage.output_tokens == response.usage.total_tokens
    recalls = response.model_extra["evolve"]["recall_ids"]  # type: ignore[index]
    assert [s["recall_id"] for s in row["steps"]] == recalls and len(recalls) == 1
    receipt = rate(served, response.id).json()
    assert receipt["applied"] is True and receipt["reinforced"] == 2  # the memories this response recalled


def test_the_async_client_and_a_streamed_create_give_the_same_answer(served: Served) -> None:
    async def ask() -> openai.types.responses.Response:
        client = openai.AsyncOpenAI(base_url=served.url, api_key=KEY_OF["bob"], max_retries=0)
        return await client.responses.create(model="codes", input=[{"role": "user", "content": QUESTION}])

    assert asyncio.run(ask()).output_text == ANSWER
    events = list(served.client("bob").responses.create(model="codes", input=QUESTION, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]  # fmt: skip
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]  # fmt: skip
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response  # type: ignore[union-attr]
    assert text == final.output_text == ANSWER == served.deployment.response(final.id, tenant="bob")["answer"]
    assert final.usage is not None and final.usage.total_tokens > 0 and rate(served, final.id, "bob").json()["applied"]


def test_the_sdks_stream_helper_and_parse_read_the_events_and_the_json(served: Served) -> None:
    client = served.client("alice")
    with client.responses.stream(model="codes", input=QUESTION) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == ANSWER

    parsed = client.responses.parse(model="codes", input="Give me the city card of Zürich.", text_format=CityCard)
    assert parsed.output_parsed == CityCard(name="Zürich", population=443037)
    assert parsed.text is not None and parsed.text.format is not None and parsed.text.format.type == "json_schema"
    assert "JSON" in prompt(served)  # the team was told the format
    with client.responses.stream(model="codes", input="Give me the city card of Zürich.", text_format=CityCard) as s:
        assert s.get_final_response().output_parsed == CityCard(name="Zürich", population=443037)


def test_an_answer_that_stays_out_of_format_is_a_502_whose_response_id_takes_feedback(served: Served) -> None:
    with pytest.raises(openai.APIStatusError) as failed:
        served.client("alice").responses.parse(model="codes", input="Answer, but never JSON.", text_format=CityCard)
    error = failed.value.body  # type: ignore[union-attr]
    assert failed.value.status_code == 502 and error["code"] == "invalid_model_output"  # type: ignore[index]
    assert error["response_id"].startswith("resp_") and rate(served, error["response_id"]).json()["applied"]  # type: ignore[index]


def test_function_calls_come_back_as_items_and_the_app_answers_them_with_outputs(served: Served) -> None:
    client = served.client("alice")
    first = client.responses.create(model="codes", input=ASK_WEATHER, tools=[WEATHER])
    calls = [item for item in first.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Zürich"}), ("get_weather", {"city": "Bern"})
    ]  # fmt: skip
    assert len({c.call_id for c in calls}) == 2 and first.output_text == ""

    outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": f"{18 - 4 * i} C"}
               for i, c in enumerate(calls)]  # fmt: skip
    whole = [{"role": "user", "content": ASK_WEATHER}, *(c.model_dump(exclude_none=True) for c in calls), *outputs]
    final = client.responses.create(model="codes", input=whole, tools=[WEATHER])  # type: ignore[arg-type]
    assert final.output_text == "It is 18 C in Zürich."
    assert f"tool result ({calls[1].call_id}): 14 C" in prompt(served) and "get_weather(city='Bern')" in prompt(served)

    again = client.responses.create(model="codes", input=outputs, tools=[WEATHER], previous_response_id=first.id)  # type: ignore[arg-type]
    assert again.output_text == "It is 18 C in Zürich." and again.previous_response_id == first.id
    assert ASK_WEATHER in prompt(served) and f"tool result ({calls[0].call_id}): 18 C" in prompt(served)


def test_streamed_calls_and_tool_choice_and_parallel_tool_calls(served: Served) -> None:
    client = served.client("alice")
    events = list(client.responses.create(model="codes", input=ASK_WEATHER, tools=[WEATHER], stream=True))
    args = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert [json.loads(a) for a in args] == [{"city": "Zürich"}, {"city": "Bern"}]
    assert events[-1].type == "response.completed"

    one = client.responses.create(model="codes", input=ASK_WEATHER, tools=[WEATHER], parallel_tool_calls=False,
                                  tool_choice={"type": "function", "name": "get_weather"})  # fmt: skip
    assert [item.type for item in one.output] == ["function_call"] and one.parallel_tool_calls is False
    assert served.deployment.chat.backend.calls[-1][1]["tool_choice"] == "required"  # type: ignore[attr-defined]
    allowed = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_weather"}]}
    assert client.responses.create(model="codes", input=ASK_WEATHER, tools=[WEATHER], tool_choice=allowed).output


def test_previous_response_id_continues_the_conversation_without_its_instructions(served: Served) -> None:
    client = served.client("carol")
    first = client.responses.create(model="codes", input=QUESTION, instructions="Speak like a pirate.")
    second = client.responses.create(model="codes", input="And the gate?", previous_response_id=first.id)
    assert second.output_text == "The gate code is 9120."
    seen = prompt(served)
    assert f"user: {QUESTION}\nassistant: {ANSWER}" in seen and "pirate" not in seen and seen.endswith("the gate?")
    third = client.responses.create(model="codes", input="Thanks. the gate again?", previous_response_id=second.id)
    assert third.output_text == "The gate code is 9120." and QUESTION in prompt(served)  # the whole chain
    assert client.responses.retrieve(second.id).output_text == second.output_text


def test_store_false_is_not_kept_for_the_api_but_takes_feedback(served: Served) -> None:
    client = served.client("alice")
    response = client.responses.create(model="codes", input=QUESTION, store=False)
    assert response.store is False and response.output_text == ANSWER
    with pytest.raises(openai.NotFoundError, match="store: false"):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="codes", input="the gate?", previous_response_id=response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(response.id)
    assert rate(served, response.id).json()["applied"] is True  # recorded for feedback all the same


def test_a_stored_response_is_fetched_and_deleted_by_its_tenant_only(served: Served) -> None:
    alice, bob = served.client("alice"), served.client("bob")
    response = alice.responses.create(model="codes", input=QUESTION)
    assert alice.responses.retrieve(response.id).model_dump() == response.model_dump()
    for attempt in (lambda: bob.responses.retrieve(response.id), lambda: bob.responses.delete(response.id),
                    lambda: bob.responses.create(model="codes", input="the gate?", previous_response_id=response.id)):  # fmt: skip
        with pytest.raises(openai.NotFoundError, match="no stored response"):
            attempt()
    assert rate(served, response.id, "bob").status_code == 404  # another tenant's id is an unknown one

    assert rate(served, response.id).json()["applied"] is True
    alice.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(response.id)
    assert rate(served, response.id).status_code == 404  # deleted with its ratings
    with pytest.raises(openai.NotFoundError):
        alice.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):  # a chat completion's id is no stored response
        alice.responses.retrieve(alice.chat.completions.create(model="codes", messages=[
            {"role": "user", "content": QUESTION}]).id)  # fmt: skip


def test_a_cut_answer_is_incomplete_whole_and_streamed(served: Served) -> None:
    chat = served.deployment.chat
    spec_model = chat.backend
    chat.backend = ScriptedChat(lambda _: Completion("The door code", "cut", Usage(9, 3), finish_reason="length"))
    try:
        client = served.client("alice")
        whole = client.responses.create(model="codes", input=QUESTION, max_output_tokens=3)
        events = list(client.responses.create(model="codes", input=QUESTION, max_output_tokens=3, stream=True))
    finally:
        chat.backend = spec_model
    assert whole.status == "incomplete" and whole.incomplete_details is not None
    assert whole.incomplete_details.reason == "max_output_tokens" and whole.max_output_tokens == 3
    assert whole.output[0].status == "incomplete" and whole.usage is not None and whole.usage.output_tokens == 3  # type: ignore[union-attr]
    assert events[-1].type == "response.incomplete" and events[-1].response.output_text == "The door code"  # type: ignore[union-attr]
