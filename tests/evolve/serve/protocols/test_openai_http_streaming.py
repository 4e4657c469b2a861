"""``evolve serve`` streams a plain answer as the answering agent's model generates it, driven by the real
openai SDK: the first words reach the client while the model is still held mid-answer, the streamed text
is the recorded answer and its id takes feedback, and a client that hangs up early still leaves a
recorded response."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx2
import pytest
from openai.types.chat import ChatCompletionMessageParam

from evolve.serve.answers import UnknownResponse
from tests.support.serve import ANSWER, KEY_OF, QUESTION, HeldChat, Served

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": QUESTION}]


def remember(served: Served, tenant: str) -> None:
    """Memories near the question in the tenant's namespace, so the answer recalls some."""
    store = served.deployment.store
    assert store is not None
    for i, intent in enumerate([QUESTION, "Harbor warehouse door", "summit alarm"]):
        store.add(f"{intent} (streaming)", f"lesson {i}", namespace=f"{served.deployment.run_name(tenant)}/solver")


def recorded(served: Served, response_id: str, tenant: str = "alice", wait: float = 10.0) -> dict[str, Any]:
    """The recorded response, waiting up to ``wait`` seconds for the server to record it."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return served.deployment.response(response_id, tenant=tenant)
        except UnknownResponse:
            assert time.monotonic() < deadline, f"{response_id} was never recorded"
            time.sleep(0.02)


def test_the_first_words_arrive_while_the_model_is_still_generating(served: Served, held: HeldChat) -> None:
    remember(served, "alice")
    stream = served.client("alice").chat.completions.create(
        model="codes", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    chunks = iter(stream)
    assert next(chunks).choices[0].delta.role == "assistant"
    first = next(chunks)
    assert first.choices[0].delta.content == "The " and not held.gate.is_set()  # the model is still held
    with pytest.raises(UnknownResponse):
        served.deployment.response(first.id, tenant="alice")  # nothing recorded while it generates

    held.gate.set()
    rest = list(chunks)
    text = "The " + "".join(c.choices[0].delta.content or "" for c in rest if c.choices)
    row = recorded(served, first.id)
    assert text == row["answer"] == ANSWER and {c.id for c in rest} == {first.id}
    finish = [c for c in rest if c.choices][-1]
    assert finish.choices[0].finish_reason == "stop"
    (recall_id,) = finish.model_extra["evolve"]["recall_ids"]  # type: ignore[index]
    assert [s["recall_id"] for s in row["steps"]] == [recall_id]
    assert rest[-1].usage is not None and rest[-1].usage.total_tokens == row["tokens"] > 0

    rating = {"response_id": first.id, "score": 1.0}
    receipt = httpx2.post(
        f"{served.url}/feedback", json=rating, headers={"Authorization": f"Bearer {KEY_OF['alice']}"}, timeout=30
    ).json()
    assert receipt["applied"] is True and receipt["reinforced"] == 2  # the streamed answer's recalled memories


def test_a_client_that_hangs_up_mid_answer_leaves_a_recorded_response(served: Served, held: HeldChat) -> None:
    stream = served.client("alice").chat.completions.create(model="codes", messages=USER, stream=True)
    chunks = iter(stream)
    next(chunks)
    first = next(chunks)
    stream.close()  # the app gives up after the first word
    held.gate.set()

    row = recorded(served, first.id)
    assert row["answer"].startswith("The ") and ANSWER.startswith(row["answer"]) and row["answer"] != ANSWER
    assert row["steps"][-1]["finish"] == "cancelled"  # the cut is noted
    rating = {"response_id": first.id, "score": 0.0}
    headers = {"Authorization": f"Bearer {KEY_OF['alice']}"}
    assert httpx2.post(f"{served.url}/feedback", json=rating, headers=headers, timeout=30).json()["applied"] is True


def test_a_model_failing_mid_answer_ends_the_stream_with_an_error_event(served: Served, held: HeldChat) -> None:
    held.fail = True
    body = {"model": "codes", "messages": USER, "stream": True}
    headers = {"Authorization": f"Bearer {KEY_OF['alice']}"}
    response = httpx2.post(f"{served.url}/chat/completions", content=json.dumps(body), headers=headers, timeout=30)
    assert response.status_code == 200  # the first word was sent: the status line went with it
    events = [json.loads(line.removeprefix("data: ")) for line in response.text.splitlines() if line]
    assert events[1]["choices"][0]["delta"]["content"] == "The "
    assert events[-1]["error"]["code"] == "upstream_error" and "fell over" in events[-1]["error"]["message"]
    with pytest.raises(UnknownResponse):  # no answer, no record
        served.deployment.response(events[0]["id"], tenant="alice")


def test_a_failure_before_the_first_word_is_a_plain_http_error(served: Served, held: HeldChat) -> None:
    body = {"model": "codes", "messages": [{"role": "user", "content": "lunch?"}], "stream": True}
    headers = {"Authorization": f"Bearer {KEY_OF['carol']}"}
    response = httpx2.post(f"{served.url}/chat/completions", content=json.dumps(body), headers=headers, timeout=30)
    assert response.status_code == 502 and response.json()["error"]["code"] == "upstream_error"
    body["temperature"], body["tool_choice"] = 0.5, "sometimes"
    assert httpx2.post(f"{served.url}/chat/completions", json=body, headers=headers, timeout=30).status_code == 400
