"""What ``evolve serve`` does with each field of a body: honoured, accepted because it asks nothing of the answer,
or a 400 whose ``param`` names it and says why; an unknown field, anywhere in a body, is a 400 naming it and
what its object takes. Nothing is dropped unread. Penalties and ``max_tokens`` reach the team's model; a message's
``name`` reaches the team with its turn."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.support.serve import ANSWER, KEY_OF, QUESTION, Served

ASK: Any = [{"role": "user", "content": QUESTION}]


def post(served: Served, body: Any, path: str = "/chat/completions") -> httpx.Response:
    headers = {"Authorization": f"Bearer {KEY_OF['alice']}"}
    return httpx.post(f"{served.url}{path}", content=json.dumps(body), headers=headers, timeout=30)


def model_calls(served: Served) -> list[Any]:
    return served.deployment.chat.backend.calls  # type: ignore[attr-defined]  # the spec's ScriptedChat


def refused(served: Served, body: Any, path: str = "/chat/completions") -> dict[str, Any]:
    """The 400's error, after checking that the team's model was never asked."""
    seen = len(model_calls(served))
    response = post(served, body, path)
    assert response.status_code == 400, response.text
    assert len(model_calls(served)) == seen
    return response.json()["error"]  # type: ignore[no-any-return]


TOOL = {"type": "function", "function": {"name": "door_code", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize(
    ("change", "param", "takes"),
    [
        ({"temprature": 0.2}, "temprature", "model, messages, temperature, top_p"),
        ({"messages": [{**ASK[0], "cache_control": {"type": "ephemeral"}}]}, "messages[0].cache_control",
         "role, content, tool_calls, tool_call_id, refusal, name"),
        ({"tools": [{**TOOL, "function": {**TOOL["function"], "examples": []}}]}, "tools[0].function.examples",
         "name, description, parameters, strict"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "examples": []}}},
         "response_format.json_schema.examples", "name, description, schema, strict"),
        ({"stream": True, "stream_options": {"include_usage": True, "chunk_size": 4}}, "stream_options.chunk_size",
         "include_usage"),
        ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "door_code", "why": "x"}}},
         "tool_choice.function.why", "name"),
    ],
)  # fmt: skip
def test_an_unknown_field_anywhere_is_a_400_naming_it_and_what_its_object_takes(
    served: Served, change: dict[str, Any], param: str, takes: str
) -> None:
    error = refused(served, {"model": "codes", "messages": ASK, **change})
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert f"{param}: unknown field: this takes only {takes}" in error["message"]


def test_an_unknown_field_of_the_feedback_body_is_a_400_naming_it(served: Served) -> None:
    error = refused(served, {"response_id": "chatcmpl-x", "score": 1, "rating": 1}, "/feedback")
    assert error["param"] == "rating" and "takes only response_id, score, comment, key" in error["message"]


@pytest.mark.parametrize(
    ("change", "param", "says"),
    [
        ({"logit_bias": {"50256": -100}}, "logit_bias", "token ids are the team's models' own"),
        ({"audio": {"voice": "alloy", "format": "mp3"}}, "audio", "answers are text"),
        ({"modalities": ["text", "audio"]}, "modalities", 'only modalities ["text"]'),
        ({"prediction": {"type": "content", "content": "x"}}, "prediction", "predicted outputs"),
        ({"web_search_options": {"search_context_size": "low"}}, "web_search_options", "web search"),
        ({"functions": [TOOL["function"]]}, "functions", "use tools"),
        ({"function_call": "auto"}, "function_call", "use tool_choice"),
        ({"service_tier": "flex"}, "service_tier", "auto or default"),
        ({"store": False}, "store", "every answer is stored"),
        ({"metadata": {"ticket": "T-1"}}, "metadata", "not kept with answers"),
        ({"n": 2}, "n", "only n=1"),
        ({"top_logprobs": 3}, "top_logprobs", "alternative tokens are not served"),
        ({"reasoning_effort": "high"}, "reasoning_effort", "reasoning effort"),
        ({"verbosity": "low"}, "verbosity", "verbosity"),
        ({"messages": [{**ASK[0], "name": 7}]}, "messages[0].name", "valid string"),
        ({"tools": [{**TOOL, "function": {**TOOL["function"], "strict": "maybe"}}]}, "tools[0].function.strict",
         "valid boolean"),
        ({"stream": True, "stream_options": {"include_obfuscation": True}}, "stream_options.include_obfuscation",
         "obfuscation"),
        ({"presence_penalty": 2.5}, "presence_penalty", "less than or equal to 2"),
        ({"frequency_penalty": -3}, "frequency_penalty", "greater than or equal to -2"),
        ({"max_tokens": 8, "max_completion_tokens": 16}, "max_completion_tokens", "one limit"),
    ],
)  # fmt: skip
def test_a_field_that_is_not_served_is_a_400_naming_it_and_saying_why(
    served: Served, change: dict[str, Any], param: str, says: str
) -> None:
    error = refused(served, {"model": "codes", "messages": ASK, **change})
    assert error["param"] == param and says in error["message"], error


def test_the_values_served_and_identifiers_are_accepted(served: Served) -> None:
    body = {
        "model": "codes", "messages": ASK, "n": 1, "store": True, "modalities": ["text"], "service_tier": "auto",
        "metadata": {}, "top_logprobs": 0, "logit_bias": None, "audio": None, "user": "u-17",
        "safety_identifier": "hash-17", "prompt_cache_key": "desk-7", "stream": True,
        "stream_options": {"include_usage": True, "include_obfuscation": False},
    }  # fmt: skip
    response = post(served, body)
    assert response.status_code == 200, response.text
    assert response.text.rstrip().endswith("data: [DONE]")


def test_an_earlier_refusal_is_read_as_that_turns_text(served: Served) -> None:
    said = {"role": "assistant", "content": None, "refusal": "I cannot share codes by phone."}
    assert post(served, {"model": "codes", "messages": [*ASK, said, *ASK]}).status_code == 200
    assert "assistant: I cannot share codes by phone." in model_calls(served)[-1][0][-1].content


def test_named_turns_are_answered_and_the_team_sees_who_said_what(served: Served) -> None:
    """A message's ``name`` (LangGraph puts the agent's on its AI messages) is shown with its turn; the question
    recalled by, and recorded as the query, is the last user message's text alone."""
    said = {"role": "assistant", "content": "The Harbor file is open.", "name": "researcher"}
    response = post(served, {"model": "codes", "messages": [*ASK, said, {**ASK[0], "name": "alice"}]})
    assert response.status_code == 200, response.text
    prompt = model_calls(served)[-1][0][-1].content
    assert "assistant (researcher): The Harbor file is open." in prompt
    assert prompt.endswith(f"Reply to alice: {QUESTION}")
    kept = served.deployment.response(response.json()["id"], tenant="alice")
    assert kept["query"] == QUESTION and kept["messages"][1]["name"] == "researcher"


def test_langchain_chat_openai_with_a_named_ai_message_in_its_history(served: Served) -> None:
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=served.url, api_key=KEY_OF["alice"], model="codes", max_retries=0)  # type: ignore[arg-type]
    history = [HumanMessage("Which warehouse?"), AIMessage("Harbor, filed by the desk.", name="researcher")]
    message = llm.invoke([*history, HumanMessage(QUESTION)])
    assert message.content == ANSWER
    assert "assistant (researcher): Harbor, filed by the desk." in model_calls(served)[-1][0][-1].content


def test_the_specs_max_tokens_is_the_default_and_the_requests_own_wins(served: Served) -> None:
    client = served.client("alice")
    client.chat.completions.create(model="codes", messages=ASK)
    assert model_calls(served)[-1][1]["max_tokens"] == 12  # write_serve_spec's [model] max_tokens
    client.chat.completions.create(model="codes", messages=ASK, max_tokens=40)
    assert model_calls(served)[-1][1]["max_tokens"] == 40
    client.chat.completions.create(model="codes", messages=ASK, max_completion_tokens=3)
    assert model_calls(served)[-1][1]["max_tokens"] == 3
    list(client.chat.completions.create(model="codes", messages=ASK, max_tokens=41, stream=True))
    assert model_calls(served)[-1][1]["max_tokens"] == 41


def test_penalties_reach_the_model_whole_and_streamed(served: Served) -> None:
    client = served.client("alice")
    client.chat.completions.create(model="codes", messages=ASK, presence_penalty=0.5, frequency_penalty=-1.25)
    assert {k: model_calls(served)[-1][1][k] for k in ("presence_penalty", "frequency_penalty")} == {
        "presence_penalty": 0.5, "frequency_penalty": -1.25
    }  # fmt: skip
    list(client.chat.completions.create(model="codes", messages=ASK, presence_penalty=1.0, stream=True))
    assert model_calls(served)[-1][1]["presence_penalty"] == 1.0
    client.chat.completions.create(model="codes", messages=ASK, presence_penalty=0)  # asks nothing: not sent
    assert "presence_penalty" not in model_calls(served)[-1][1]


def test_the_openai_sdk_surfaces_a_refused_field_as_a_bad_request(served: Served) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        served.client("alice").chat.completions.create(model="codes", messages=ASK, logit_bias={"1": 5})
    assert caught.value.param == "logit_bias"  # type: ignore[attr-defined]
