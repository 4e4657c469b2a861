"""The secrets harness shared by ``tests/test_secrets.py`` and ``bench/reliability_security.py``.

``secrets_probe(folder)`` configures an API key for the ``openai`` provider (through the real SDK, its
HTTP answered in process by ``httpx2.MockTransport``, whose 401 and 500 bodies echo the key back as
careless servers do), a database URL with a password, then runs a job round, serves answers and
feedback, fails provider calls, exports memory and dumps every database row — and counts where the
secrets show up: log records at DEBUG, exception messages and reprs, export files, stored rows.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import MetaData

from connectors import EvolveError, Message, make_engine

API_KEY = "sk-test-SECRET123"
DB_PASSWORD = "SECRETPW"
DB_URL = f"postgresql+psycopg://user:{DB_PASSWORD}@127.0.0.1:1/evolve"
SECRETS = (API_KEY, DB_PASSWORD)
KEY_ENV = "EVOLVE_PROBE_API_KEY"
QUESTION = "What is the door code of the Harbor warehouse?"


class Captured(logging.Handler):
    """Every record at DEBUG and above, formatted with its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@contextmanager
def capture_logs() -> Iterator[Captured]:
    root, handler = logging.getLogger(), Captured()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def upstream(request: Any) -> Any:
    """An OpenAI-compatible endpoint in process: answers, or fails echoing the Authorization header."""
    import httpx2

    body = json.loads(request.content or b"{}")
    text = json.dumps(body.get("messages", []))
    echo = {"error": {"message": f"bad key {request.headers.get('authorization')}", "type": "invalid_request_error"}}
    if "FAIL401" in text:
        return httpx2.Response(401, json=echo)
    if "FAIL500" in text:
        return httpx2.Response(500, json=echo)
    message = {"role": "assistant", "content": "4471"}
    choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    return httpx2.Response(200, json={"id": "c1", "object": "chat.completion", "created": 0, "model": body.get("model"),
                                      "choices": [choice], "usage": usage})  # fmt: skip


def write_spec(folder: Path, client: Any) -> Any:
    """A run on the ``openai`` provider whose key comes from ``$EVOLVE_PROBE_API_KEY``."""
    from evolve.spec import RunSpec

    (folder / "tasks.jsonl").write_text(json.dumps({"id": "t1", "prompt": QUESTION, "answer": "4471"}) + "\n")
    spec = {
        "run": {"name": "leaky", "database": f"sqlite:///{folder / 'runs.db'}", "rounds": 1},
        "model": {"chat": "openai/gpt-4o-mini", "api_key_env": KEY_ENV, "options": {"client": client, "retries": 0}},
        "embedder": {"name": "hash"},
        "environment": {"tasks": str(folder / "tasks.jsonl"), "paraphrase": False},
    }
    return RunSpec.model_validate(spec)


def errors_of(*calls: Any) -> list[str]:
    """``str`` and ``repr`` of the error each call raises (an Evolve error; anything else is a finding)."""
    out = []
    for call in calls:
        try:
            call()
        except EvolveError as e:
            out += [str(e), repr(e)]
        except Exception as e:  # noqa: BLE001 - a foreign exception reaching the caller is reported too
            out += [f"foreign {type(e).__name__}: {e}", repr(e)]
    return out


def dump_tables(engine: Any) -> list[str]:
    """Every row of every table, as text: run records, job ledger, prompt versions, responses, memories."""
    meta = MetaData()
    meta.reflect(engine)
    with engine.connect() as conn:
        return [repr(tuple(row)) for table in meta.sorted_tables for row in conn.execute(table.select())]


def secrets_probe(folder: Path) -> dict[str, Any]:
    """Run everything that touches a secret; return the texts produced and each secret's count in them."""
    import httpx2
    import openai

    client = openai.OpenAI(api_key=API_KEY, base_url="http://upstream.test/v1", max_retries=0,
                           http_client=httpx2.Client(transport=httpx2.MockTransport(upstream)))  # fmt: skip
    texts: dict[str, list[str]] = {}
    previous = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = API_KEY
    try:
        with capture_logs() as logs:
            texts["run"] = _run_job(write_spec(folder, client))
            texts["serve"] = _serve(write_spec(folder, client), folder)
            texts["database url"] = _database_url(folder)
        texts["logs"] = logs.lines
    finally:
        if previous is None:
            os.environ.pop(KEY_ENV, None)
        else:
            os.environ[KEY_ENV] = previous
    counts = {where: sum(t.count(s) for t in found for s in SECRETS) for where, found in texts.items()}
    return {
        "texts": texts,
        "counts": counts,
        "occurrences": sum(counts.values()),
        "checked": sum(map(len, texts.values())),
    }


def _run_job(spec: Any) -> list[str]:
    from evolve.build import build
    from evolve.jobs.job import run_job

    evolver = build(spec, progress=False)
    result = run_job(evolver)
    out = [repr(result), repr(evolver.team.agents["solver"].model), repr(evolver.memory)]
    if evolver.memory is not None:
        evolver.memory.close()
    return out


def _serve(spec: Any, folder: Path) -> list[str]:
    from evolve.serve.deployment import Deployment

    deployment = Deployment(spec)
    answer = deployment.answer([Message("user", QUESTION)], tenant="alice")
    deployment.feedback(answer.id, 1.0, tenant="alice", comment="right")
    out = errors_of(
        lambda: deployment.answer([Message("user", "FAIL401 " + QUESTION)], tenant="alice"),
        lambda: deployment.answer([Message("user", "FAIL500 " + QUESTION)], tenant="alice"),
        lambda: deployment.chat.complete([Message("user", "FAIL500")]),
    )
    assert deployment.store is not None
    export = folder / "export.jsonl"
    deployment.store.export(export)
    out += [export.read_text(), repr(deployment.chat), repr(deployment.chat.backend), repr(deployment.store)]
    out += dump_tables(deployment.engine)
    deployment.close()
    return out


def _database_url(folder: Path) -> list[str]:
    from evolve.build import build_chat
    from memory import MemoryStore

    out = errors_of(
        lambda: make_engine(DB_URL).connect(),
        lambda: make_engine(DB_URL.replace("postgresql+psycopg", "nosuchdb")),
        lambda: make_engine(f"user:{DB_PASSWORD}@host/db"),
        lambda: MemoryStore(DB_URL.replace("postgresql+psycopg", "nosuchdb"), embedder=_hash()),
    )
    store = MemoryStore(f"sqlite:///{folder / 'repr.db'}", embedder=_hash())
    store.url = DB_URL  # how a PostgreSQL store formats itself (no server is reachable here)
    out += [repr(store)]
    store.url = f"sqlite:///{folder / 'repr.db'}"
    store.close()
    refused = build_chat(write_spec(folder, None).model_copy(update={"model": _unreachable()}))
    out += errors_of(lambda: refused.complete([Message("user", QUESTION)]))
    return out + [repr(refused), repr(refused.backend)]


def _unreachable() -> Any:
    from evolve.spec import ModelSection

    return ModelSection(chat="openai/gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key_env=KEY_ENV,
                        options={"retries": 0, "timeout": 2})  # fmt: skip


def _hash() -> Any:
    from connectors import HashEmbedder

    return HashEmbedder()


__all__ = ["API_KEY", "DB_PASSWORD", "DB_URL", "SECRETS", "capture_logs", "secrets_probe"]
