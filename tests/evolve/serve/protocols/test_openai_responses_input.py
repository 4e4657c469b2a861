"""What ``POST /v1/responses`` does with bad input and with each field of its body: malformed items, an unknown item
type, a ``previous_response_id`` that is unknown or another tenant's, a ``function_call_output`` for no call, a field
it cannot honour (built-in tools, ``background``, ``reasoning``...) are each a clear error naming what is wrong, and
the team's model is never asked; a stream the client drops midway is still recorded and rateable."""

from __future__ import annotations

import json
import time
from typing import Any, get_type_hints

import httpx
import openai
import pytest
from openai.types.responses import response_create_params

from evolve.serve.answers import UnknownResponse
from evolve.serve.protocols.openai_requests import fields_of
from evolve.serve.protocols.responses_requests import ResponsesRequest
from tests.support.serve import ANSWER, KEY_OF, QUESTION, HeldChat, Served

CALL = {"type": "function_call", "call_id": "call_7", "name": "door_code", "arguments": '{"site": "Harbor"}'}
TOOL = {"type": "function", "name": "door_code", "parameters": {"type": "object", "properties": {}}}


def post(served: Served, body: Any, tenant: str = "alice") -> httpx.Response:
    headers = {"Authorization": f"Bearer {KEY_OF[tenant]}"}
    return httpx.post(f"{served.url}/responses", content=json.dumps(body), headers=headers, timeout=30)


def model_calls(served: Served) -> list[Any]:
    return served.deployment.chat.backend.calls  # type: ignore[attr-defined, no-any-return]


def refused(served: Served, body: Any, status: int = 400) -> dict[str, Any]:
    """The error, after checking that the team's model was never asked."""
    seen = len(model_calls(served))
    response = post(served, {"model": "codes", **body})
    assert response.status_code == status, response.text
    assert len(model_calls(served)) == seen
    return response.json()["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"input": [{"type": "web_search_call", "id": "ws_1", "status": "completed"}]}, "input[0]",
         "an item of type 'web_search_call' is not served: input takes message, function_call, function_call_output"),
        ({"input": [{"type": "telepathy"}]}, "input[0]", "an item of type 'telepathy' is not served"),
        ({"input": ["What is the code?"]}, "input[0]", "'What is the code?' is not served"),
        ({"input": [{"content": "no role"}]}, "input[0]", "is not served"),
        ({"input": [{"role": "user", "content": QUESTION, "colour": "red"}]}, "input[0].colour",
         "unknown field: this takes only type, role, content, id, status"),
        ({"input": [{"role": "robot", "content": QUESTION}]}, "input[0].role", "'user', 'system', 'developer'"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]},
         "input[0].content", "only text parts (input_text, output_text, refusal) are served, got 'input_image'"),
        ({"input": [{"role": "user", "content": QUESTION}, {**CALL, "arguments": "site=Harbor"}]},
         "input[1].arguments", "arguments must be a JSON object"),
        ({"input": [{"role": "user", "content": QUESTION}, {**CALL, "call_id": ""}]}, "input[1].call_id",
         "at least 1 character"),
        ({"input": [{"type": "function_call_output", "output": "4471"}]}, "input[0].call_id", "Field required"),
        ({"input": [{"role": "user", "content": QUESTION}, CALL, {"type": "function_call_output",
                     "call_id": "call_8", "output": "4471"}]}, "input[2].call_id",
         "no function_call with call_id 'call_8' comes before this output"),  # fmt: skip
        ({"input": [{"type": "function_call_output", "call_id": "call_7", "output": "4471"}, CALL]},
         "input[0].call_id", "no function_call with call_id 'call_7'"),
        ({"input": 42}, "input", "valid list"),
        ({"input": QUESTION, "tools": [{"type": "web_search"}]}, "tools[0]", "the built-in tool 'web_search'"),
        ({"input": QUESTION, "tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools[0]",
         "MCP tool"),
        ({"input": QUESTION, "tools": [{**TOOL, "examples": []}]}, "tools[0].examples",
         "takes only type, name, parameters, strict, description"),
        ({"input": QUESTION, "tool_choice": {"type": "web_search_preview"}}, "tool_choice", "built-in tool"),
        ({"input": QUESTION, "tools": [TOOL], "tool_choice": {"type": "function", "name": "gate_code"}},
         "tool_choice", "'gate_code', which is not among the request's tools (door_code)"),
        ({"input": QUESTION, "text": {"format": {"type": "xml"}}}, "text.format", "json_object, json_schema"),
        ({"input": QUESTION, "text": {"format": {"type": "json_schema", "name": "x", "schema": {}, "examples": 1}}},
         "text.format.examples", "takes only type, name, schema, description, strict"),
        ({"input": QUESTION, "text": {"verbosity": "low"}}, "text.verbosity", "verbosity is not served"),
        ({"input": QUESTION, "background": True}, "background", "background responses are not served"),
        ({"input": QUESTION, "reasoning": {"effort": "high"}}, "reasoning", "reasoning settings are not served"),
        ({"input": QUESTION, "include": ["file_search_call.results"]}, "include", "no extra output is served"),
        ({"input": QUESTION, "conversation": "conv_1"}, "conversation", "continue with previous_response_id"),
        ({"input": QUESTION, "prompt": {"id": "pmpt_1"}}, "prompt", "prompt templates"),
        ({"input": QUESTION, "truncation": "auto"}, "truncation", "only disabled"),
        ({"input": QUESTION, "top_logprobs": 2}, "top_logprobs", "alternative tokens"),
        ({"input": QUESTION, "service_tier": "flex"}, "service_tier", "auto or default"),
        ({"input": QUESTION, "stream": True, "stream_options": {"include_obfuscation": True}},
         "stream_options.include_obfuscation", "obfuscation"),
        ({"input": QUESTION, "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata", "at most 16 pairs"),
        ({"input": QUESTION, "max_output_tokens": 0}, "max_output_tokens", "greater than or equal to 1"),
        ({"input": QUESTION, "temprature": 0.2}, "temprature", "unknown field: this takes only model, input"),
    ],
)  # fmt: skip
def test_bad_input_and_fields_not_served_are_a_400_naming_them(
    served: Served, body: dict[str, Any], param: str, says: str
) -> None:
    error = refused(served, body)
    assert error["param"] == param and says in error["message"], error
    assert error["type"] == "invalid_request_error"


def test_a_previous_response_id_unknown_or_of_another_tenant_is_the_same_404(served: Served) -> None:
    bobs = served.client("bob").responses.create(model="codes", input=QUESTION).id
    unknown = refused(served, {"input": "the gate?", "previous_response_id": "resp_nope"}, status=404)
    others = refused(served, {"input": "the gate?", "previous_response_id": bobs}, status=404)
    assert unknown["param"] == others["param"] == "previous_response_id"
    assert unknown["code"] == others["code"] == "response_not_found"
    assert others["message"] == unknown["message"].replace("resp_nope", bobs)  # nothing tells them apart
    for tenant in ("alice", "bob"):  # nor on GET
        got = httpx.get(f"{served.url}/responses/{bobs}", headers={"Authorization": f"Bearer {KEY_OF[tenant]}"})
        assert got.status_code == (404 if tenant == "alice" else 200)
    asked = httpx.get(
        f"{served.url}/responses/{bobs}?stream=true", headers={"Authorization": f"Bearer {KEY_OF['bob']}"}
    )
    assert asked.status_code == 400 and asked.json()["error"]["param"] == "stream"


def test_what_the_openai_sdk_sends_is_known_and_the_values_served_are_accepted(served: Served) -> None:
    sent = set(get_type_hints(response_create_params.ResponseCreateParamsStreaming, include_extras=False))
    assert sent - set(fields_of(ResponsesRequest)) == set()  # every field is honoured, accepted or refused
    body = {"model": "codes", "input": QUESTION, "background": False, "include": [], "top_logprobs": 0,
            "truncation": "disabled", "service_tier": "auto", "store": True, "max_tool_calls": 3, "user": "u-1",
            "safety_identifier": "h-1", "prompt_cache_key": "desk", "text": {"verbosity": "medium"}, "reasoning": None}  # fmt: skip
    response = post(served, body)
    assert response.status_code == 200, response.text
    assert response.json()["output"][0]["content"][0]["text"] == ANSWER and response.json()["max_tool_calls"] == 3


def test_a_wrong_model_or_key_is_refused_as_chat_completions_refuses_it(served: Served) -> None:
    assert refused(served, {"model": "gpt-5", "input": QUESTION}, status=404)["code"] == "model_not_found"
    anonymous = httpx.post(f"{served.url}/responses", json={"model": "codes", "input": QUESTION})
    assert anonymous.status_code == 401
    with pytest.raises(openai.BadRequestError, match="background"):
        served.client("alice").responses.create(model="codes", input=QUESTION, background=True)


def recorded(served: Served, response_id: str, wait: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + wait
    while True:
        try:
            return served.deployment.response(response_id, tenant="alice")
        except UnknownResponse:
            assert time.monotonic() < deadline, f"{response_id} was never recorded"
            time.sleep(0.02)


def test_a_stream_the_client_drops_midway_is_recorded_rateable_and_cancelled(served: Served, held: HeldChat) -> None:
    client = served.client("alice")
    stream = client.responses.create(model="codes", input=QUESTION, stream=True)
    events = iter(stream)
    created = next(events)
    first = next(e for e in events if e.type == "response.output_text.delta")
    assert first.delta == "The " and not held.gate.is_set()  # the model is still generating
    stream.close()  # the app gives up after the first word
    held.gate.set()

    response_id = created.response.id  # type: ignore[union-attr]
    row = recorded(served, response_id)
    assert row["answer"].startswith("The ") and row["answer"] != ANSWER and row["steps"][-1]["finish"] == "cancelled"
    deadline = time.monotonic() + 10
    while True:  # kept for the API once the stream is closed
        try:
            kept = client.responses.retrieve(response_id)
            break
        except openai.NotFoundError:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    assert kept.status == "cancelled" and kept.output_text == row["answer"]
    rating = httpx.post(f"{served.url}/feedback", json={"response_id": response_id, "score": 0.0},
                        headers={"Authorization": f"Bearer {KEY_OF['alice']}"})  # fmt: skip
    assert rating.json()["applied"] is True


def test_a_model_failing_mid_stream_ends_it_with_response_failed(served: Served, held: HeldChat) -> None:
    held.fail = True
    events = list(served.client("alice").responses.create(model="codes", input=QUESTION, stream=True))
    assert events[-1].type == "response.failed" and events[-1].response.status == "failed"  # type: ignore[union-attr]
    error = events[-1].response.error  # type: ignore[union-attr]
    assert error is not None and error.code == "server_error" and "fell over" in error.message
    with pytest.raises(UnknownResponse):  # no answer, no record
        served.deployment.response(events[0].response.id, tenant="alice")  # type: ignore[union-attr]


@pytest.mark.parametrize(("strict", "checked"), [(None, True), (True, True), (False, False)])
def test_a_function_tool_is_strict_unless_it_says_false_as_on_the_responses_api(strict: Any, checked: bool) -> None:
    tool = {"type": "function", "name": "door_code", "parameters": {"type": "object", "properties": {}}}
    body = ResponsesRequest.model_validate({"model": "m", "input": "hi", "tools": [tool | {"strict": strict}]})
    assert [t.tool().strict for t in body.tools or ()] == [checked]
