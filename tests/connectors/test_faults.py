"""Every fault a model server shows, through the real openai SDK: what the caller gets and how often we retry.

The contract, per fault (``retries`` is the client's budget; requests = what the server saw):

| fault | caller gets | retried |
|---|---|---|
| 429 + Retry-After | the answer after waiting Retry-After, or ``RateLimited`` when the budget runs out | yes |
| 429 with Retry-After over ``max_retry_after`` | ``RateLimited`` at once | no |
| 500 | ``ConnectorError(retryable=True)`` when the budget runs out | yes |
| slower than ``timeout`` | ``ProviderTimeout`` | yes |
| 200 with JSON cut short | ``ConnectorError(retryable=True)`` "does not parse" | yes |
| connection dropped mid-body | ``ConnectorError(retryable=True)`` | yes |
| empty content ``""`` | an empty ``Completion`` (the model said nothing; the environment scores it) | no |
| no choices | ``ConnectorError(retryable=False)`` naming the model | no |
| body over ``max_response_bytes`` | ``ConnectorError(retryable=False)`` naming the cap, memory bounded | no |
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Iterator

import pytest

from connectors import ChatClient, ConnectorError, ProviderTimeout, RateLimited, load_chat
from tests.support.fake_openai import FakeOpenAIServer, Reply, chat_body, error_body, faults

TIMEOUT = 0.3
FAULTS = faults(retry_after=0.05, slow=TIMEOUT + 0.4, enormous=8 << 20)
OK = Reply(200, chat_body("1234"))


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        yield s


def client(server: FakeOpenAIServer, retries: int, **kwargs: object) -> ChatClient:
    return load_chat("openai/test-model", base_url=server.url, retries=retries, timeout=TIMEOUT, **kwargs)


RETRIED = {
    "server_error": (ConnectorError, "HTTP 500: .*the upstream model crashed"),
    "slow": (ProviderTimeout, "did not answer in time"),
    "truncated": (ConnectorError, "expected a JSON chat completion, got a body that does not parse"),
    "dropped": (ConnectorError, "openai/test-model"),
    "rate_limited": (RateLimited, "HTTP 429"),
}


@pytest.mark.parametrize("kind", sorted(RETRIED))
def test_a_transient_fault_is_retried_then_answered(server: FakeOpenAIServer, kind: str) -> None:
    server.script(FAULTS[kind], OK)
    assert client(server, retries=1).complete("hi").text == "1234"
    assert server.kinds == [kind, "ok"]


@pytest.mark.parametrize("kind", sorted(RETRIED))
def test_a_transient_fault_that_lasts_fails_retryable_after_the_budget(server: FakeOpenAIServer, kind: str) -> None:
    error, message = RETRIED[kind]
    server.script(FAULTS[kind], FAULTS[kind], FAULTS[kind], OK)
    with pytest.raises(error, match=message) as caught:
        client(server, retries=1).complete("hi")
    assert caught.value.retryable
    assert len(server.requests) == 2  # one try plus one retry: the budget, never more


def test_429_waits_retry_after_within_the_budget(server: FakeOpenAIServer) -> None:
    wait = Reply(429, error_body("slow down", "rate_limit_error"), {"Retry-After": "0.6"}, kind="rate_limited")
    server.script(wait, wait, OK)
    start = time.monotonic()
    assert client(server, retries=2).complete("hi").text == "1234"
    assert time.monotonic() - start >= 1.2  # both waits honoured, longer than the backoff alone (< 0.5 + 1.0)
    assert len(server.requests) == 3


def test_a_retry_after_longer_than_the_client_waits_is_not_slept_through(server: FakeOpenAIServer) -> None:
    server.script(Reply(429, error_body("come back in an hour"), {"Retry-After": "3600"}), OK)
    start = time.monotonic()
    with pytest.raises(RateLimited) as caught:
        client(server, retries=3).complete("hi")
    assert caught.value.retry_after == pytest.approx(3600)
    assert time.monotonic() - start < 5 and len(server.requests) == 1


def test_an_empty_answer_is_an_empty_completion_not_an_error(server: FakeOpenAIServer) -> None:
    server.script(FAULTS["empty"])
    completion = client(server, retries=2).complete("hi")
    assert completion.text == "" and completion.finish_reason == "stop"
    assert len(server.requests) == 1


def test_no_choices_fails_at_once_naming_the_model(server: FakeOpenAIServer) -> None:
    server.script(FAULTS["no_choices"], OK)
    with pytest.raises(ConnectorError, match="no choices for model 'test-model'") as caught:
        client(server, retries=2).complete("hi")
    assert not caught.value.retryable and len(server.requests) == 1


def test_an_enormous_answer_is_refused_without_holding_it(server: FakeOpenAIServer) -> None:
    server.script(FAULTS["enormous"], OK)
    chat = client(server, retries=2, max_response_bytes=1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(ConnectorError, match="over the cap of 1048576 bytes") as caught:
            chat.complete("hi", max_tokens=16)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # the 8 MiB body was never held: the cap plus a chunk or two
    assert not caught.value.retryable and len(server.requests) == 1
    assert server.requests[0]["json"]["max_tokens"] == 16  # the bound was asked for, and enforced anyway


def test_an_answer_that_declares_a_length_over_the_cap_is_refused_before_reading(server: FakeOpenAIServer) -> None:
    server.script(Reply(200, chat_body("y" * 300_000)))
    with pytest.raises(ConnectorError, match="declared 300"):
        client(server, retries=0, max_response_bytes=100_000).complete("hi")


def test_answers_under_the_cap_pass_untouched(server: FakeOpenAIServer) -> None:
    server.script(Reply(200, chat_body("z" * 50_000)))
    assert client(server, retries=0, max_response_bytes=100_000).complete("hi").text == "z" * 50_000
