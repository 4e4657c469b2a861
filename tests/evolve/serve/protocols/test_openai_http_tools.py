"""``evolve serve`` passes an app's tools through, as the openai SDK and LangChain use them: the answering
agent's calls come back in OpenAI's shape (whole and streamed), the conversation goes on with tool
results, and what a team cannot serve is a 400 that says why, never a silent plain-text answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx as httpx2
import openai
import pytest
from pydantic import BaseModel

from connectors import Completion, ToolCall
from connectors.fakes import ScriptedChat
from tests.support.serve import KEY_OF, WEATHER_TOOL, Served, serving, write_serve_spec

CLOCK_TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
ASK: Any = [{"role": "user", "content": "What's the weather in Zürich and in São Paulo right now?"}]
# the first key found in the prompt's last user message wins: after a tool result, the answer in words
SCRIPT = (
    'chat = "fake/scripted"\noptions = { replies = { "tool result" = "It is 18 C in Zürich and 25 C in São Paulo.", '
    "\"weather\" = \"[get_weather(city='Zürich'), get_weather(city='São Paulo', unit='C')]\", "
    '"never JSON" = "I only speak prose.", '
    '"could not be used" = """```json\\n{"name": "Zürich", "population": 443037}\\n```""", '
    '"city card" = "Sure! Zürich has 443,037 people.", '
    '"city tool" = "[CityCard(name=\'Zürich\', population=443037)]", '
    '"cut short" = "A long answer" } }'
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(write_serve_spec(tmp_path_factory.mktemp("serve-tools"), model=SCRIPT)) as live:
        yield live


def bearer(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY_OF[tenant]}"}


def post(served: Served, body: dict[str, Any]) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {KEY_OF['alice']}"}
    return httpx2.post(f"{served.url}/chat/completions", content=json.dumps(body), headers=headers, timeout=30)


def model_of(served: Served) -> ScriptedChat:
    return served.deployment.chat.backend  # type: ignore[return-value]  # the spec's ScriptedChat


def model_calls(served: Served) -> list[Any]:
    return model_of(served).calls


def test_the_openai_sdk_gets_tool_calls_and_the_conversation_goes_on_with_their_results(served: Served) -> None:
    client = served.client("alice")
    first = client.chat.completions.create(model="codes", messages=ASK, tools=[WEATHER_TOOL])

    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [  # type: ignore[union-attr]
        ("get_weather", {"city": "Zürich"}),
        ("get_weather", {"city": "São Paulo", "unit": "C"}),
    ]
    assert len({c.id for c in calls}) == 2 and all(c.id for c in calls)
    assert [t.name for t in model_calls(served)[-1][1]["tools"]] == ["get_weather"]  # the model saw the app's tool

    follow = [
        *ASK,
        choice.message.model_dump(exclude_none=True),
        *({"role": "tool", "tool_call_id": c.id, "content": f"{18 + 7 * i} C"} for i, c in enumerate(calls)),
    ]
    final = client.chat.completions.create(model="codes", messages=follow, tools=[WEATHER_TOOL])

    assert final.choices[0].finish_reason == "stop" and final.choices[0].message.tool_calls is None
    assert final.choices[0].message.content == "It is 18 C in Zürich and 25 C in São Paulo."
    prompt = model_calls(served)[-1][0][-1].content
    assert f"tool result ({calls[1].id}): 25 C" in prompt and "get_weather(city='São Paulo', unit='C')" in prompt


def test_streamed_tool_calls_add_up_as_the_openai_sdk_adds_them(served: Served) -> None:
    stream = served.client("alice").chat.completions.create(
        model="codes",
        messages=ASK,
        tools=[WEATHER_TOOL],
        stream=True,
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or ():
                got = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                got["id"] += delta.id or ""
                got["name"] += (delta.function.name or "") if delta.function else ""
                got["arguments"] += (delta.function.arguments or "") if delta.function else ""
    assert finish == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        ("get_weather", {"city": "Zürich"}),
        ("get_weather", {"city": "São Paulo", "unit": "C"}),
    ]


def test_langchain_bind_tools_gets_the_calls(served: Served) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=served.url, api_key=KEY_OF["alice"], model="codes", max_retries=0)
    message = llm.bind_tools([WEATHER_TOOL]).invoke(ASK[0]["content"])
    assert [(c["name"], c["args"]) for c in message.tool_calls] == [  # type: ignore[attr-defined]
        ("get_weather", {"city": "Zürich"}),
        ("get_weather", {"city": "São Paulo", "unit": "C"}),
    ]
    assert message.response_metadata["id"].startswith("chatcmpl-")  # the id feedback takes


def test_a_named_tool_choice_and_parallel_tool_calls_false_are_honoured(served: Served) -> None:
    body = {"model": "codes", "messages": ASK, "tools": [CLOCK_TOOL, WEATHER_TOOL],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "parallel_tool_calls": False}  # fmt: skip
    response = post(served, body)
    assert response.status_code == 200, response.text
    message = response.json()["choices"][0]["message"]
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [{"city": "Zürich"}]
    _, params = model_calls(served)[-1]
    assert [t.name for t in params["tools"]] == ["get_weather"] and params["tool_choice"] == "required"
    kept = served.deployment.response(response.json()["id"], tenant="alice")
    assert [c["name"] for c in kept["steps"][-1]["calls"]] == ["get_weather"]  # what was recorded is what was sent


def test_requests_without_a_seed_are_sampled_afresh_and_a_seed_is_passed_on(served: Served) -> None:
    for _ in range(2):
        post(served, {"model": "codes", "messages": [{"role": "user", "content": "cut short"}], "temperature": 0.9})
    assert model_calls(served)[-1][1]["seed"] != model_calls(served)[-2][1]["seed"]
    post(served, {"model": "codes", "messages": [{"role": "user", "content": "cut short"}], "seed": 1234})
    assert model_calls(served)[-1][1]["seed"] == 1234


@pytest.mark.parametrize(
    ("change", "status", "says"),
    [
        ({"model": "gpt-4o-mini"}, 404, "serves 'codes'"),
        ({"logprobs": True}, 400, "logprobs were asked for and the answering agent's model (scripted) gave none"),
        ({"logprobs": True, "top_logprobs": 2}, 400, "top_logprobs: alternative tokens are not served"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 7}}}}, 400,
         "not a valid JSON Schema"),
        ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, 400,
         "not among the request's tools (get_weather)"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]}, 400,
         "Tool 'f': parameters must have \"type\": \"object\", got 'array'"),
        ({"tool_choice": "required"}, 400, "tool_choice='required' needs tools"),
        ({"messages": [{"role": "tool", "content": "18 C"}, *ASK]}, 400, "tool_call_id"),
    ],
)  # fmt: skip
def test_what_cannot_be_served_is_an_error_that_says_why(
    served: Served, change: dict[str, Any], status: int, says: str
) -> None:
    response = post(served, {"model": "codes", "messages": ASK, **change})
    assert response.status_code == status, response.text
    assert says in response.json()["error"]["message"]


def test_a_team_of_several_agents_refuses_tools(tmp_path: Path) -> None:
    spec = write_serve_spec(tmp_path, model=SCRIPT)
    spec.write_text(spec.read_text() + '\n[[agents]]\nname = "checker"\nsystem = "Check the answer."\n')
    with serving(spec) as live:
        response = post(live, {"model": "codes", "messages": ASK, "tools": [WEATHER_TOOL]})
    assert response.status_code == 400
    assert "one-agent team; this one has 2 agents (solver, checker)" in response.json()["error"]["message"]


def test_a_wrong_model_is_openais_not_found(served: Served) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        served.client("alice").chat.completions.create(model="gpt-4o-mini", messages=ASK)
    assert caught.value.code == "model_not_found"


@pytest.mark.slow
def test_the_local_models_answers_say_length_when_cut_and_give_logprobs_when_asked(tmp_path: Path) -> None:
    spec = write_serve_spec(tmp_path, model='chat = "local/smollm2"')
    long_one: Any = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
    with serving(spec) as live:
        client = live.client("alice")
        cut = client.chat.completions.create(model="codes", messages=long_one, max_tokens=3)
        whole = client.chat.completions.create(
            model="codes", messages=[{"role": "user", "content": "Say OK."}], max_tokens=64, stop=["."]
        )
        scored = client.chat.completions.create(model="codes", messages=long_one, max_tokens=8, logprobs=True)
        streamed = list(
            client.chat.completions.create(model="codes", messages=long_one, max_tokens=8, logprobs=True, stream=True)
        )
    assert cut.choices[0].finish_reason == "length" and cut.usage is not None and cut.usage.completion_tokens == 3
    assert whole.choices[0].finish_reason == "stop" and whole.choices[0].logprobs is None  # not asked: none
    tokens = scored.choices[0].logprobs.content  # type: ignore[union-attr]
    assert tokens is not None and len(tokens) == 8 and all(t.logprob <= 0.0 and t.top_logprobs == [] for t in tokens)
    assert "".join(t.token for t in tokens) == scored.choices[0].message.content
    assert all(bytes(t.bytes or []) == t.token.encode() for t in tokens)
    sent = [t for c in streamed if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content or []]
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert len(sent) == 8 and "".join(t.token for t in sent) == text


def test_structured_output_is_checked_and_retried_until_it_is_json_of_the_schema(served: Served) -> None:
    from pydantic import BaseModel

    class CityCard(BaseModel):
        name: str
        population: int

    before = len(model_calls(served))
    ask: Any = [{"role": "user", "content": "Give me the city card of Zürich."}]
    parsed = served.client("alice").chat.completions.parse(model="codes", messages=ask, response_format=CityCard)

    assert parsed.choices[0].message.parsed == CityCard(name="Zürich", population=443037)
    assert json.loads(parsed.choices[0].message.content or "") == {"name": "Zürich", "population": 443037}  # no fence
    prompts = [call[0][-1].content for call in model_calls(served)[before:]]
    assert len(prompts) == 2 and '"required": ["name", "population"]' in prompts[0]  # told the schema
    assert "could not be used: it is not JSON" in prompts[1]  # and, once, why its prose was refused


def test_langchain_with_structured_output_gets_the_object(served: Served) -> None:
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel

    class CityCard(BaseModel):
        """A city and its population."""

        name: str
        population: int

    llm = ChatOpenAI(base_url=served.url, api_key=KEY_OF["alice"], model="codes", max_retries=0)  # type: ignore[arg-type]
    by_schema = llm.with_structured_output(CityCard, method="json_schema").invoke("The city card of Zürich, please.")
    by_tool = llm.with_structured_output(CityCard, method="function_calling").invoke("The city tool for Zürich.")
    assert by_schema == by_tool == CityCard(name="Zürich", population=443037)


def test_an_answer_that_never_becomes_json_is_an_error_not_free_text(served: Served) -> None:
    before = len(model_calls(served))
    body = {"model": "codes", "messages": [{"role": "user", "content": "never JSON"}],
            "response_format": {"type": "json_object"}}  # fmt: skip
    response = post(served, body)
    assert response.status_code == 502 and response.json()["error"]["code"] == "invalid_model_output"
    assert "not valid for response_format json_object after 2 tries: it is not JSON" in response.text
    assert len(model_calls(served)) - before == 2  # the second try repeated the first word for word: no third


def test_a_required_call_the_model_never_makes_is_a_502_not_prose(served: Served) -> None:
    """``tool_choice: "required"`` promises a call: an answer in prose is asked for again, told so, and after
    three tries the app gets an error it can act on, never the prose with ``finish_reason: "stop"``."""
    before = len(model_calls(served))
    ask = [{"role": "user", "content": "Wetter in Zürich? never JSON"}]
    response = post(served, {"model": "codes", "messages": ask, "tools": [WEATHER_TOOL], "tool_choice": "required"})
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_model_output" and "no function call" in error["message"]
    prompts = [call[0][-1].content for call in model_calls(served)[before:]]
    assert len(prompts) == 2 and "You must call one of the functions" in prompts[1]


def test_a_failed_required_call_is_recorded_and_takes_feedback(served: Served) -> None:
    """The app cannot use an answer without the call it required, but it can rate it: the 502 names the
    response id the failure was recorded under, and feedback on it is taken like any answer's (the openai
    SDK shows the error object as ``e.body``)."""
    client = openai.OpenAI(base_url=served.url, api_key=KEY_OF["alice"], max_retries=0)
    ask = [{"role": "user", "content": "Wetter in Zürich? never JSON"}]
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="codes", messages=ask, tools=[WEATHER_TOOL], tool_choice="required")  # type: ignore[arg-type,list-item]
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "invalid_model_output"
    response_id = error["response_id"]
    assert response_id.startswith("chatcmpl-") and response_id in error["message"]
    rating = {"response_id": response_id, "score": 0.0, "comment": "Wrong: call get_weather(city='Zürich')."}
    rated = httpx2.post(f"{served.url}/feedback", json=rating, headers=bearer("alice"), timeout=30)
    assert rated.status_code == 200 and rated.json()["applied"] is True, rated.text
    bob = httpx2.post(f"{served.url}/feedback", json=rating, headers=bearer("bob"), timeout=30)
    assert bob.status_code == 404  # another tenant's failure is not bob's to rate


class CityCard(BaseModel):
    name: str
    population: int


def card_call(population: object) -> Completion:
    """An API model's native call to ``CityCard`` (not read from text, so its arguments are not checked on the way)."""
    call = ToolCall("CityCard", {"name": "Zürich", "population": population}, id="call_1")
    return Completion("", "scripted", tool_calls=(call,), finish_reason="tool_calls")


def test_a_strict_pydantic_function_tool_is_served_to_the_openai_sdk(served: Served) -> None:
    """``openai.pydantic_function_tool`` always sets ``strict: true``; the SDK's ``parse`` reads the call back."""
    ask: Any = [{"role": "user", "content": "The city tool for Zürich."}]
    tool = openai.pydantic_function_tool(CityCard)
    parsed = served.client("alice").chat.completions.parse(model="codes", messages=ask, tools=[tool])
    calls = parsed.choices[0].message.tool_calls or []
    assert [c.function.parsed_arguments for c in calls] == [CityCard(name="Zürich", population=443037)]
    assert [t.strict for t in model_calls(served)[-1][1]["tools"]] == [True]  # the model is given strict


def test_a_strict_call_that_breaks_its_schema_is_asked_again_then_is_a_502_with_a_response_id(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model_of(served), "replies", lambda messages: card_call("many"))
    before = len(model_calls(served))
    ask: Any = [{"role": "user", "content": "The city card of Zürich."}]
    strict = {"model": "codes", "messages": ask, "tools": [openai.pydantic_function_tool(CityCard)]}
    response = post(served, strict)
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_model_output" and error["response_id"].startswith("chatcmpl-")
    assert "strict schema after 2 tries: tool 'CityCard': arguments at population 'many'" in error["message"]
    prompts = [call[0][-1].content for call in model_calls(served)[before:]]
    assert len(prompts) == 2 and "Make the call again with arguments that fit its schema" in prompts[1]
    loose = {**strict, "tools": [{"type": "function", "function": {**strict["tools"][0]["function"], "strict": False}}]}
    assert post(served, loose).status_code == 200  # strict: false asks for no check, as at OpenAI


def test_a_strict_call_that_fits_on_the_second_try_is_the_answer(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    replies = iter([card_call("many"), card_call(443037)])
    monkeypatch.setattr(model_of(served), "replies", lambda messages: next(replies))
    ask: Any = [{"role": "user", "content": "The city card of Zürich."}]
    body = {"model": "codes", "messages": ask, "tools": [openai.pydantic_function_tool(CityCard)]}
    response = post(served, body)
    assert response.status_code == 200, response.text
    [call] = response.json()["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"name": "Zürich", "population": 443037}
