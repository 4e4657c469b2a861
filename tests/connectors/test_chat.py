"""ChatClient (cache, accounting, retries), request_key, ResponseCache and load_chat."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from connectors import ChatClient, ConfigError, ConnectorError, RateLimited, ResponseCache, load_chat
from connectors.chat import request_key
from connectors.fakes import ScriptedChat
from connectors.types import Completion, Message, Usage


class Flaky:
    """Fails with ``errors`` in turn, then answers "ok"."""

    name = "flaky"

    def __init__(self, errors: Sequence[Exception]) -> None:
        self.errors = list(errors)
        self.calls = 0

    def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return Completion("ok", self.name, Usage(1, 1))


class Batching(ScriptedChat):
    """A scripted model that records whether it was called through ``complete_batch``."""

    def __init__(self) -> None:
        super().__init__(lambda msgs: msgs[-1].content.upper())
        self.batches: list[int] = []

    def complete_batch(self, prompts: Sequence[Sequence[Message]], **params: Any) -> list[Completion]:
        self.batches.append(len(prompts))
        return [self.complete(p, **params) for p in prompts]


def test_request_key_is_canonical_and_sensitive() -> None:
    msgs = [Message("user", "hi")]
    key = request_key("m", msgs, {"temperature": 0.5, "seed": 1})
    assert key == request_key("m", msgs, {"seed": 1, "temperature": 0.5})  # parameter order does not matter
    assert len(key) == 64 and int(key, 16) >= 0
    different = [
        request_key("other", msgs, {"temperature": 0.5, "seed": 1}),
        request_key("m", [Message("user", "hi!")], {"temperature": 0.5, "seed": 1}),
        request_key("m", [Message("system", "hi")], {"temperature": 0.5, "seed": 1}),
        request_key("m", msgs, {"temperature": 0.7, "seed": 1}),
        request_key("m", msgs, {"temperature": 0.5, "seed": 1}, sample_index=1),
    ]
    assert key not in different and len(set(different)) == len(different)


def test_samples_do_not_share_a_cache_line() -> None:
    backend = ScriptedChat(["first", "second", "third"])
    chat = ChatClient(backend, cache=ResponseCache())

    a = chat.complete("q", temperature=0.7, sample_index=0)
    b = chat.complete("q", temperature=0.7, sample_index=1)
    again = chat.complete("q", temperature=0.7, sample_index=0)

    assert (a.text, b.text) == ("first", "second")
    assert again.text == "first" and again.cached and not a.cached
    assert len(backend.calls) == 2


def test_changing_temperature_misses_the_cache() -> None:
    backend = ScriptedChat(["cold", "warm"])
    chat = ChatClient(backend, cache=ResponseCache())
    assert chat.complete("q", temperature=0.0).text == "cold"
    assert chat.complete("q", temperature=1.0).text == "warm"
    assert len(backend.calls) == 2


def test_seed_is_offset_by_sample_index() -> None:
    backend = ScriptedChat(["x"])
    chat = ChatClient(backend)
    chat.complete("q", seed=10, sample_index=0)
    chat.complete("q", seed=10, sample_index=3)
    assert [params["seed"] for _, params in backend.calls] == [10, 13]


def test_sqlite_cache_survives_a_new_client(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "responses.db"
    first = ChatClient(
        ScriptedChat([Completion("stored", "m", Usage(3, 2, 0.01), (-0.5,), "stop")]), cache=ResponseCache(path)
    )
    first.complete("q")

    backend = ScriptedChat(["fresh"])
    replayed = ChatClient(backend, cache=ResponseCache(path)).complete("q")

    assert (replayed.text, replayed.usage, replayed.logprobs, replayed.finish_reason) == (
        "stored",
        Usage(3, 2, 0.01),
        (-0.5,),
        "stop",
    )
    assert replayed.cached and backend.calls == []


def test_usage_is_accounted_per_caller() -> None:
    chat = ChatClient(ScriptedChat(["one two"]))
    chat.complete("a b c", caller="planner")
    chat.complete("d", caller="planner")
    chat.complete("e f", caller="critic")
    assert chat.usage_by_caller["planner"] == Usage(4, 4)
    assert chat.usage_by_caller["critic"] == Usage(2, 2)
    assert chat.usage == Usage(6, 6) and chat.calls == 3


def test_cache_hits_cost_nothing() -> None:
    chat = ChatClient(ScriptedChat(["x"]), cache=ResponseCache())
    chat.complete("q", caller="a")
    chat.complete("q", caller="b")
    assert "b" not in chat.usage_by_caller and chat.calls == 1


def test_retries_until_success() -> None:
    sleeps: list[float] = []
    backend = Flaky([ConnectorError("blip", retryable=True), RateLimited("slow", retry_after=4.0)])
    assert ChatClient(backend, retries=2, sleep=sleeps.append).complete("q").text == "ok"
    assert backend.calls == 3
    assert len(sleeps) == 2 and sleeps[1] >= 4.0


def test_retries_respect_the_limit() -> None:
    sleeps: list[float] = []
    backend = Flaky([ConnectorError(f"blip {i}", retryable=True) for i in range(5)])
    with pytest.raises(ConnectorError, match="blip 2"):
        ChatClient(backend, retries=2, sleep=sleeps.append).complete("q")
    assert backend.calls == 3 and len(sleeps) == 2


def test_backoff_grows_and_is_capped() -> None:
    sleeps: list[float] = []
    backend = Flaky([ConnectorError("blip", retryable=True)] * 6)
    ChatClient(backend, retries=6, backoff=1.0, max_backoff=4.0, sleep=sleeps.append).complete("q")
    assert all(0.5 * min(4.0, 2.0**i) <= s <= min(4.0, 2.0**i) for i, s in enumerate(sleeps))


def test_non_retryable_errors_raise_at_once() -> None:
    sleeps: list[float] = []
    backend = Flaky([ConnectorError("bad request", retryable=False)])
    with pytest.raises(ConnectorError, match="bad request"):
        ChatClient(backend, retries=5, sleep=sleeps.append).complete("q")
    assert backend.calls == 1 and sleeps == []


def test_negative_retries_is_config_error() -> None:
    with pytest.raises(ConfigError, match="retries"):
        ChatClient(ScriptedChat(["x"]), retries=-1)


def test_batch_goes_to_complete_batch_and_keeps_order() -> None:
    backend = Batching()
    chat = ChatClient(backend, cache=ResponseCache())
    chat.complete("b")  # cached: the batch below only sends the two misses
    out = chat.complete_batch(["a", "b", "c"])
    assert [c.text for c in out] == ["A", "B", "C"]
    assert backend.batches == [2]


def test_wrong_number_of_completions_is_an_error() -> None:
    class Short(Batching):
        def complete_batch(self, prompts: Sequence[Sequence[Message]], **params: Any) -> list[Completion]:
            return []

    with pytest.raises(ConnectorError, match="0 completions for 2 prompts"):
        ChatClient(Short()).complete_batch(["a", "b"])


def test_client_is_safe_across_threads() -> None:
    chat = ChatClient(ScriptedChat(["w"]))
    threads = [threading.Thread(target=lambda: [chat.complete("x", caller="t") for _ in range(50)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert chat.calls == 200 and chat.usage_by_caller["t"] == Usage(200, 200)


@pytest.mark.parametrize(
    ("spec", "match"),
    [("nope/model", "unknown chat provider 'nope'"), ("gpt-4o", "provider/model"), ("", "provider/model")],
)
def test_load_chat_rejects_bad_specs(spec: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_chat(spec)


def test_load_chat_passes_options_to_the_backend() -> None:
    chat = load_chat("fake/scripted", replies=["hello"], retries=0)
    assert isinstance(chat, ChatClient) and chat.retries == 0
    assert chat.complete("hi").text == "hello" and chat.name == "scripted"


class ServesAdapters(ScriptedChat):
    serves_adapters = True


def test_serves_adapters_is_asked_of_the_backend_with_a_default_of_false() -> None:
    from unittest.mock import MagicMock

    from connectors.local_chat import LocalChat
    from connectors.openai_chat import OpenAIChat
    from connectors.vllm_chat import VLLMChat

    assert ChatClient(ServesAdapters(["x"], name="openai/looks-remote")).serves_adapters is True
    assert ChatClient(ScriptedChat(["x"], name="local/looks-local")).serves_adapters is False  # not by name
    assert load_chat("openai/gpt-4o-mini", api_key="sk-test", base_url="http://127.0.0.1:9/v1").serves_adapters is False
    assert ChatClient(MagicMock(name="mock")).serves_adapters is False  # an auto-made attribute is no capability
    assert LocalChat.serves_adapters is True and VLLMChat.serves_adapters is True
    assert not hasattr(OpenAIChat, "serves_adapters")
