"""The loop over an API model: the real openai SDK against an OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connectors import HashEmbedder, Message, load_chat
from evolve import Agent, Evolver, MemoryView, Task, Team
from memory import MemoryStore, RetrievalConfig
from tests.support.copying_model import copying_reply
from tests.support.fake_openai import FakeOpenAIServer, Reply, chat_body, error_body

TASKS = [
    Task(id=f"t{i}", prompt=f"Which code opens the {name} gate?", answer=str(1000 + i))
    for i, name in enumerate(["amber", "birch", "cedar"])
]


def copying_server_reply(request: dict[str, Any]) -> Reply:
    messages = [Message(m["role"], m["content"]) for m in request["messages"]]
    if "cedar" in messages[-1].content:
        return Reply(500, error_body("the upstream model crashed", "server_error"))
    return Reply(200, chat_body(copying_reply(messages)))


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    s = FakeOpenAIServer(responder=copying_server_reply)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def test_an_api_model_learns_through_memory_and_failures_do_not_stop_the_round(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    model = load_chat("openai/test-model", base_url=server.url, retries=1)
    store = MemoryStore(f"sqlite:///{tmp_path / 'api.db'}", embedder=HashEmbedder())
    agent = Agent(
        "solver",
        model,
        memory=MemoryView(store, config=RetrievalConfig(k1=5, k2=1, delta=0.95)),
        params={"max_tokens": 8},
    )
    server.script(Reply(429, error_body("slow down", "rate_limit_error"), headers={"Retry-After": "0"}))
    metrics = Evolver(Team([agent], workers=3), TASKS, memory=store, run="api", progress=False).run(rounds=2)

    assert [m.success_rate for m in metrics] == [0.0, pytest.approx(2 / 3)]
    assert [m.errors for m in metrics] == [1, 1]  # cedar's upstream 500 marks only that episode failed
    assert metrics[1].tokens > 0 and model.usage.prompt_tokens > 0
    assert {it.intent for it in store.items()} == {t.prompt for t in TASKS[:2]}  # failed calls teach nothing
    sent = server.requests[-1]["json"]
    assert sent["model"] == "test-model" and sent["max_tokens"] == 8
