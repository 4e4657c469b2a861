"""`evolve serve` over a faulting model server: the openai SDK sees 429 with Retry-After, 504 and 502."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support.fake_openai import FakeOpenAIServer, Reply, chat_body, error_body, faults
from tests.support.serve import QUESTION, Served, serving, write_serve_spec

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": QUESTION}]


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        yield s


@pytest.fixture(scope="module")
def live(upstream: FakeOpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    model = f'chat = "openai/upstream-model"\nbase_url = "{upstream.url}"\noptions = {{ retries = 0, timeout = 0.3 }}'
    with serving(write_serve_spec(tmp_path_factory.mktemp("faults"), model=model)) as served:
        yield served


def test_a_rate_limited_model_is_429_with_retry_after(upstream: FakeOpenAIServer, live: Served) -> None:
    upstream.script(Reply(429, error_body("slow down", "rate_limit_error"), {"Retry-After": "2.5"}))
    with pytest.raises(openai.RateLimitError) as caught:
        live.client("alice").chat.completions.create(model="codes", messages=USER)
    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "3"  # whole seconds, rounded up
    error = caught.value.body
    assert isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "rate_limit_error" and error["code"] == "rate_limited" and "slow down" in error["message"]


def test_a_rate_limit_without_a_hint_is_429_without_retry_after(upstream: FakeOpenAIServer, live: Served) -> None:
    upstream.script(Reply(429, error_body("slow down", "rate_limit_error")))
    with pytest.raises(openai.RateLimitError) as caught:
        live.client("alice").chat.completions.create(model="codes", messages=USER)
    assert "retry-after" not in caught.value.response.headers


def test_a_model_timeout_is_504(upstream: FakeOpenAIServer, live: Served) -> None:
    upstream.script(faults(slow=0.8)["slow"])
    with pytest.raises(openai.InternalServerError) as caught:
        live.client("alice").chat.completions.create(model="codes", messages=USER)
    assert caught.value.status_code == 504
    assert isinstance(caught.value.body, dict) and caught.value.body["code"] == "upstream_timeout"


@pytest.mark.parametrize("kind", ["server_error", "truncated", "no_choices"])
def test_other_model_failures_are_502(upstream: FakeOpenAIServer, live: Served, kind: str) -> None:
    upstream.script(faults()[kind])
    with pytest.raises(openai.InternalServerError) as caught:
        live.client("alice").chat.completions.create(model="codes", messages=USER)
    assert caught.value.status_code == 502
    assert isinstance(caught.value.body, dict) and caught.value.body["code"] == "upstream_error"


def test_the_server_answers_again_once_the_model_recovers(upstream: FakeOpenAIServer, live: Served) -> None:
    upstream.script(Reply(200, chat_body("4471")))
    completion = live.client("alice").chat.completions.create(model="codes", messages=USER)
    assert completion.choices[0].message.content == "4471"
