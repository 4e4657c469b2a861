"""Streamed answers through the chat seam: ``StreamedCompletion``, ``ChatClient.stream`` (retries only before
the first delta, usage at the end, no cache, a whole answer for backends and requests that cannot stream),
``ScriptedChat.stream`` and ``Coalescing``, which lets a stream pass straight to its model."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from connectors import ChatClient, Completion, ConnectorError, Message, ResponseCache, Tool, Usage
from connectors.coalesce import Coalescing
from connectors.fakes import ReplayChat, ScriptedChat
from connectors.streaming import CANCELLED, StreamedCompletion, sendable, split_words

ANSWER = "The door code is 4471."


class FlakyStream(ScriptedChat):
    """Streams ``ANSWER``; its first ``fail_open`` streams fail before any text, and with ``fail_after`` a
    stream fails after that many deltas."""

    def __init__(self, fail_open: int = 0, fail_after: int | None = None) -> None:
        super().__init__([ANSWER])
        self.fail_open, self.fail_after, self.opened = fail_open, fail_after, 0

    def pieces(self, text: str) -> Iterator[str]:
        self.opened += 1
        if self.opened <= self.fail_open:
            raise ConnectorError("the server is busy", retryable=True)
        for i, piece in enumerate(split_words(text)):
            if i == self.fail_after:
                raise ConnectorError("the connection broke off", retryable=True)
            yield piece


def client(backend: Any, **kwargs: Any) -> ChatClient:
    return ChatClient(backend, sleep=lambda s: None, **kwargs)


def test_a_stream_gives_the_deltas_then_the_completion_and_accounts_its_usage_at_the_end() -> None:
    chat = client(ScriptedChat([ANSWER]))
    stream = chat.stream("Harbor code?", caller="solver")
    assert chat.usage_by_caller["solver"] == Usage()  # nothing accounted while it runs
    deltas = list(stream)
    assert deltas == ["The ", "door ", "code ", "is ", "4471."] and stream.completion is not None
    assert stream.completion.text == ANSWER and stream.completion.finish_reason == "stop"
    assert chat.usage_by_caller["solver"] == stream.completion.usage and chat.calls == 1


def test_closing_a_stream_keeps_what_was_read_and_accounts_it() -> None:
    chat = client(ScriptedChat([ANSWER]))
    stream = chat.stream("Harbor code?", caller="solver")
    assert next(stream) + next(stream) == "The door "
    stream.close()
    assert stream.completion is not None and stream.completion.text == "The door "
    assert stream.completion.finish_reason == CANCELLED
    assert chat.usage_by_caller["solver"].completion_tokens == 2  # the words sent, not the whole reply
    assert list(stream) == [] and stream.completion.text == "The door "  # a closed stream stays closed


def test_a_failure_before_the_first_delta_is_retried_and_raised_at_open() -> None:
    backend = FlakyStream(fail_open=2)
    assert "".join(client(backend, retries=2).stream("Harbor code?")) == ANSWER and backend.opened == 3
    with pytest.raises(ConnectorError, match="busy"):
        client(FlakyStream(fail_open=5), retries=1).stream("Harbor code?")  # raised opening, not reading


def test_a_failure_after_text_was_sent_is_never_retried() -> None:
    backend = FlakyStream(fail_after=2)
    chat = client(backend, retries=3)
    stream = chat.stream("Harbor code?", caller="solver")
    assert next(stream) + next(stream) == "The door "
    with pytest.raises(ConnectorError, match="broke off"):
        next(stream)
    assert backend.opened == 1 and stream.completion is None and chat.usage_by_caller["solver"] == Usage()


def test_streams_skip_the_response_cache_and_offset_the_seed_by_sample_index() -> None:
    backend, cache = ScriptedChat([ANSWER]), ResponseCache()
    chat = client(backend, cache=cache)
    list(chat.stream("Harbor code?", seed=7, sample_index=2))
    list(chat.stream("Harbor code?", seed=7, sample_index=2))
    assert len(backend.calls) == 2 and cache._mem == {}
    assert backend.calls[0][1]["seed"] == 9


def test_a_backend_that_cannot_stream_sends_its_whole_answer_as_one_delta(tmp_path: Any) -> None:
    golden = tmp_path / "golden.jsonl"
    ReplayChat(golden, record=ScriptedChat([ANSWER])).complete([Message("user", "Harbor code?")])
    chat = client(ReplayChat(golden, name="scripted"))  # the key holds the recording model's name
    stream = chat.stream("Harbor code?", caller="solver")
    assert list(stream) == [ANSWER] and stream.completion is not None and stream.completion.text == ANSWER
    assert chat.calls == 1


def test_a_request_with_tools_is_answered_whole_with_its_calls() -> None:
    def door(warehouse: str) -> str:
        """The door code of a warehouse."""
        return "4471"

    backend = ScriptedChat(["[door(warehouse='Harbor')]"])
    stream = client(backend).stream("Harbor code?", tools=[Tool.from_function(door)], tool_choice="auto")
    assert list(stream) == ["[door(warehouse='Harbor')]"] and stream.completion is not None
    assert [(c.name, c.arguments) for c in stream.completion.tool_calls] == [("door", {"warehouse": "Harbor"})]
    assert [t.name for t in backend.calls[0][1]["tools"]] == ["door"]  # the tools reached the model


def test_a_stream_through_coalescing_goes_straight_to_the_model_without_a_batch() -> None:
    model = ScriptedChat([ANSWER])
    model.tools_each = True  # type: ignore[attr-defined]  # as a local model says
    wrapper = Coalescing(model, window=0.0)
    chat = client(wrapper)
    assert list(chat.stream("Harbor code?"))[-1] == "4471." and wrapper.batches == []
    assert chat.complete("Harbor code?").text == ANSWER and wrapper.batches == [1]


def test_the_completion_is_always_the_text_the_reader_got() -> None:
    def deltas() -> Iterator[str]:
        yield from ("", "4", "", "471")

    stream = StreamedCompletion(deltas(), lambda text, cut: Completion("something else", "m", finish_reason="stop"))
    assert list(stream.start()) == ["4", "471"]  # empty deltas are skipped
    assert stream.completion is not None and stream.completion.text == "4471"


def test_on_end_runs_once_even_when_added_after_the_end() -> None:
    seen: list[str] = []
    stream = StreamedCompletion.whole(Completion(ANSWER, "m"))
    stream.on_end(lambda c: seen.append(c.text))
    list(stream)
    stream.close()
    stream.on_end(lambda c: seen.append("late " + c.text))
    assert seen == [ANSWER, "late " + ANSWER]


@pytest.mark.parametrize(
    ("text", "stop", "expected"),
    [
        ("The code is 44", ["\n\n"], (14, False)),
        ("The code\n", ["\n\n"], (8, False)),  # "\n" may become the stop string
        ("The code\n\nmore", ["\n\n"], (8, True)),
        ("ab#", ["###", "#!"], (2, False)),
        ("x##", ["###", "#"], (1, True)),
        ("caf\ufffd", [], (3, False)),  # half of a multi-byte character waits for its other half
        ("", ["###"], (0, False)),
    ],
)
def test_sendable_holds_back_what_could_still_change(text: str, stop: Sequence[str], expected: tuple) -> None:
    assert sendable(text, stop) == expected
