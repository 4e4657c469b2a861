"""OpenAIChat against a real OpenAI-compatible HTTP server on 127.0.0.1, driven by the real SDK."""

from __future__ import annotations

import email.utils
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from connectors import ChatClient, ConfigError, ConnectorError, ProviderTimeout, RateLimited, Tool, load_chat
from connectors.openai_chat import OpenAIChat, is_local_url, parse_retry_after, price_of
from connectors.types import Message, Usage
from tests.support.fake_openai import SSE, FakeOpenAIServer, Reply, chat_body, error_body, stream_events


def client_with_sleeps(server: FakeOpenAIServer, sleeps: list[float], **kwargs: object) -> ChatClient:
    backend = load_chat("openai/test-model", base_url=server.url, **kwargs).backend
    return ChatClient(backend, retries=3, sleep=sleeps.append)


def test_answer_with_usage_and_request_params(openai_server: FakeOpenAIServer) -> None:
    openai_server.script(Reply(200, chat_body("Paris", prompt_tokens=12, completion_tokens=2, logprobs=[-0.1, -0.2])))
    chat = load_chat("openai/test-model", base_url=openai_server.url)

    c = chat.complete("Capital of France?", temperature=0.0, max_tokens=5, seed=7, stop=["\n"], caller="geo")

    assert (c.text, c.model, c.finish_reason) == ("Paris", "openai/test-model", "stop")
    assert c.usage == Usage(12, 2, 0.0)
    assert c.logprobs == (-0.1, -0.2)
    assert chat.usage_by_caller["geo"] == Usage(12, 2, 0.0)
    sent = openai_server.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["json"]["model"] == "test-model"
    assert sent["json"]["messages"] == [{"role": "user", "content": "Capital of France?"}]
    assert (sent["json"]["temperature"], sent["json"]["max_tokens"], sent["json"]["seed"]) == (0.0, 5, 7)
    assert sent["json"]["stop"] == ["\n"]
    assert "top_p" not in sent["json"]  # unset parameters are not sent


def test_cost_from_prices(openai_server: FakeOpenAIServer) -> None:
    openai_server.script(Reply(200, chat_body("ok", prompt_tokens=1000, completion_tokens=500)))
    chat = load_chat("openai/test-model", base_url=openai_server.url, prices=(1.0, 2.0))
    assert chat.complete("hi").usage.cost == pytest.approx(0.002)


def test_local_server_needs_no_key(openai_server: FakeOpenAIServer) -> None:
    openai_server.script(Reply(200, chat_body("ok")))
    load_chat("openai/test-model", base_url=openai_server.url).complete("hi")
    assert openai_server.requests[0]["headers"]["authorization"].startswith("Bearer ")


def test_api_key_from_environment(openai_server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-key-1")
    openai_server.script(Reply(200, chat_body("ok")))
    load_chat("openai/test-model", base_url=openai_server.url).complete("hi")
    assert openai_server.requests[0]["headers"]["authorization"] == "Bearer env-key-1"


def test_remote_server_without_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAIChat("gpt-4o-mini", base_url="https://api.example.com/v1")


def test_429_retry_after_is_honoured(openai_server: FakeOpenAIServer) -> None:
    openai_server.script(
        Reply(429, error_body("slow down", "rate_limit_error"), headers={"Retry-After": "7"}),
        Reply(200, chat_body("after the wait")),
    )
    sleeps: list[float] = []
    chat = client_with_sleeps(openai_server, sleeps)

    assert chat.complete("hi").text == "after the wait"
    assert sleeps == [pytest.approx(7.0)]
    assert len(openai_server.requests) == 2


def test_429_raises_rate_limited_when_retries_run_out(openai_server: FakeOpenAIServer) -> None:
    openai_server.script(Reply(429, error_body("slow down"), headers={"Retry-After": "3"}))
    chat = load_chat("openai/test-model", base_url=openai_server.url, retries=0)
    with pytest.raises(RateLimited) as info:
        chat.complete("hi")
    assert info.value.retry_after == pytest.approx(3.0)
    assert info.value.retryable


def test_500_is_retried(openai_server: FakeOpenAIServer) -> None:
    openai_server.script(Reply(500, error_body("boom", "server_error")), Reply(200, chat_body("recovered")))
    sleeps: list[float] = []
    assert client_with_sleeps(openai_server, sleeps).complete("hi").text == "recovered"
    assert len(sleeps) == 1 and len(openai_server.requests) == 2


def test_400_is_not_retried(openai_server: FakeOpenAIServer) -> None:
    openai_server.script(Reply(400, error_body("bad max_tokens")), Reply(200, chat_body("never")))
    sleeps: list[float] = []
    with pytest.raises(ConnectorError, match="400") as info:
        client_with_sleeps(openai_server, sleeps).complete("hi")
    assert not info.value.retryable
    assert sleeps == [] and len(openai_server.requests) == 1


@pytest.mark.parametrize("status", [401, 403])
def test_auth_error_never_shows_the_key(openai_server: FakeOpenAIServer, status: int) -> None:
    secret = "sk-very-secret-key-123"
    openai_server.script(Reply(status, error_body(f"Incorrect API key provided: {secret}", "invalid_request_error")))
    sleeps: list[float] = []
    with pytest.raises(ConnectorError) as info:
        client_with_sleeps(openai_server, sleeps, api_key=secret).complete("hi")
    assert "API key" in str(info.value)
    assert secret not in str(info.value) and "very-secret" not in repr(info.value)
    assert not info.value.retryable and sleeps == []


def test_timeout_is_provider_timeout(openai_server: FakeOpenAIServer) -> None:
    openai_server.script(Reply(200, chat_body("too late"), delay=1.0))
    chat = load_chat("openai/test-model", base_url=openai_server.url, timeout=0.2, retries=0)
    with pytest.raises(ProviderTimeout) as info:
        chat.complete("hi")
    assert info.value.retryable


def test_connection_refused_is_retryable() -> None:
    chat = OpenAIChat("test-model", base_url="http://127.0.0.1:9/v1", timeout=2.0)
    with pytest.raises(ConnectorError) as info:
        chat.complete([Message("user", "hi")])
    assert info.value.retryable


def test_empty_choices_names_the_model(openai_server: FakeOpenAIServer) -> None:
    body = chat_body("x")
    body["choices"] = []
    openai_server.script(Reply(200, body))
    with pytest.raises(ConnectorError, match="test-model"):
        OpenAIChat("test-model", base_url=openai_server.url).complete([Message("user", "hi")])


def test_none_content_names_the_model(openai_server: FakeOpenAIServer) -> None:
    openai_server.script(Reply(200, chat_body(None, finish_reason="content_filter")))
    with pytest.raises(ConnectorError, match="test-model.*content_filter"):
        OpenAIChat("test-model", base_url=openai_server.url).complete([Message("user", "hi")])


def test_parse_retry_after_forms() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after({"Retry-After": "2.5"}) == 2.5
    assert parse_retry_after({"retry-after-ms": "1500"}) == 1.5
    assert parse_retry_after({"Retry-After": email.utils.formatdate(now + 30, usegmt=True)}, now=now) == 30.0
    assert parse_retry_after({"Retry-After": email.utils.formatdate(now - 30, usegmt=True)}, now=now) == 0.0
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://localhost:8000/v1", True),
        ("http://127.0.0.1:11434/v1", True),
        ("http://[::1]:8000/v1", True),
        ("http://10.0.0.5:8000/v1", True),
        ("http://vllm:8000/v1", True),
        ("https://api.openai.com/v1", False),
        ("https://8.8.8.8/v1", False),
    ],
)
def test_is_local_url(url: str, local: bool) -> None:
    assert is_local_url(url) is local


def test_price_of() -> None:
    assert price_of(Usage(2_000_000, 1_000_000), (0.15, 0.6)) == pytest.approx(0.9)
    assert price_of(Usage(10, 10), None) == 0.0


def test_bad_prices_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="prices"):
        OpenAIChat("m", base_url="http://localhost:1/v1", prices=(-1.0, 0.0))


def tool_call_body(*calls: tuple[str, str]) -> dict:
    """A completion whose message asks for tool calls, as an OpenAI-compatible server sends it."""
    body = chat_body(None, finish_reason="tool_calls")
    body["choices"][0]["message"]["tool_calls"] = [
        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}
        for i, (name, args) in enumerate(calls, 1)
    ]
    return body


def test_tools_go_out_as_native_function_calling_and_the_calls_come_back(
    openai_server: FakeOpenAIServer,
) -> None:
    from connectors import Tool, ToolCall

    def book_room(building: str, people: int) -> str:
        """Book a meeting room in the Équipe support — nuit (fr) building."""
        return f"{building}: {people}"

    tool = Tool.from_function(book_room)
    openai_server.script(
        Reply(
            body=tool_call_body(("book_room", '{"building": "Tour Eiffel — B", "people": 4}'), ("book_room", "{oops"))
        )
    )
    chat = ChatClient(OpenAIChat("test-model", base_url=openai_server.url))
    done = chat.complete([Message("user", "Book a room for 4 in Tour Eiffel — B")], tools=[tool], tool_choice="auto")
    sent = openai_server.requests[0]["json"]
    assert sent["tools"] == [tool.spec()] and sent["tool_choice"] == "auto"
    assert done.text == "" and done.finish_reason == "tool_calls"
    assert done.tool_calls == (ToolCall("book_room", {"building": "Tour Eiffel — B", "people": 4}, id="call_1"),)
    assert done.tool_problems[0].startswith("tool 'book_room': arguments are not valid JSON")


def test_a_speakers_name_and_a_strict_tool_reach_the_server(openai_server: FakeOpenAIServer) -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"],
              "additionalProperties": False}  # fmt: skip
    openai_server.script(Reply(body=tool_call_body(("lookup", '{"code": "4471"}'))))
    chat = ChatClient(OpenAIChat("test-model", base_url=openai_server.url))
    said = [Message("assistant", "The Harbor file is open.", name="researcher"), Message("user", "Code?", name="alice")]
    chat.complete(said, tools=[Tool("lookup", "Look a code up.", schema, strict=True)])
    sent = openai_server.requests[0]["json"]
    assert [m.get("name") for m in sent["messages"]] == ["researcher", "alice"]
    assert sent["tools"][0]["function"]["strict"] is True and sent["tools"][0]["function"]["parameters"] == schema


def test_a_cached_answer_keeps_its_tool_calls(openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    from connectors import ResponseCache, Tool

    def lookup(code: str) -> str:
        """Look a facility code up."""
        return code

    tools = [Tool.from_function(lookup)]
    openai_server.script(Reply(body=tool_call_body(("lookup", '{"code": "4471"}'))))
    chat = ChatClient(OpenAIChat("test-model", base_url=openai_server.url), cache=ResponseCache(tmp_path / "c.db"))
    first = chat.complete("Which code?", tools=tools, temperature=0.0)
    again = ChatClient(OpenAIChat("test-model", base_url=openai_server.url), cache=ResponseCache(tmp_path / "c.db"))
    second = again.complete("Which code?", tools=[Tool.from_function(lookup)], temperature=0.0)
    assert second.cached and second.tool_calls == first.tool_calls and len(openai_server.requests) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tool_choice": "auto"}, r"tool_choice='auto' needs tools"),
        ({"tools": [{"type": "function"}]}, "tools must be a list of connectors.Tool"),
        ({"tools": "lookup"}, "tools must be a list of connectors.Tool"),
    ],
)
def test_tools_asked_wrongly_are_refused_before_any_request(
    openai_server: FakeOpenAIServer, kwargs: dict, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        OpenAIChat("test-model", base_url=openai_server.url).complete([Message("user", "hi")], **kwargs)
    assert openai_server.requests == []


# ---- streaming -----------------------------------------------------------------------------------------------


class GatedEvents:
    """A streamed answer whose events after the first ``before`` wait for ``gate``: the reader's first delta
    must arrive while the server is still holding the rest."""

    def __init__(self, events: tuple[bytes, ...], before: int) -> None:
        self.events, self.before, self.gate = events, before, threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        yield b"".join(self.events[: self.before])
        assert self.gate.wait(10), "the test never opened the gate"
        yield from self.events[self.before :]


def test_a_stream_sends_each_delta_as_the_server_sends_it(openai_server: FakeOpenAIServer) -> None:
    body = GatedEvents(stream_events(["Par", "is"], prompt_tokens=12, completion_tokens=2), before=2)
    openai_server.script(Reply(200, body, headers=SSE))
    chat = load_chat("openai/test-model", base_url=openai_server.url, prices=(1.0, 2.0))

    stream = chat.stream("Capital of France?", temperature=0.0, max_tokens=5, caller="geo")
    assert next(stream) == "Par" and stream.completion is None  # the server holds the rest still
    body.gate.set()
    assert list(stream) == ["is"] and stream.completion is not None
    assert (stream.completion.text, stream.completion.finish_reason) == ("Paris", "stop")
    assert stream.completion.usage == Usage(12, 2, (12 * 1.0 + 2 * 2.0) / 1e6) == chat.usage_by_caller["geo"]
    sent = openai_server.requests[0]["json"]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert (sent["temperature"], sent["max_tokens"]) == (0.0, 5)


def test_a_stream_cut_by_max_tokens_says_length(openai_server: FakeOpenAIServer) -> None:
    openai_server.script(Reply(200, stream_events(["Once ", "upon"], finish_reason="length"), headers=SSE))
    stream = load_chat("openai/test-model", base_url=openai_server.url).stream("A story", max_tokens=2)
    assert "".join(stream) == "Once upon" and stream.completion is not None
    assert stream.completion.finish_reason == "length"


def test_a_stream_failing_before_text_is_retried_and_mid_stream_is_raised(openai_server: FakeOpenAIServer) -> None:
    sleeps: list[float] = []
    chat = client_with_sleeps(openai_server, sleeps)
    openai_server.script(
        Reply(500, error_body("busy", "server_error")),
        Reply(200, stream_events(["4471"]), headers=SSE),
    )
    assert "".join(chat.stream("Harbor code?")) == "4471" and len(sleeps) == 1

    cut = stream_events(["The ", "code ", "is ", "4471"])
    openai_server.script(Reply(200, (*cut[:3], b'data: {"error": {"message": "the model crashed"}}\n\n'), headers=SSE))
    stream = chat.stream("Harbor code?")
    assert next(stream) + next(stream) == "The code "
    with pytest.raises(ConnectorError, match="the model crashed"):
        next(stream)
    assert len(openai_server.requests) == 3 and len(sleeps) == 1  # nothing retried after text was sent


def test_a_stream_with_tools_is_asked_whole(openai_server: FakeOpenAIServer) -> None:
    openai_server.script(Reply(200, chat_body("It is 4471.")))
    tool = Tool("door", "A door code.", {"type": "object", "properties": {}})
    stream = load_chat("openai/test-model", base_url=openai_server.url).stream("Harbor?", tools=[tool])
    assert list(stream) == ["It is 4471."]
    assert "stream" not in openai_server.requests[0]["json"] and openai_server.requests[0]["json"]["tools"]
