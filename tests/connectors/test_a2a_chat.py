"""``a2a/<url>``: a remote A2A agent behind the chat seam, against a plain agent made with the a2a-sdk alone —
what travels (the last user turn, earlier turns and sampling as metadata), what cannot (tools and the like:
a ConfigError), and each failure as the error a caller recovers from."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from connectors import ChatClient, ConfigError, ConnectorError, Message, ProviderTimeout, RateLimited, Tool, load_chat
from connectors.a2a_chat import A2AChat
from tests.support.a2a import ScriptedAgent, plain_agent
from tests.support.extras import ROOT

KEY = "sk-plain-agent-3c9e71d2"
KEY_ENV = "EVOLVE_TEST_PLAIN_AGENT_KEY"
FAILURES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "slow down": (
        "failed",
        "the team's model is rate limited",
        {"evolve.error": {"kind": "RateLimited", "retry_after": 2}},
    ),
    "bad request": (
        "failed",
        "the team cannot take this",
        {"evolve.error": {"kind": "ConfigError", "retryable": False}},
    ),
    "it broke": ("failed", "something broke", {}),
}


def reply(text: str, metadata: dict[str, Any]) -> Any:
    if text in FAILURES:
        return FAILURES[text]
    return ("message", "a message, not a task") if text == "say it in a message" else f"echo: {text}"


@pytest.fixture(scope="module")
def agent() -> ScriptedAgent:
    return ScriptedAgent(reply)


@pytest.fixture(scope="module")
def url(agent: ScriptedAgent) -> Iterator[str]:
    with plain_agent(agent, key=KEY) as live:
        yield live


@pytest.fixture
def chat(url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(KEY_ENV, KEY)
    return load_chat(f"a2a/{url}", api_key_env=KEY_ENV, retries=0)


def test_the_last_user_turn_is_sent_with_the_earlier_turns_and_sampling_as_metadata(
    chat: Any, agent: ScriptedAgent
) -> None:
    conversation = [
        Message("system", "You look codes up."),
        Message("user", "Harbor door code?"),
        Message("assistant", "4471."),
        Message("user", "And the Summit alarm code?"),
    ]
    completion = chat.complete(conversation, temperature=0.2, max_tokens=7, seed=11, stop=["\n"], caller="researcher")
    assert completion.text == "echo: And the Summit alarm code?" and completion.model == chat.name
    text, metadata = agent.seen[-1]
    assert text == "And the Summit alarm code?"
    assert metadata["evolve.context"] == [m.to_dict() for m in conversation[:3]]
    assert metadata["evolve.params"] == {"temperature": 0.2, "max_tokens": 7, "seed": 11, "stop": ["\n"]}


def test_the_speakers_names_travel_with_their_turns(chat: Any, agent: ScriptedAgent) -> None:
    conversation = [
        Message("assistant", "The Harbor file is open.", name="researcher"),
        Message("user", "Code?", name="alice"),
    ]
    chat.complete(conversation)
    _, metadata = agent.seen[-1]
    assert metadata["evolve.context"] == [
        {"role": "assistant", "content": "The Harbor file is open.", "name": "researcher"}
    ]
    assert metadata["evolve.name"] == "alice"


def test_a_reply_that_is_a_message_is_the_answer(chat: Any) -> None:
    assert chat.complete("say it in a message").text == "a message, not a task"


@pytest.mark.parametrize(
    "params",
    [
        {"tools": [Tool("lookup", "Look a code up.", {"type": "object", "properties": {}})]},
        {"response_format": {"type": "json_object"}},
        {"logprobs": True},
        {"adapter": "solver-lora"},
    ],
)
def test_what_an_a2a_agent_cannot_take_is_a_config_error_and_nothing_is_sent(
    chat: Any, agent: ScriptedAgent, params: dict[str, Any]
) -> None:
    sent = len(agent.seen)
    with pytest.raises(ConfigError, match=f"takes none of \\['{next(iter(params))}'\\]"):
        chat.complete("Harbor door code?", **params)
    with pytest.raises(ConfigError, match="last user turn"):
        chat.complete([Message("system", "You look codes up.")])
    assert len(agent.seen) == sent


def test_a_failed_task_recovers_as_the_remote_failure_said(chat: Any) -> None:
    with pytest.raises(RateLimited, match="rate limited") as limited:
        chat.complete("slow down")
    assert limited.value.retry_after == 2.0 and limited.value.retryable
    with pytest.raises(ConnectorError, match="ended failed: the team cannot take this") as refused:
        chat.complete("bad request")
    assert not refused.value.retryable
    with pytest.raises(ConnectorError, match="something broke") as broke:
        chat.complete("it broke")
    assert broke.value.retryable  # no word on it: trying again may help


def test_a_refused_key_is_not_retryable_and_never_shown(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-wrong-key-9a8b7c6d")
    wrong = load_chat(f"a2a/{url}", api_key_env=KEY_ENV, retries=0)
    with pytest.raises(ConnectorError, match=f"refused the key \\(HTTP 401\\); check the key in \\${KEY_ENV}") as e:
        wrong.complete("Harbor door code?")
    assert not e.value.retryable and "sk-wrong" not in str(e.value) and "sk-wrong" not in repr(wrong.backend)


def test_an_unset_key_variable_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"\$EVOLVE_TEST_NO_SUCH_KEY is not set"):
        load_chat("a2a/http://127.0.0.1:9", api_key_env="EVOLVE_TEST_NO_SUCH_KEY")
    with pytest.raises(ConfigError, match="http://host:port"):
        load_chat("a2a/ftp://codes-desk.internal")


def test_an_unreachable_agent_is_retried_then_a_retryable_error() -> None:
    slept: list[float] = []
    chat = ChatClient(A2AChat("http://127.0.0.1:9"), retries=2, sleep=slept.append)  # nothing listens on port 9
    with pytest.raises(ConnectorError, match="cannot reach the agent") as e:
        chat.complete("Harbor door code?")
    assert e.value.retryable and len(slept) == 2


def test_an_agent_slower_than_the_timeout_is_a_provider_timeout() -> None:
    with plain_agent(ScriptedAgent(reply, delay=1.0)) as slow:
        chat = A2AChat(slow, timeout=0.3)
        with pytest.raises(ProviderTimeout, match="did not answer in time"):
            chat.complete([Message("user", "Harbor door code?")])


def test_load_chat_keeps_one_client_per_agent_and_key(url: str, chat: Any) -> None:
    assert load_chat(f"a2a/{url}", api_key=KEY).backend is chat.backend
    assert load_chat(f"a2a/{url}", api_key="sk-another-key-1234").backend is not chat.backend


def test_without_the_a2a_extra_the_error_names_it() -> None:
    code = (
        "import sys; sys.modules['a2a'] = None\n"
        "from connectors import load_chat\n"
        "try:\n    load_chat('a2a/http://127.0.0.1:9')\nexcept Exception as e:\n    print(type(e).__name__, e)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.startswith("ConfigError") and "pip install -e '.[a2a]'" in out
