"""``evolve serve`` under a bounded load: N concurrent clients, a fixed count of requests, every latency.

The server is the real command (``python -m apps.cli serve``, a subprocess on 127.0.0.1) over the real
SQLite store, answering with a scripted model (instant and deterministic, so the figures measure the
server, the team and the store, not a model). Each client is a thread with its own ``openai`` SDK
client: chat completions, every fourth one streamed, and after every third answer a ``/v1/feedback``
on it (sent twice, with the same key: the second must be a no-op). Every request's status and latency
(client side, to the last byte) is recorded; the report has p50/p90/p99/max, throughput and errors,
and checks that every feedback was applied exactly once (receipts, and the store's visit count).

``tests/apps/test_serve_load.py`` asserts on ``run_load``; ``python -m bench.serve_load [--clients 8]
[--requests 25]`` writes the same figures to bench/results/serve_load.{json,md}.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai

ROOT = Path(__file__).resolve().parents[2]
ANSWER = "The door code is 4471."
KEYS = {"sk-load-alice-0001": "alice", "sk-load-bob-0002": "bob", "sk-load-carol-0003": "carol"}
QUESTIONS = ["What is the door code of the Harbor warehouse?", "Harbor warehouse door code, please.", "Harbor code?"]
SPEC = """
[run]
name = "load"
database = "sqlite:///{db}"

[model]
chat = "fake/scripted"
options = {{ replies = {{ "Harbor" = "{answer}" }} }}
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


@dataclass
class Request:
    """One request as a client saw it: kind (chat, stream, feedback, repeat), status (0: no answer)."""

    client: int
    kind: str
    status: int
    ms: float
    error: str = ""
    applied: bool | None = None
    reinforced: int = 0


def write_spec(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "serve.toml"
    spec.write_text(SPEC.format(db=folder / "serve.db", answer=ANSWER), encoding="utf-8")
    return spec


def seed(spec: Path) -> None:
    """Memories in every tenant's namespace, so that answers recall and feedback reinforces."""
    from evolve.serve.deployment import Deployment
    from evolve.spec import load_spec

    deployment = Deployment(load_spec(spec))
    try:
        assert deployment.store is not None
        for tenant in sorted(set(KEYS.values())):
            ns = f"{deployment.run_name(tenant)}/solver"
            rows = [(f"{q} ({tenant} {i})", f"lesson {i}: the code is on the card") for i, q in enumerate(QUESTIONS)]
            deployment.store.add_many(rows + [("lunch menu", "ask the canteen")], namespace=ns)
    finally:
        deployment.close()


def start_server(spec: Path) -> tuple[subprocess.Popen[str], str]:
    """``evolve serve`` on a free port of 127.0.0.1; returns the process and its base URL."""
    keys = [a for key, tenant in KEYS.items() for a in ("--key", f"{key}={tenant}")]
    cmd = [sys.executable, "-m", "apps.cli", "serve", str(spec), "--port", "0", "-q", *keys]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # the first line names the URL once the socket listens and the models loaded
        seen.append(line)
        if line.startswith("evolve serve:") and " at " in line:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep draining the pipe
            return proc, line.rsplit(" at ", 1)[1].strip()
    proc.wait(10)
    raise RuntimeError(f"evolve serve did not start (exit {proc.returncode}):\n{''.join(seen)[-2000:]}")


def stop_server(proc: subprocess.Popen[str]) -> int:
    proc.terminate()  # SIGTERM: graceful, the deployment saves its index
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(10)


class StatusError(Exception):
    """A reply that is not 200, from the plain HTTP client."""

    def __init__(self, status_code: int, text: str) -> None:
        super().__init__(f"HTTP {status_code}: {text}")
        self.status_code = status_code


def _timed(log: list[Request], client: int, kind: str, call: Any) -> Any:
    started = time.perf_counter()
    try:
        result, status, error = call(), 200, ""
    except (openai.APIStatusError, StatusError) as e:
        result, status, error = None, e.status_code, str(e)[:300]
    except Exception as e:  # no answer at all: a connection error, a timeout
        result, status, error = None, 0, f"{type(e).__name__}: {e}"[:300]
    log.append(Request(client, kind, status, (time.perf_counter() - started) * 1000, error))
    return result


def _chat(sdk: openai.OpenAI, question: str, stream: bool) -> str:
    messages: Any = [{"role": "user", "content": question}]
    if not stream:
        completion = sdk.chat.completions.create(model="load", messages=messages)
        assert completion.choices[0].message.content == ANSWER, completion
        return completion.id
    chunks = list(sdk.chat.completions.create(model="load", messages=messages, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ANSWER, text
    return chunks[0].id


def _feedback(http: httpx.Client, response_id: str, score: float) -> dict[str, Any]:
    r = http.post("/feedback", json={"response_id": response_id, "score": score, "key": "load"})
    if r.status_code != 200:
        raise StatusError(r.status_code, r.text[:200])
    body: dict[str, Any] = r.json()
    return body


def client(urls: list[str], key: str, number: int, count: int, start: threading.Barrier, log: list[Request]) -> None:
    """``count`` chat requests (every 4th streamed) to ``urls[0]``, a feedback (and its repeat) after every
    3rd to ``urls[-1]`` (with several servers: another process than the one that answered)."""
    sdk = openai.OpenAI(base_url=urls[0], api_key=key, max_retries=0, timeout=60)
    http = httpx.Client(base_url=urls[-1], headers={"Authorization": f"Bearer {key}"}, timeout=60)
    start.wait()
    for i in range(count):
        stream = i % 4 == 1
        rid = _timed(log, number, "stream" if stream else "chat", partial(_chat, sdk, QUESTIONS[i % 3], stream))
        if rid is None or i % 3:
            continue
        for kind in ("feedback", "repeat"):
            receipt = _timed(log, number, kind, partial(_feedback, http, rid, float(i % 2)))
            if receipt is not None:
                log[-1].applied, log[-1].reinforced = receipt["applied"], receipt["reinforced"]
    http.close()
    sdk.close()


def drive(urls: list[str], clients: int, per_client: int) -> tuple[list[Request], float]:
    """All clients at once, spread over the servers (each tenant's clients over all of them); every
    request's record and the wall seconds."""
    logs: list[list[Request]] = [[] for _ in range(clients)]
    keys, n = list(KEYS), len(urls)
    start = threading.Barrier(clients + 1)
    threads = [
        threading.Thread(
            target=client,
            args=([urls[c % n], urls[(c + 1) % n]], keys[(c // n) % len(keys)], c, per_client, start, logs[c]),
        )
        for c in range(clients)
    ]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    return [r for one in logs for r in one], time.perf_counter() - began


def visits_total(spec: Path) -> int:
    from evolve.serve.deployment import Deployment
    from evolve.spec import load_spec

    deployment = Deployment(load_spec(spec))
    try:
        assert deployment.store is not None
        return int(deployment.store.stats()["visits"]["total"])
    finally:
        deployment.close()


def summarise(requests: list[Request], seconds: float, visits: int) -> dict[str, Any]:
    ms = np.array([r.ms for r in requests]) if requests else np.zeros(1)
    first = [r for r in requests if r.kind == "feedback"]
    repeats = [r for r in requests if r.kind == "repeat"]
    reinforced = sum(r.reinforced for r in first)
    # First sends not applied, repeats applied again, and a store whose visits disagree with the receipts.
    not_once = sum(r.applied is not True for r in first) + sum(r.applied is not False for r in repeats)
    not_once += (reinforced != visits) + abs(len(first) - len(repeats))
    return {
        "requests": len(requests),
        "chat": sum(r.kind in ("chat", "stream") for r in requests),
        "streamed": sum(r.kind == "stream" for r in requests),
        "feedback": len(first) + len(repeats),
        "errors": sum(r.status != 200 for r in requests),
        "unanswered": sum(r.status == 0 for r in requests),
        "feedback_applied_once": not_once == 0,
        "feedback_not_once": not_once,
        "items_reinforced": reinforced,
        "store_visits": visits,
        **{f"p{p}_ms": round(float(np.percentile(ms, p)), 1) for p in (50, 90, 99)},
        "max_ms": round(float(ms.max()), 1),
        "seconds": round(seconds, 2),
        "throughput_rps": round(len(requests) / seconds, 1) if seconds else 0.0,
    }


def run_load(folder: Path, *, clients: int = 8, per_client: int = 25, servers: int = 1) -> dict[str, Any]:
    """Seed, start ``servers`` ``evolve serve`` processes on one store, drive the clients, stop them,
    check the store; the report (config, summary, the first failures)."""
    spec = write_spec(folder)
    seed(spec)
    procs: list[subprocess.Popen[str]] = []
    urls: list[str] = []
    try:
        for _ in range(servers):
            proc, url = start_server(spec)
            procs.append(proc)
            urls.append(url)
        requests, seconds = drive(urls, clients, per_client)
    finally:
        exit_codes = [stop_server(proc) for proc in procs]
    summary = summarise(requests, seconds, visits_total(spec))
    summary["server_exit_codes"] = exit_codes  # 143: SIGTERM, a graceful stop (the index is saved)
    failures = [asdict(r) for r in requests if r.status != 200][:20]
    config = {"clients": clients, "requests_per_client": per_client, "servers": servers, "model": "fake/scripted"}
    config["store"] = "SQLite, one file for every server"
    return {"config": config, "summary": summary, "failures": failures}
