"""What the MCP and A2A layers add over calling the library directly: p50/p95 latency of the same work.

As deployed: ``evolve mcp`` (started by the MCP SDK's stdio client, and over streamable HTTP as its own
process) and ``evolve a2a`` (its own process) on one spec and database; this process is the client, with the
official SDKs (``mcp.ClientSession``, the ``a2a-sdk`` client). The same process also makes each call
directly, interleaved with the served ones, on the same tenant and memory:

- MCP ``recall`` against ``TenantMemory.recall`` (embed the query, two-phase recall over the trained
  memory and the tenant's, log the recall: what the tool does);
- an A2A task sent and completed against ``Deployment.answer`` (recall, the team's scripted model, the
  response recorded).

The spec is the tests' (``tests.support.serve.write_serve_spec``): a scripted model and the hashing
embedder, so the figures are the layers' own cost, not a model's; the trained memory holds ``--memories`` items.

Run: ``python -m bench.protocol_overhead [--requests 100] [--memories 1000]`` → bench/results/protocol_overhead.{json,md}
and the ``protocol_*`` keys of bench/results/summary.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common import machine, merge_summary
from bench.serve_overhead import free_port, started
from tests.support.serve import write_serve_spec

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
RUN = "codes"  # the test spec's run (tests.support.serve.write_serve_spec)
TENANT = "Zürich-Nordhafen-Logistik-Team-07"
KEY = "sk-bench-zurich-5f1c9e"
QUESTION = "What is the door code of the Harbor warehouse?"


def seed_memory(spec_path: Path, memories: int) -> None:
    """The trained memory every tenant recalls (``[serve] memory = "shared"``), written before the servers start."""
    from evolve.build import agent_namespace, build_store
    from evolve.spec import load_spec

    store = build_store(load_spec(spec_path), None)
    assert store is not None
    rows = [(f"What is the code of asset {i} at site {i % 37}?", f"The code is {1000 + i}.") for i in range(memories)]
    store.add_many(rows, namespace=agent_namespace(RUN, "solver"), group=False)
    store.close()


async def pairs(direct: Callable[[], object], served: Callable[[], Awaitable[object]], n: int) -> dict[str, float]:
    """``n`` interleaved (direct, served) timings after one warm-up of each: p50/p95 of both, in ms."""
    direct()
    await served()
    mine, theirs = [], []
    for _ in range(n):
        t = time.perf_counter()
        direct()
        mine.append(time.perf_counter() - t)
        t = time.perf_counter()
        await served()
        theirs.append(time.perf_counter() - t)
    d, s = np.array(mine) * 1000, np.array(theirs) * 1000
    out = {"direct_p50_ms": np.percentile(d, 50), "direct_p95_ms": np.percentile(d, 95),
           "served_p50_ms": np.percentile(s, 50), "served_p95_ms": np.percentile(s, 95)}  # fmt: skip
    out["added_p50_ms"] = out["served_p50_ms"] - out["direct_p50_ms"]
    out["added_p95_ms"] = out["served_p95_ms"] - out["direct_p95_ms"]
    return {k: round(float(v), 2) for k, v in out.items()}


async def mcp_figures(spec: Path, n: int) -> dict[str, dict[str, float]]:
    from evolve.serve.tenant_memory import TenantMemory
    from evolve.spec import load_spec
    from tests.support.mcp import http_session, stdio_session

    memory = TenantMemory(load_spec(spec))
    direct = lambda: memory.recall(TENANT, QUESTION, k=5)  # noqa: E731
    out: dict[str, dict[str, float]] = {}
    try:
        async with stdio_session(spec, "--tenant", TENANT) as session:
            out["mcp_stdio"] = await pairs(direct, lambda: session.call_tool("recall", {"query": QUESTION, "k": 5}), n)
        port = free_port()
        cmd = [sys.executable, "-m", "apps.cli", "mcp", str(spec), "--transport", "http", "--port", str(port)]
        server = started(cmd, {**os.environ, "PYTHONPATH": str(ROOT), "EVOLVE_API_KEYS": f"{KEY}={TENANT}"})
        try:
            url = wait_for_line(server, "evolve mcp:").rsplit(" at ", 1)[1]
            async with http_session(url, KEY) as session:
                out["mcp_http"] = await pairs(
                    direct, lambda: session.call_tool("recall", {"query": QUESTION, "k": 5}), n
                )
        finally:
            stop(server)
    finally:
        memory.close()
    return out


async def a2a_figures(spec: Path, n: int) -> dict[str, float]:
    from a2a.client import ClientConfig, create_client
    from a2a.types import Message, Part, Role, SendMessageRequest

    from connectors import Message as ChatMessage
    from evolve.serve.deployment import Deployment
    from evolve.spec import load_spec

    deployment = Deployment(load_spec(spec))
    port = free_port()
    cmd = [sys.executable, "-m", "apps.cli", "a2a", str(spec), "--port", str(port), "--log-level", "warning"]
    server = started(cmd, {**os.environ, "PYTHONPATH": str(ROOT), "EVOLVE_API_KEYS": f"{KEY}={TENANT}"})
    try:
        wait_for_line(server, "evolve a2a:")
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as http:
            client = await create_client(f"http://127.0.0.1:{port}", ClientConfig(streaming=False, httpx_client=http))

            async def send() -> None:
                ask = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=QUESTION)])
                async for event in client.send_message(SendMessageRequest(message=ask)):
                    assert event.task is None or event.task.artifacts or event.task.status is not None

            return await pairs(lambda: deployment.answer([ChatMessage("user", QUESTION)], tenant=TENANT), send, n)
    finally:
        stop(server)
        deployment.close()


def wait_for_line(proc: subprocess.Popen[str], prefix: str) -> str:
    """The first line the server prints that starts with ``prefix`` (it prints it once it listens)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}) before saying {prefix!r}")
        if line.startswith(prefix):
            time.sleep(0.5)  # it prints just before uvicorn starts serving
            return line.strip()
    raise RuntimeError(f"the server did not say {prefix!r} in 120 s")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def measure(requests: int, memories: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        spec = write_serve_spec(Path(tmp))
        seed_memory(spec, memories)
        layers = asyncio.run(mcp_figures(spec, requests))
        layers["a2a"] = asyncio.run(a2a_figures(spec, requests))
    return {"requests": requests, "memories": memories, "layers": layers}


LABELS = {
    "mcp_stdio": "MCP `recall` over stdio vs `TenantMemory.recall`",
    "mcp_http": "MCP `recall` over streamable HTTP vs `TenantMemory.recall`",
    "a2a": "A2A task (send, complete) vs `Deployment.answer`",
}


def markdown(r: dict[str, Any]) -> str:
    lines = [
        "# What the MCP and A2A layers add over a direct library call",
        "",
        f"The same work {r['requests']} times, interleaved: directly in this process, and through `evolve mcp` / "
        "`evolve a2a` with the official SDKs' clients (servers in their own processes, one spec and database). "
        f"Scripted model, hashing embedder, a trained memory of {r['memories']} items; milliseconds.",
        "",
        "| layer | direct p50 / p95 | through the layer p50 / p95 | added p50 / p95 |",
        "|---|---|---|---|",
    ]
    for name, f in r["layers"].items():
        lines.append(
            f"| {LABELS[name]} | {f['direct_p50_ms']} / {f['direct_p95_ms']} | {f['served_p50_ms']} / "
            f"{f['served_p95_ms']} | {f['added_p50_ms']} / {f['added_p95_ms']} |"
        )
    return "\n".join([*lines, ""])


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--memories", type=int, default=1000)
    args = parser.parse_args()
    result = {**measure(args.requests, args.memories), "machine": machine()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "protocol_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "protocol_overhead.md").write_text(markdown(result))
    flat = {
        f"protocol_{layer}_{k}": v
        for layer, f in result["layers"].items()
        for k, v in f.items()
        if k.startswith("added")
    }
    merge_summary(RESULTS / "summary.json", flat)
    print(markdown(result))


if __name__ == "__main__":
    main()
