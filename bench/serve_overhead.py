"""What ``evolve serve`` adds in front of an API model: latency over a fake OpenAI-compatible upstream of fixed
latency, against the same SDK calling the upstream directly, and concurrent requests against one alone.

Three processes, as deployed: the upstream (``tests.support.fake_openai``, answering after a fixed
delay), ``evolve serve`` (the CLI), and this one as the app (the ``openai`` SDK). The served team is one agent on
``openai/…`` pointed at it, with MiniLM and a trained memory of ``--memories`` items (the tenant recalls
it, ``[serve] memory = "shared"``), so every served answer pays a real embedding and a two-phase recall.
The same run measures the SDK against the upstream directly (the baseline), against ``evolve serve``, and
the recall alone (``MemoryStore.retrieve`` with the served settings), all as medians of ``--requests``
sequential requests; then ``--clients`` requests at once through the server (API backends run
concurrently: p95 should stay near one request).

Run: ``python -m bench.serve_overhead [--latency 0.05] [--requests 60] [--clients 16]`` →
bench/results/serve_overhead.{json,md} and the ``serve_added_*`` and ``serve_concurrent_upstream_*`` keys of
bench/results/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai

from bench.common import machine, merge_summary

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
RUN = "night shift codes"
QUESTION = "What is the door code of the Harbor warehouse?"


def write_spec(folder: Path, upstream: str) -> Path:
    spec = folder / "spec.toml"
    spec.write_text(
        f"""
[run]
name = "{RUN}"
database = "sqlite:///{folder / "serve.db"}"

[model]
chat = "openai/upstream-model"
base_url = "{upstream}"
max_tokens = 12
options = {{ retries = 0, timeout = 10 }}

[embedder]
name = "minilm"

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


def seconds(call: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        call()
        out.append(time.perf_counter() - started)
    return out


def at_once(call: Callable[[], object], clients: int) -> list[float]:
    out = [0.0] * clients
    gate = threading.Barrier(clients)

    def run(i: int) -> None:
        gate.wait()
        started = time.perf_counter()
        call()
        out[i] = time.perf_counter() - started

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


UPSTREAM = """
import sys, time
from tests.support.fake_openai import FakeOpenAIServer, Reply, chat_body
server = FakeOpenAIServer(lambda _: Reply(200, chat_body("4471"), delay=float(sys.argv[1])))
server.start()
print(server.url, flush=True)
time.sleep(3600)
"""


def started(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_healthy(proc: subprocess.Popen[str], url: str) -> None:
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"evolve serve exited: {proc.stdout.read() if proc.stdout else ''}")
        if time.monotonic() > deadline:
            raise RuntimeError("evolve serve did not answer /healthz in 120 s")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seed_memory(spec_path: Path, memories: int) -> Callable[[], object]:
    """The trained memory, written before the server starts; returns the served recall, to time alone."""
    from evolve.build import build_store, build_team
    from evolve.spec import load_spec

    spec = load_spec(spec_path)
    store = build_store(spec, None)
    assert store is not None
    rows = [(f"What is the code of asset {i} at site {i % 37}?", f"The code is {1000 + i}.") for i in range(memories)]
    store.add_many(rows, namespace=f"{RUN}/solver", group=False)
    view = build_team(spec.for_tenant("alice"), None, store).agents["solver"].memory  # type: ignore[arg-type]
    assert view is not None and view.shared == f"{RUN}/solver"
    return lambda: store.retrieve(QUESTION, namespace=view.namespace, config=view.config, shared=view.shared)


def measure(latency: float, requests: int, clients: int, memories: int, threads: int | None = None) -> dict[str, Any]:
    """Three processes, as deployed: the upstream, ``evolve serve`` and this one (the app's SDK). With
    ``threads``, torch in the server and in the recall timed here uses that many CPU threads."""
    import torch

    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVOLVE_API_KEYS": "sk-bench-alice=alice"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    default_threads = torch.get_num_threads()
    messages = [{"role": "user", "content": QUESTION}]
    upstream = started([sys.executable, "-c", UPSTREAM, str(latency)], env)
    serve = None
    try:
        assert upstream.stdout is not None
        upstream_url = upstream.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            spec = write_spec(Path(tmp), upstream_url)
            recall = seed_memory(spec, memories)
            port = free_port()
            serve = started([sys.executable, "-m", "apps.cli", "serve", str(spec), "--port", str(port)], env)
            wait_healthy(serve, f"http://127.0.0.1:{port}")
            direct = openai.OpenAI(base_url=upstream_url, api_key="sk-none", max_retries=0)
            through = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-bench-alice", max_retries=0)

            def ask_direct() -> object:
                return direct.chat.completions.create(model="upstream-model", messages=messages)  # type: ignore[arg-type]

            def ask_served() -> object:
                return through.chat.completions.create(model=RUN, messages=messages)  # type: ignore[arg-type]

            for warm in (ask_direct, ask_served, recall):
                warm()
            direct_s, served_s = seconds(ask_direct, requests), seconds(ask_served, requests)
            torch.set_num_threads(threads or default_threads)
            recall_s = seconds(recall, requests)
            torch.set_num_threads(default_threads)
            crowd = at_once(ask_served, clients)
    finally:
        for proc in (serve, upstream):
            if proc is not None:
                proc.terminate()
                proc.communicate(timeout=30)
    ms = {n: 1000 * statistics.median(v) for n, v in (("direct", direct_s), ("served", served_s), ("recall", recall_s))}
    figures = {
        "direct_p50_ms": round(ms["direct"], 1),
        "served_p50_ms": round(ms["served"], 1),
        "added_p50_ms": round(ms["served"] - ms["direct"], 1),
        "recall_p50_ms": round(ms["recall"], 1),
        "added_minus_recall_p50_ms": round(ms["served"] - ms["direct"] - ms["recall"], 1),
        "concurrent_p50_s": round(float(np.percentile(crowd, 50)), 3),
        "concurrent_p95_s": round(float(np.percentile(crowd, 95)), 3),
    }
    figures["concurrent_p95_over_single"] = round(figures["concurrent_p95_s"] / (ms["served"] / 1000), 2)
    return {"latency_s": latency, "requests": requests, "clients": clients, "memories": memories,
            "torch_threads": threads or default_threads, "figures": figures}  # fmt: skip


def markdown(r: dict[str, Any]) -> str:
    runs = r["runs"]
    head = runs[0]
    rows = [
        ("SDK → upstream (baseline)", "direct_p50_ms"),
        ("SDK → evolve serve → upstream", "served_p50_ms"),
        ("added by evolve serve", "added_p50_ms"),
        ("the recall alone (embedding + two-phase recall, timed in the bench process)", "recall_p50_ms"),
        ("added beyond the recall (target ≤ 5)", "added_minus_recall_p50_ms"),
    ]
    lines = [
        "# evolve serve in front of an API model: added latency and concurrency",
        "",
        f"A fake OpenAI-compatible upstream answering after {1000 * head['latency_s']:.0f} ms, `evolve serve` and the "
        f"app (the `openai` SDK) as three processes; medians of {head['requests']} sequential requests. The served "
        f"tenant recalls from a trained memory of {head['memories']} items with MiniLM on the CPU. Measured twice in "
        "one run: torch with its default threads, and with one thread in the server and in the recall timed alone "
        "(the same conditions on both sides of the subtraction).",
        "",
        "| figure (ms) | " + " | ".join(f"torch threads: {x['torch_threads']}" for x in runs) + " |",
        "|---|" + "---|" * len(runs),
    ]
    lines += [f"| {label} | " + " | ".join(str(x["figures"][key]) for x in runs) + " |" for label, key in rows]
    lines += [""] + [
        f"{x['clients']} requests at once through the server (torch threads: {x['torch_threads']}): p50 "
        f"{x['figures']['concurrent_p50_s']} s, p95 {x['figures']['concurrent_p95_s']} s = "
        f"{x['figures']['concurrent_p95_over_single']}× one request alone."
        for x in runs
    ]
    return "\n".join([*lines, ""])


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--latency", type=float, default=0.05, help="the upstream's fixed latency in seconds")
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--memories", type=int, default=1000)
    args = parser.parse_args()
    runs = [measure(args.latency, args.requests, args.clients, args.memories, t) for t in (None, 1)]
    result = {"runs": runs, "machine": machine()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "serve_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "serve_overhead.md").write_text(markdown(result))
    f, one = runs[0]["figures"], runs[1]["figures"]
    merge_summary(RESULTS / "summary.json", {
        "serve_added_p50_ms": f["added_p50_ms"],
        "serve_added_recall_p50_ms": f["recall_p50_ms"],
        "serve_added_one_thread_p50_ms": one["added_p50_ms"],
        "serve_added_one_thread_recall_p50_ms": one["recall_p50_ms"],
        "serve_added_minus_recall_p50_ms": one["added_minus_recall_p50_ms"],
        "serve_concurrent_upstream_p95_s": f["concurrent_p95_s"],
        "serve_concurrent_upstream_p95_over_single": f["concurrent_p95_over_single"],
    })  # fmt: skip
    print(markdown(result))


if __name__ == "__main__":
    main()
