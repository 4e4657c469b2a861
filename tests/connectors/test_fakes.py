"""ScriptedChat and ReplayChat: the public fakes users test their own agents with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from connectors import ChatClient, ConfigError, ConnectorError, ReplayChat, ScriptedChat, load_chat
from connectors.types import Completion, Message, Usage


def ask(model: ScriptedChat | ReplayChat, text: str, **params: object) -> Completion:
    return model.complete([Message("user", text)], **params)


def test_list_answers_in_order_then_repeats_the_last() -> None:
    chat = ScriptedChat(["a", "b"])
    assert [ask(chat, "q").text for _ in range(4)] == ["a", "b", "b", "b"]


def test_list_cycles_when_asked() -> None:
    chat = ScriptedChat(["a", "b"], cycle=True)
    assert [ask(chat, "q").text for _ in range(5)] == ["a", "b", "a", "b", "a"]


def test_dict_matches_a_substring_of_the_last_user_message() -> None:
    chat = ScriptedChat({"France": "Paris", "Japan": "Tokyo"}, default="unknown")
    messages = [Message("system", "Japan"), Message("user", "Capital of France?")]
    assert chat.complete(messages).text == "Paris"
    assert ask(chat, "Capital of Peru?").text == "unknown"


def test_dict_without_default_raises_on_a_miss() -> None:
    with pytest.raises(ConnectorError, match="no reply for"):
        ask(ScriptedChat({"France": "Paris"}), "Capital of Peru?")


def test_callable_sees_the_messages_and_may_return_a_completion() -> None:
    chat = ScriptedChat(lambda msgs: f"echo: {msgs[-1].content}")
    assert ask(chat, "hi").text == "echo: hi"
    full = Completion("x", "custom", Usage(7, 1, 0.5), finish_reason="length")
    assert ask(ScriptedChat(lambda msgs: full), "hi") is full


def test_calls_are_recorded_with_params() -> None:
    chat = ScriptedChat(["ok"])
    ask(chat, "first", temperature=0.2)
    ask(chat, "second")
    assert [(m[-1].content, p) for m, p in chat.calls] == [("first", {"temperature": 0.2}), ("second", {})]


def test_usage_counts_words() -> None:
    c = ask(ScriptedChat(["three word answer"]), "two words")
    assert c.usage == Usage(2, 3) and c.finish_reason == "stop"


def test_bad_scripts() -> None:
    with pytest.raises(ConfigError, match="not a single string"):
        ScriptedChat("just a string")  # type: ignore[arg-type]
    with pytest.raises(ConnectorError, match="empty script"):
        ask(ScriptedChat([]), "q")


def test_replay_records_then_replays(tmp_path: Path) -> None:
    golden = tmp_path / "golden" / "answers.jsonl"
    inner = ScriptedChat(lambda msgs: msgs[-1].content[::-1], name="inner")
    recorder = ReplayChat(golden, record=inner)
    assert ask(recorder, "abc", temperature=0).text == "cba"
    assert ask(recorder, "abc", temperature=0).text == "cba"
    assert len(inner.calls) == 1  # the second call was answered from the file
    assert len(golden.read_text().splitlines()) == 1

    replay = ReplayChat(golden, name="inner")
    c = ask(replay, "abc", temperature=0)
    assert (c.text, c.usage) == ("cba", Usage(1, 1, 0.0))


def test_replay_misses_are_errors(tmp_path: Path) -> None:
    golden = tmp_path / "answers.jsonl"
    ReplayChat(golden, record=ScriptedChat(["x"])).complete([Message("user", "known")], temperature=0)
    replay = ReplayChat(golden, name="scripted")
    with pytest.raises(ConnectorError, match="no golden answer"):
        ask(replay, "known", temperature=1)  # different parameters, different request
    with pytest.raises(ConnectorError, match="no golden answer"):
        ask(replay, "unknown", temperature=0)


def test_replay_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        ReplayChat(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"key": "k", "text": "t"}) + "\nnot json\n")
    with pytest.raises(ConfigError, match="bad.jsonl:2"):
        ReplayChat(bad)


def test_fakes_through_load_chat(tmp_path: Path) -> None:
    scripted = load_chat("fake/scripted", replies={"ping": "pong"}, default="?")
    assert scripted.complete("ping").text == "pong"
    assert isinstance(scripted, ChatClient) and isinstance(scripted.backend, ScriptedChat)

    golden = tmp_path / "g.jsonl"
    ReplayChat(golden, record=ScriptedChat(["recorded"]), name="replay").complete([Message("user", "q")])
    assert load_chat("fake/replay", path=golden).complete("q").text == "recorded"
    with pytest.raises(ConfigError, match="path="):
        load_chat("fake/replay")
    with pytest.raises(ConfigError, match="unknown fake chat model"):
        load_chat("fake/other")


def test_dict_replies_can_match_the_system_prompt() -> None:

    chat = ScriptedChat({"be brief": "Paris."}, default="The capital of France is Paris.", match="all")
    brief = chat.complete([Message("system", "Always be brief."), Message("user", "Capital of France?")])
    plain = chat.complete([Message("system", "Be helpful."), Message("user", "Capital of France?")])
    assert (brief.text, plain.text) == ("Paris.", "The capital of France is Paris.")
    with pytest.raises(ConfigError, match="match must be"):
        ScriptedChat({}, match="system")


def test_a_delay_makes_every_call_wait_and_bad_delays_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("connectors.fakes.time.sleep", slept.append)
    chat = load_chat("fake/scripted", replies=["a"], delay=0.25)
    chat.complete([Message("user", "q")])
    chat.complete([Message("user", "q")])
    assert slept == [0.25, 0.25]
    for bad in (-1, float("inf"), "1s"):
        with pytest.raises(ConfigError, match="delay must be a number of seconds"):
            ScriptedChat(["a"], delay=bad)  # type: ignore[arg-type]
