"""A live ``evolve serve`` app on 127.0.0.1 (uvicorn in a thread) with three tenants' keys, and the spec it serves."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import openai

from evolve.deploy.serving import Deployment

QUESTION = "What is the door code of the Harbor warehouse?"
ANSWER = "The door code is 4471."
KEYS = {"sk-test-alice-0001": "alice", "sk-test-bob-0002": "bob", "sk-test-carol-0003": "carol"}
KEY_OF = {tenant: key for key, tenant in KEYS.items()}


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
def serving(spec: Path, keys: Mapping[str, str] = KEYS) -> Iterator[Served]:
    """``evolve serve`` for ``spec`` with ``keys`` (key → tenant): uvicorn in a thread on a free port of 127.0.0.1."""
    import uvicorn

    from apps.serve_cli import base_url, listen
    from apps.server import create_app
    from evolve.spec import load_spec

    deployment = Deployment(load_spec(spec))
    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(deployment, dict(keys)), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        yield Served(base_url(sock), deployment)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        deployment.close()
        sock.close()
