"""``Deployment.stream``: a team of two streams its answer and records the row ``Deployment.answer`` records,
when the text ends or when the stream is closed early; failures before the first delta are raised."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from connectors import ConfigError, ConnectorError, Message, RateLimited, load_chat
from evolve.serve.answers import UnknownResponse
from evolve.serve.deployment import Deployment
from evolve.spec import RunSpec

QUESTION = "What is the door code of the Harbor warehouse?"
ASK = [Message("system", "Be brief."), Message("user", QUESTION)]


def reply(messages: Sequence[Message]) -> str:
    if "lunch" in messages[-1].content:
        raise RateLimited("slow down", retry_after=7.0)
    return "check the Harbor list" if "planner" in messages[0].content else "The door code is 4471."


@pytest.fixture
def deployment(tmp_path: Path) -> Deployment:
    spec = RunSpec.model_validate(
        {
            "run": {"name": "codes", "database": f"sqlite:///{tmp_path / 'serve.db'}"},
            "model": {"chat": "fake/scripted"},
            "embedder": {"name": "hash"},
            "environment": {"tasks": "unused.jsonl"},
            "memory": {"k1": 10, "k2": 2},
            "agents": [{"name": "planner", "system": "You are the planner."}, {"name": "solver", "system": "Solve."}],
        }
    )
    d = Deployment(spec, chat=load_chat("fake/scripted", replies=reply, retries=0))
    assert d.store is not None
    for agent in ("planner", "solver"):
        for i, intent in enumerate([QUESTION, "Harbor warehouse door", "lunch menu"]):
            d.store.add(intent, f"lesson {i}", namespace=f"{d.run_name('alice')}/{agent}")
    yield d
    d.close()


def test_a_streamed_answer_is_recorded_as_a_plain_one(deployment: Deployment) -> None:
    stream = deployment.stream(ASK, tenant="alice", params={"seed": 5, "max_tokens": 30})
    assert stream.id.startswith("chatcmpl-") and stream.answer is None  # the id is known before any text
    with pytest.raises(UnknownResponse):
        deployment.response(stream.id, tenant="alice")
    deltas = list(stream)
    plain = deployment.answer(ASK, tenant="alice", params={"seed": 5, "max_tokens": 30})

    assert "".join(deltas) == plain.text == "The door code is 4471." and len(deltas) == 5
    assert stream.answer is not None and len(stream.answer.recall_ids) == len(plain.recall_ids) == 2
    row, twin = deployment.response(stream.id, tenant="alice"), deployment.response(plain.id, tenant="alice")
    same = ("run", "query", "messages", "answer", "prompt_version", "tokens")
    assert {k: row[k] for k in same} == {k: twin[k] for k in same}
    strip = [{k: v for k, v in s.items() if k != "recall_id"} for s in row["steps"]]
    assert strip == [{k: v for k, v in s.items() if k != "recall_id"} for s in twin["steps"]]
    assert deployment.feedback(stream.id, 1.0, tenant="alice").reinforced == 4  # both agents' recalls


def test_a_stream_closed_early_records_what_was_sent(deployment: Deployment) -> None:
    stream = deployment.stream(ASK, tenant="alice")
    assert next(stream) == "The "
    stream.close()
    stream.close()  # twice is harmless
    row = deployment.response(stream.id, tenant="alice")
    assert row["answer"] == "The " and row["steps"][-1]["finish"] == "cancelled"
    assert [s["agent"] for s in row["steps"]] == ["planner", "solver"]


def test_what_fails_before_the_first_delta_is_raised_by_deployment_stream(deployment: Deployment) -> None:
    with pytest.raises(RateLimited, match="could not answer") as caught:
        deployment.stream([Message("user", "What is for lunch?")], tenant="alice")
    assert caught.value.retry_after == 7.0  # a server can still say 429 with Retry-After
    with pytest.raises(ConfigError, match="tool_choice"):
        deployment.stream(ASK, tenant="alice", params={"tool_choice": "none"})
    with pytest.raises(ConfigError, match="logprobs"):  # asked for, it is answered whole: never dropped here
        deployment.stream(ASK, tenant="alice", params={"logprobs": True})
    with pytest.raises(ConfigError, match="user message"):
        deployment.stream([Message("system", "Be brief.")], tenant="alice")
    assert not isinstance(caught.value, ConfigError) and isinstance(caught.value, ConnectorError)
