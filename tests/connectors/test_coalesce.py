"""Concurrent calls to an in-process model become shared batches, and each caller gets its own answer."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from connectors import Completion, ConnectorError, Message, Tool
from connectors.coalesce import Coalescing


class SlowBatchModel:
    """Answers every prompt with its text (and its tools' names); each batch takes 50 ms and is recorded."""

    name = "slow-batch"
    tools_each = True

    def __init__(self, fail: bool = False) -> None:
        self.batches: list[tuple[int, dict[str, Any]]] = []
        self.fail = fail

    def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        return self.complete_batch([messages], **params)[0]

    def complete_batch(self, prompts: Sequence[Sequence[Message]], **params: Any) -> list[Completion]:
        time.sleep(0.05)
        each = params.pop("tools_each", None) or [[] for _ in prompts]
        self.batches.append((len(prompts), params))
        if self.fail:
            raise ConnectorError("the model fell over")
        return [
            Completion(p[-1].content + "".join(f" +{t.name}" for t in tools), self.name)
            for p, tools in zip(prompts, each, strict=True)
        ]


def together(n: int, call: Callable[[int], Any]) -> list[Any]:
    """``call(i)`` for i < n from n threads started at once; results (or exceptions) in order."""
    out: list[Any] = [None] * n
    start = threading.Barrier(n)

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = call(i)
        except Exception as e:
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def ask(text: str) -> list[Message]:
    return [Message("user", text)]


def test_sixteen_concurrent_calls_share_a_few_batches_and_each_gets_its_own_answer() -> None:
    model = SlowBatchModel()
    chat = Coalescing(model, window=0.02, quiet=0.02)
    answers = together(16, lambda i: chat.complete(ask(f"Frage Nr. {i} über Zürich"), max_tokens=8).text)
    assert answers == [f"Frage Nr. {i} über Zürich" for i in range(16)]
    assert sum(n for n, _ in model.batches) == 16 and len(model.batches) <= 3  # not 16 calls one by one


def test_only_calls_with_the_same_parameters_share_and_a_sampled_seed_is_kept() -> None:
    model = SlowBatchModel()
    chat = Coalescing(model, window=0.05, quiet=0.05)
    params: list[dict[str, Any]] = [
        {"max_tokens": 8, "seed": 1},  # greedy: the seed does not matter, these two share
        {"max_tokens": 8, "seed": 2},
        {"max_tokens": 9},
        {"max_tokens": 8, "temperature": 0.8, "seed": 3},  # sampled: each seed its own batch
        {"max_tokens": 8, "temperature": 0.8, "seed": 4},
    ]
    together(5, lambda i: chat.complete(ask(str(i)), **params[i]))
    sizes = sorted((n, p.get("max_tokens"), p.get("seed")) for n, p in model.batches)
    assert [n for n, *_ in sizes].count(2) == 1 and len(sizes) == 4
    assert {p.get("seed") for _, p in model.batches if p.get("temperature")} == {3, 4}


def test_each_call_keeps_its_own_tools_inside_a_shared_batch() -> None:
    def tool(name: str) -> Tool:
        return Tool(name, "", {"type": "object", "properties": {}})

    model = SlowBatchModel()
    chat = Coalescing(model, window=0.05, quiet=0.05)
    answers = together(
        3,
        lambda i: chat.complete_batch([ask(f"q{i}")], tools_each=[[tool(f"tool_{i}")] if i else []])[0].text,
    )
    assert answers == ["q0", "q1 +tool_1", "q2 +tool_2"] and len(model.batches) == 1


def test_a_backend_error_reaches_every_caller_of_the_batch_and_the_next_batch_runs() -> None:
    model = SlowBatchModel(fail=True)
    chat = Coalescing(model, window=0.02, quiet=0.02)
    errors = together(4, lambda i: chat.complete(ask(str(i))))
    assert all(isinstance(e, ConnectorError) and "fell over" in str(e) for e in errors)
    model.fail = False
    assert chat.complete(ask("again")).text == "again"


def test_max_prompts_splits_a_crowd_and_no_caller_is_left_waiting() -> None:
    model = SlowBatchModel()
    chat = Coalescing(model, window=0.02, quiet=0.02, max_prompts=4)
    answers = together(10, lambda i: chat.complete_batch([ask(f"{i}a"), ask(f"{i}b")]))
    assert [[c.text for c in a] for a in answers] == [[f"{i}a", f"{i}b"] for i in range(10)]
    assert max(n for n, _ in model.batches) <= 4 and sum(n for n, _ in model.batches) == 20


def test_attributes_of_the_model_pass_through() -> None:
    chat = Coalescing(SlowBatchModel())
    assert chat.name == "slow-batch" and chat.tools_each is True
    with pytest.raises(AttributeError):
        chat.no_such_thing  # noqa: B018


def test_a_burst_that_trickles_in_is_gathered_whole_while_calls_keep_coming() -> None:
    """16 calls 10 ms apart (as a server's requests reach the model after their recalls) make one batch: the
    leader waits while calls keep joining, not a fixed time from its own arrival."""
    model = SlowBatchModel()
    chat = Coalescing(model, window=5.0, quiet=0.1)

    def staggered(i: int) -> str:
        time.sleep(0.01 * i)
        return chat.complete(ask(f"Anfrage {i}"), max_tokens=8).text

    assert together(16, staggered) == [f"Anfrage {i}" for i in range(16)]
    assert [n for n, _ in model.batches] == [16]


def test_a_lone_call_waits_only_for_the_quiet_time() -> None:
    model = SlowBatchModel()
    chat = Coalescing(model, window=60.0, quiet=0.01)  # were the window waited out, this would hang a minute
    assert chat.complete(ask("allein")).text == "allein" and [n for n, _ in model.batches] == [1]


def test_announced_requests_are_waited_for_however_late() -> None:
    """A server announces each request before its recall (``arriving``): the batch waits for those still on their
    way, so a straggler 0.4 s behind (far past the 0.05 s quiet time) joins the burst."""
    model = SlowBatchModel()
    chat = Coalescing(model, window=60.0, quiet=0.05)

    def announced(i: int) -> str:
        with chat.arriving():
            time.sleep(0.4 if i == 7 else 0.01 * i)  # the recall, one of them slow
            return chat.complete(ask(f"Anfrage {i}"), max_tokens=8).text

    assert together(8, announced) == [f"Anfrage {i}" for i in range(8)]
    assert [n for n, _ in model.batches] == [8]


def test_an_announced_request_that_never_calls_the_model_releases_the_batch() -> None:
    """A request that fails before the model (a bad recall, a refused parameter) ends its announcement, and the
    batch waiting for it goes ahead rather than waiting out the window (a minute here: the test would hang)."""
    model = SlowBatchModel()
    chat = Coalescing(model, window=60.0, quiet=0.01)

    def request(i: int) -> str:
        with chat.arriving():
            if i == 1:
                time.sleep(0.1)
                raise ValueError("the recall failed")
            return chat.complete(ask("weiter"), max_tokens=8).text

    out = together(2, request)
    assert out[0] == "weiter" and isinstance(out[1], ValueError)
    assert [n for n, _ in model.batches] == [1]
    with chat.arriving():  # nothing is left counted as on its way
        assert chat.complete(ask("danach")).text == "danach"
    assert [n for n, _ in model.batches] == [1, 1]
