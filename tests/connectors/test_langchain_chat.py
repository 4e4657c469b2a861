"""The ``langchain/…`` provider: any LangChain chat model through ``load_chat`` and the one ChatClient."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain_core", reason="the langchain extra (pip install -e '.[langchain]') is not installed")

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.language_models.fake_chat_models import (  # noqa: E402
    FakeListChatModel,
    FakeMessagesListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatResult  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402

from connectors import ChatClient, load_chat  # noqa: E402
from connectors.errors import ConfigError, ConnectorError, ProviderTimeout, RateLimited  # noqa: E402
from connectors.langchain_chat import LangChainChat, from_langchain, to_langchain, translate_error  # noqa: E402
from connectors.types import Message, Usage  # noqa: E402
from tests.support.extras import import_without  # noqa: E402
from tests.support.fake_openai import FakeOpenAIServer, Reply, chat_body, error_body  # noqa: E402


class Seen(BaseCallbackHandler):
    """Records what LangChain handed the chat model: its messages and invocation parameters."""

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.params: list[dict[str, Any]] = []

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.messages.append(messages[0])
        self.params.append(kwargs.get("invocation_params") or {})


def test_a_fake_chat_model_answers_through_load_chat_with_usage_and_finish_reason() -> None:
    reply = AIMessage(
        content="Paris",
        usage_metadata={"input_tokens": 12, "output_tokens": 2, "total_tokens": 14},
        response_metadata={"finish_reason": "stop"},
    )
    chat = load_chat("langchain/fake-geo", model=FakeMessagesListChatModel(responses=[reply]))

    out = chat.complete("What is the capital of France?", caller="geo")

    assert isinstance(chat, ChatClient) and chat.name == "langchain/fake-geo"
    assert (out.text, out.model, out.usage, out.finish_reason) == ("Paris", "langchain/fake-geo", Usage(12, 2), "stop")
    assert chat.usage_by_caller["geo"] == Usage(12, 2) and chat.calls == 1


def test_roles_map_to_langchain_messages_and_sampling_parameters_pass_through() -> None:
    seen = Seen()
    model = FakeListChatModel(responses=["ok"], callbacks=[seen])
    chat = load_chat("langchain/fake", model=model)
    prompt = [
        Message("system", "Be brief."),
        Message("user", "Hi"),
        Message("assistant", "Hello!"),
        Message("user", "2+2?"),
    ]

    assert chat.complete(prompt, temperature=0.2, stop=["\n"], max_tokens=None).text == "ok"

    (messages,) = seen.messages
    assert [type(m) for m in messages] == [SystemMessage, HumanMessage, AIMessage, HumanMessage]
    assert [m.content for m in messages] == ["Be brief.", "Hi", "Hello!", "2+2?"]
    assert seen.params[0]["temperature"] == 0.2 and seen.params[0]["stop"] == ["\n"]
    assert "max_tokens" not in seen.params[0]  # None means "not set", not a value to send


def test_a_message_with_no_usage_counts_zero_tokens() -> None:
    chat = load_chat("langchain/fake", model=GenericFakeChatModel(messages=iter(["plain"])))
    out = chat.complete("hi")
    assert (out.text, out.usage, out.finish_reason) == ("plain", Usage(), None)


def test_chat_openai_through_the_provider_with_a_real_429_and_retry_after(openai_server: FakeOpenAIServer) -> None:
    ChatOpenAI = pytest.importorskip(
        "langchain_openai", reason="langchain-openai (dev extra) is not installed"
    ).ChatOpenAI

    openai_server.script(
        Reply(429, error_body("slow down", "rate_limit_error"), headers={"Retry-After": "7"}),
        Reply(200, chat_body("after the wait", prompt_tokens=9, completion_tokens=3)),
    )
    model = ChatOpenAI(base_url=openai_server.url, api_key="sk-test", model="test-model", max_retries=0)
    sleeps: list[float] = []
    chat = ChatClient(LangChainChat("openai-via-langchain", model=model), retries=2, sleep=sleeps.append)

    out = chat.complete("hi")

    assert (out.text, out.usage) == ("after the wait", Usage(9, 3))
    assert sleeps == [pytest.approx(7.0)] and len(openai_server.requests) == 2


class Failing(BaseChatModel):
    """A chat model whose provider SDK raises ``error`` (LangChain passes such errors through)."""

    error: Any = None

    @property
    def _llm_type(self) -> str:
        return "failing"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        raise self.error


class RateLimitError(Exception):
    """Named as the anthropic and mistral SDKs name theirs."""


class StatusError(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


@pytest.mark.parametrize(
    ("error", "kind", "retryable"),
    [
        (RateLimitError("too many requests"), RateLimited, True),
        (StatusError(429), RateLimited, True),
        (TimeoutError("read timed out"), ProviderTimeout, True),
        (StatusError(408), ProviderTimeout, True),
        (StatusError(503), ConnectorError, True),
        (ConnectionError("refused"), ConnectorError, True),
        (StatusError(400), ConnectorError, False),
        (ValueError("bad request shape"), ConnectorError, False),
    ],
)
def test_provider_errors_become_ours_by_how_the_caller_recovers(error: Exception, kind: type, retryable: bool) -> None:
    sleeps: list[float] = []
    chat = ChatClient(LangChainChat("failing", model=Failing(error=error)), retries=1, sleep=sleeps.append)
    with pytest.raises(ConnectorError) as info:
        chat.complete("hi")
    assert type(info.value) is kind and info.value.retryable is retryable
    assert len(sleeps) == (1 if retryable else 0)  # retried once, then given up
    assert isinstance(info.value.__cause__, type(error)) and "langchain/failing" in str(info.value)


def test_retry_after_is_read_from_the_errors_response() -> None:
    class Response:
        status_code = 429
        headers = {"retry-after": "4"}

    error = StatusError(429)
    error.response = Response()  # type: ignore[attr-defined]
    translated = translate_error(error, "langchain/x")
    assert isinstance(translated, RateLimited) and translated.retry_after == 4.0


@pytest.mark.parametrize(
    ("spec", "kwargs"),
    [
        ("langchain/fake", {}),  # no model
        ("langchain/fake", {"model": "gpt-4o"}),  # a name, not a model object
        ("langchain/", {"model": FakeListChatModel(responses=["x"])}),  # no label
    ],
)
def test_the_provider_needs_a_label_and_a_model_object(spec: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="langchain"):
        load_chat(spec, **kwargs)


def test_langchain_input_maps_to_our_messages() -> None:
    prompt = ChatPromptTemplate.from_messages([("system", "Be {tone}."), ("user", "{q}")]).invoke(
        {"tone": "brief", "q": "hi"}
    )
    assert from_langchain(prompt) == [Message("system", "Be brief."), Message("user", "hi")]
    assert from_langchain("hello") == [Message("user", "hello")]
    assert from_langchain([("human", "a"), {"role": "assistant", "content": "b"}, Message("user", "c")]) == [
        Message("user", "a"), Message("assistant", "b"), Message("user", "c"),
    ]  # fmt: skip
    blocks = HumanMessage(content=[{"type": "text", "text": "look"}, {"type": "text", "text": " here"}])
    assert from_langchain([blocks]) == [Message("user", "look here")]
    named = from_langchain([AIMessage("The Harbor file is open.", name="researcher"), HumanMessage("Code?")])
    assert [m.name for m in named] == ["researcher", None]
    assert [m.name for m in to_langchain(named)] == ["researcher", None]
    with pytest.raises(ConfigError, match="tool"):
        from_langchain([ToolMessage(content="42", tool_call_id="c1")])
    with pytest.raises(ConfigError, match="empty"):
        from_langchain([])


def test_without_the_extra_the_provider_names_it() -> None:
    out = import_without("langchain_core", "connectors.langchain_chat")
    assert out.startswith("ConfigError") and "pip install -e '.[langchain]'" in out
    assert import_without("langchain_core", "connectors") == "imported"
