"""An app rates what it got from ``evolve serve`` with whatever client it used: the ``openai`` SDK whole
or streamed, LangChain's ``ChatOpenAI`` invoked or streamed (with ``include_response_headers=True``, the
only way a streamed LangChain answer keeps the id); each rating reinforces that answer's recalls."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from langchain_openai import ChatOpenAI

from connectors import ConfigError
from evolve.serve.rating import HEADER, rate, response_id
from tests.support.serve import KEY_OF, QUESTION, Served

USER: Any = [{"role": "user", "content": QUESTION}]


def chat_openai(served: Served, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(base_url=served.url, api_key=KEY_OF["alice"], model="codes", max_retries=0, **kwargs)  # type: ignore[arg-type]


def test_the_openai_sdks_answers_whole_and_streamed_are_rated(served: Served) -> None:
    client = openai.OpenAI(base_url=served.url, api_key=KEY_OF["alice"], max_retries=0)
    whole = client.chat.completions.with_raw_response.create(model="codes", messages=USER)
    assert whole.headers[HEADER] == whole.parse().id
    timings = dict(part.strip().split(";dur=") for part in whole.headers["server-timing"].split(","))
    assert set(timings) == {"recall", "model", "answer"} and 0 < float(timings["recall"]) <= float(timings["answer"])
    assert 0 < float(timings["model"]) <= float(timings["answer"])
    assert rate(served.url, KEY_OF["alice"], whole.parse(), 1.0)["applied"]
    chunks = list(client.chat.completions.create(model="codes", messages=USER, stream=True))
    receipt = rate(served.url, KEY_OF["alice"], chunks[-1], 0.0, comment="wrong code", key="reviewer-1")
    assert receipt["applied"] and receipt["reward"] == -1.0
    assert served.deployment.response(chunks[0].id, tenant="alice")["answer"] == "".join(
        c.choices[0].delta.content or "" for c in chunks if c.choices
    )


def test_langchain_answers_invoked_and_streamed_are_rated(served: Served) -> None:
    invoked = chat_openai(served).invoke(QUESTION)
    assert response_id(invoked) == invoked.response_metadata["id"] != invoked.id
    assert rate(served.url, KEY_OF["alice"], invoked, 1.0)["applied"]

    streamed = None
    for chunk in chat_openai(served, include_response_headers=True).stream(QUESTION):
        streamed = chunk if streamed is None else streamed + chunk
    assert streamed is not None and response_id(streamed).startswith("chatcmpl-")
    assert served.deployment.response(response_id(streamed), tenant="alice")["answer"] == streamed.content
    assert rate(served.url, KEY_OF["alice"], streamed, 1.0)["reinforced"] >= 0


def test_an_answer_without_an_id_and_a_refused_rating_say_why(served: Served) -> None:
    streamed = None
    for chunk in chat_openai(served).stream(QUESTION):
        streamed = chunk if streamed is None else streamed + chunk
    with pytest.raises(ConfigError, match="include_response_headers=True"):
        response_id(streamed)
    with pytest.raises(ConfigError, match=r"refused the rating \(404\)"):
        rate(served.url, KEY_OF["bob"], chat_openai(served).invoke(QUESTION), 1.0)  # alice's answer, bob's key
    with pytest.raises(ConfigError, match="expected an answer of evolve serve"):
        response_id(42)
