"""A live ``evolve serve`` app on 127.0.0.1 (uvicorn in a thread) with three tenants' keys, and the spec it serves."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from connectors import ConnectorError, ScriptedChat
from connectors.streaming import split_words
from evolve.serve.deployment import Deployment

QUESTION = "What is the door code of the Harbor warehouse?"
ANSWER = "The door code is 4471."
KEYS = {"sk-test-alice-0001": "alice", "sk-test-bob-0002": "bob", "sk-test-carol-0003": "carol"}
KEY_OF = {tenant: key for key, tenant in KEYS.items()}


# a function tool in the Chat Completions shape (``Any``: the SDK's typed params would refuse a plain dict)
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
            "required": ["city"],
        },
    },
}
SCRIPTED = f'chat = "fake/scripted"\noptions = {{ replies = {{ "Harbor" = "{ANSWER}" }} }}'


def write_serve_spec(folder: Path, *, model: str = SCRIPTED) -> Path:
    """By default a scripted team that knows the Harbor code and fails (no reply, no default) on anything else."""
    spec = folder / "serve.toml"
    spec.write_text(
        f"""
[run]
name = "codes"
database = "sqlite:///{folder / "serve.db"}"

[model]
{model}
max_tokens = 12

[embedder]
name = "hash"

[environment]
tasks = "unused.jsonl"

[memory]
k1 = 10
k2 = 2

[[agents]]
name = "solver"
system = "Reply with the code only."
"""
    )
    return spec


@dataclass
class Served:
    url: str  # the base URL apps configure: http://127.0.0.1:PORT/v1
    deployment: Deployment

    def client(self, tenant: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key=KEY_OF[tenant], max_retries=0)


@contextmanager
def running(app_at: Callable[[str], Any]) -> Iterator[str]:
    """Serve ``app_at(url)`` with uvicorn in a thread on a free port of 127.0.0.1 (bound first, so the app may know
    its URL); yields the URL, ``http://127.0.0.1:PORT``."""
    import uvicorn

    from apps.serve_cli import listen

    sock = listen("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app_at(url), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextmanager
def serving(spec: Path, keys: Mapping[str, str] = KEYS, *, admin_keys: Sequence[str] = ()) -> Iterator[Served]:
    """``evolve serve`` for ``spec`` with ``keys`` (key → tenant) and the operator's ``admin_keys``: uvicorn in a
    thread on a free port of 127.0.0.1."""
    from evolve.serve.protocols.openai_http import create_app
    from evolve.spec import load_spec

    deployment = Deployment(load_spec(spec))
    try:
        with running(lambda _: create_app(deployment, dict(keys), admin_keys=admin_keys)) as url:
            yield Served(f"{url}/v1", deployment)
    finally:
        deployment.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The live ``evolve serve`` app the server tests of a module share (a conftest imports this fixture)."""
    with serving(write_serve_spec(tmp_path_factory.mktemp("serve"))) as live:
        yield live


class HeldChat(ScriptedChat):
    """The spec's scripted model, streamed word by word, held after its first word until ``gate`` opens
    (or failing there, with ``fail``): what the client has by then was sent before generation ended."""

    def __init__(self, *, fail: bool = False) -> None:
        super().__init__({"Harbor": ANSWER})
        self.gate, self.fail = threading.Event(), fail

    def pieces(self, text: str) -> Iterator[str]:
        words = split_words(text)
        yield words[0]
        if self.fail:
            raise ConnectorError("the model fell over mid-answer")
        if not self.gate.wait(30):
            raise ConnectorError("the test never let the model go on")
        yield from words[1:]


@pytest.fixture
def held(served: Served) -> Iterator[HeldChat]:
    """The served team's model, swapped for a ``HeldChat`` for one test (a conftest imports this fixture)."""
    chat = served.deployment.chat
    spec_model, chat.backend = chat.backend, HeldChat()
    try:
        yield chat.backend  # type: ignore[misc]
    finally:
        chat.backend.gate.set()  # type: ignore[attr-defined]  # never leave a server thread waiting
        chat.backend = spec_model
