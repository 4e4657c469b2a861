"""What ``evolve serve`` adds in front of an API model: latency over a fake OpenAI-compatible upstream of fixed
latency, against the same SDK calling the upstream directly, and concurrent requests against one alone.

Three processes, as deployed: the upstream (``tests.support.fake_openai``, answering after a fixed
delay), ``evolve serve`` (the CLI), and this one as the app (the ``openai`` SDK). The served team is one agent on
``openai/…`` pointed at it, with MiniLM (``--embedder``, default ``onnx``) and a trained memory of ``--memories``
items (the tenant recalls it, ``[serve] memory = "shared"``), so every served answer pays a real embedding and a
two-phase recall.
The same run asks the upstream directly (the baseline) and through ``evolve serve``, interleaved, and
reads each served answer's recall time from its ``Server-Timing`` header: added latency beyond the
recall is, per request, served − direct − recall (median). Each served request asks a question of its own,
so the server's cache of recent query embeddings (``connectors.embed_cache``) does not hide the model; then
one question asked again and again shows what that cache saves. Then ``--clients`` requests at once through
the server (API backends run concurrently; the queries are embedded together). The Responses API
(``POST /v1/responses``) is timed the same way, interleaved, with questions of its own, and streamed (time to
its first event).

Before the servers start, this process times one query's embedding, MiniLM on torch (sentence-transformers)
against ONNX Runtime (``connectors.onnx_embedder``), one after the other over the same ``--queries`` distinct
questions, and the least cosine between the two backends' vectors.

Run: ``python -m bench.serve_overhead [--latency 0.05] [--requests 60] [--clients 16] [--queries 200]`` →
bench/results/serve_overhead.{json,md} and the ``serve_added_*``, ``serve_responses_*``, ``serve_concurrent_upstream_*`` and
``embed_query_*`` keys of bench/results/summary.json (``--out DIR`` writes them there instead).
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
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai

from bench.common import at_once, machine, merge_summary

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
RUN = "night shift codes"
QUESTION = "What is the door code of the Harbor warehouse?"


def question(i: int) -> str:
    """A question of its own for request ``i`` (of the kind the memory holds), so none is embedded twice."""
    return f"What is the door code of warehouse {i} at the harbor site {i % 37}?"


def write_spec(folder: Path, upstream: str, embedder: str = "onnx") -> Path:
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
name = "{embedder}"

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


def seed_memory(spec_path: Path, memories: int) -> None:
    """The trained memory the served tenant recalls, written before the server starts."""
    from evolve.build import build_store
    from evolve.spec import load_spec

    store = build_store(load_spec(spec_path), None)
    assert store is not None
    rows = [(f"What is the code of asset {i} at site {i % 37}?", f"The code is {1000 + i}.") for i in range(memories)]
    store.add_many(rows, namespace=f"{RUN}/solver", group=False)
    store.close()


def server_timing(header: str) -> dict[str, float]:
    """``Server-Timing: recall;dur=12.5, answer;dur=70.1`` → {"recall": 12.5, "answer": 70.1}."""
    out = {}
    for part in header.split(","):
        name, _, dur = part.strip().partition(";dur=")
        out[name] = float(dur)
    return out


def embed_query_ms(queries: int) -> dict[str, float]:
    """One query's embedding, MiniLM on ONNX Runtime and then on torch, over the same ``queries`` distinct
    questions (p50 ms each), and the least cosine between the two backends' vectors.

    One backend after the other, not interleaved: after each call torch's OpenMP threads keep spinning for a
    while, and interleaved they took ONNX Runtime's single query from 6.4 to 10.5 ms (2 loaded cores). A
    server on ONNX Runtime runs no torch at all (with the export cached it does not even import it)."""
    from connectors.embedders import SentenceTransformerEmbedder
    from connectors.onnx_embedder import OnnxEmbedder

    texts = [question(100_000 + i) for i in range(queries)]
    out: dict[str, float] = {}
    rows: dict[str, np.ndarray] = {}
    for name, load in (("onnx", OnnxEmbedder), ("torch", SentenceTransformerEmbedder)):
        embedder = load()
        embedder.embed([question(-i) for i in range(1, 11)])  # warm: first calls allocate
        times, vectors = [], []
        for text in texts:
            started = time.perf_counter()
            vectors.append(embedder.embed([text])[0])
            times.append(time.perf_counter() - started)
        out[f"embed_query_ms_p50_{name}"] = round(1000 * statistics.median(times), 2)
        rows[name] = np.stack(vectors)
        if name == "onnx":  # as in a server between requests: each query after the upstream's wait
            out["embed_query_ms_p50_onnx_after_idle"] = round(1000 * statistics.median(after_idle(embedder)), 2)
    out["embed_query_cosine_min"] = round(float(np.min(np.sum(rows["onnx"] * rows["torch"], axis=1))), 6)
    return out


def measure(latency: float, requests: int, clients: int, memories: int, embedder: str) -> dict[str, Any]:
    """Three processes, as deployed: the upstream, ``evolve serve`` and this one (the app's SDK)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVOLVE_API_KEYS": "sk-bench-alice=alice"}
    upstream = started([sys.executable, "-c", UPSTREAM, str(latency)], env)
    serve = None
    try:
        assert upstream.stdout is not None
        upstream_url = upstream.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            spec = write_spec(Path(tmp), upstream_url, embedder)
            seed_memory(spec, memories)
            port = free_port()
            serve = started([sys.executable, "-m", "apps.cli", "serve", str(spec), "--port", str(port)], env)
            wait_healthy(serve, f"http://127.0.0.1:{port}")
            direct = openai.OpenAI(base_url=upstream_url, api_key="sk-none", max_retries=0)
            through = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-bench-alice", max_retries=0)
            recalls: list[float] = []
            answers: list[float] = []

            def ask_direct(i: int) -> object:
                return direct.chat.completions.create(model="upstream-model", messages=asking(i))

            def ask_served(i: int) -> object:
                raw = through.chat.completions.with_raw_response.create(model=RUN, messages=asking(i))
                timings = server_timing(raw.headers["server-timing"])
                recalls.append(timings["recall"])
                answers.append(timings["answer"])
                return raw.parse()

            responses_recalls: list[float] = []

            def ask_responses(i: int) -> object:
                raw = through.responses.with_raw_response.create(model=RUN, input=question(RESPONSES + i))
                responses_recalls.append(server_timing(raw.headers["server-timing"])["recall"])
                return raw.parse()

            def first_event(i: int) -> float:
                started = time.perf_counter()
                with through.responses.create(model=RUN, input=question(STREAMED + i), stream=True) as events:
                    next(iter(events))
                    first = time.perf_counter() - started
                    for _ in events:
                        pass
                return first

            ask_direct(-1), ask_served(-1), ask_responses(-1), first_event(-1)  # warm
            recalls.clear()
            answers.clear()
            responses_recalls.clear()
            triples = [
                (
                    seconds(partial(ask_direct, i), 1)[0],
                    seconds(partial(ask_served, i), 1)[0],
                    seconds(partial(ask_responses, i), 1)[0],
                )
                for i in range(requests)
            ]
            pairs = [(d, s) for d, s, _ in triples]
            streamed = [first_event(i) for i in range(requests)]
            for _ in range(max(requests // 3, 1)):  # question 0 again: its embedding is kept
                ask_served(0)
            crowd = at_once(lambda i: ask_served(requests + i), clients)
    finally:
        for proc in (serve, upstream):
            if proc is not None:
                proc.terminate()
                proc.communicate(timeout=30)
    return {
        "latency_s": latency, "requests": requests, "clients": clients, "memories": memories, "embedder": embedder,
        "figures": figures(pairs, recalls, answers, crowd),
        "responses": responses_figures(triples, responses_recalls, streamed),
    }  # fmt: skip


RESPONSES, STREAMED = 50_000, 60_000
"""Where the Responses path's questions start: none is one a chat completion asked (the cache would answer it)."""


def responses_figures(
    triples: list[tuple[float, float, float]], recalls: list[float], streamed: list[float]
) -> dict[str, float]:
    """The Responses path (``POST /v1/responses``) against the same direct calls: added, its recall, beyond the
    recall, and a streamed response's first event (medians, ms)."""
    direct_ms = 1000 * statistics.median(d for d, _, _ in triples)
    served_ms = 1000 * statistics.median(r for _, _, r in triples)
    beyond = statistics.median(1000 * (r - d) - rec for (d, _, r), rec in zip(triples, recalls, strict=False))
    return {
        "served_p50_ms": round(served_ms, 1),
        "added_p50_ms": round(served_ms - direct_ms, 1),
        "recall_p50_ms": round(statistics.median(recalls), 1),
        "added_minus_recall_p50_ms": round(beyond, 1),
        "stream_first_event_p50_ms": round(1000 * statistics.median(streamed), 1),
    }


IDLE_S = 0.05
"""The pause before each "after idle" timing: the fake upstream's latency, when a server has nothing to do."""


def after_idle(embedder: Any, n: int = 60) -> list[float]:
    """Seconds of one query's embedding, each after ``IDLE_S`` asleep (questions of their own)."""
    times = []
    for i in range(n):
        time.sleep(IDLE_S)
        started = time.perf_counter()
        embedder.embed([question(200_000 + i)])
        times.append(time.perf_counter() - started)
    return times


def idle_cost_us(n: int = 100) -> dict[str, float]:
    """What idle costs on this machine: one point read of an in-memory SQLite table back to back and after
    ``IDLE_S`` asleep (µs, p50). Days differ here (a shared host), and every step of a request pays it."""
    import sqlite3

    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT)")
    conn.execute("INSERT INTO t VALUES ('door', 'code')")
    out = {}
    for key, pause in (("idle_cost_sqlite_read_us_busy", 0.0), ("idle_cost_sqlite_read_us_after_idle", IDLE_S)):
        times = []
        for _ in range(n):
            if pause:
                time.sleep(pause)
            started = time.perf_counter()
            conn.execute("SELECT v FROM t WHERE k = 'door'").fetchone()
            times.append(time.perf_counter() - started)
        out[key] = round(1e6 * statistics.median(times), 1)
    conn.close()
    return out


def asking(i: int) -> Any:
    return [{"role": "user", "content": question(i)}]


def figures(
    pairs: list[tuple[float, float]], recalls: list[float], answers: list[float], crowd: list[float]
) -> dict[str, float]:
    """Medians of the interleaved pairs (the first ``len(pairs)`` recalls and answers are theirs, then the
    repeated question's recalls, then the crowd's)."""
    n = len(pairs)
    direct_ms = 1000 * statistics.median(d for d, _ in pairs)
    served_ms = 1000 * statistics.median(s for _, s in pairs)
    beyond = statistics.median(1000 * (s - d) - r for (d, s), r in zip(pairs, recalls, strict=False))
    out = {
        "direct_p50_ms": round(direct_ms, 1),
        "served_p50_ms": round(served_ms, 1),
        "added_p50_ms": round(served_ms - direct_ms, 1),
        "recall_p50_ms": round(statistics.median(recalls[:n]), 1),
        "recall_cached_p50_ms": round(statistics.median(recalls[n : len(recalls) - len(crowd)]), 1),
        "in_server_p50_ms": round(statistics.median(answers[:n]), 1),
        "added_minus_recall_p50_ms": round(beyond, 1),
        "concurrent_p50_s": round(float(np.percentile(crowd, 50)), 3),
        "concurrent_p95_s": round(float(np.percentile(crowd, 95)), 3),
    }
    out["concurrent_p95_over_single"] = round(out["concurrent_p95_s"] / (served_ms / 1000), 2)
    return out


def markdown(r: dict[str, Any]) -> str:
    f, e = r["figures"], r["embedding"]
    return "\n".join([
        "# evolve serve in front of an API model: added latency and concurrency",
        "",
        f"A fake OpenAI-compatible upstream answering after {1000 * r['latency_s']:.0f} ms, `evolve serve` and the app "
        f"(the `openai` SDK) as three processes; {r['requests']} requests to the upstream directly and through the "
        f"server, interleaved, medians. The served tenant recalls from a trained memory of {r['memories']} items with "
        f"MiniLM on the CPU (embedder `{r['embedder']}`); each request asks a question of its own, so the server's "
        "cache of recent query embeddings does not hide the model; the server reports each answer's recall time "
        "(`Server-Timing: recall`).",
        "",
        "| figure | ms |",
        "|---|---|",
        f"| SDK → upstream (baseline) | {f['direct_p50_ms']} |",
        f"| SDK → evolve serve → upstream | {f['served_p50_ms']} |",
        f"| added by evolve serve | {f['added_p50_ms']} |",
        f"| of which the recall (embedding + two-phase recall, in the server) | {f['recall_p50_ms']} |",
        f"| added beyond the recall, per request (target ≤ 5) | {f['added_minus_recall_p50_ms']} |",
        f"| the answer inside the server (recall, team, model call, recording) | {f['in_server_p50_ms']} |",
        f"| the recall of a question asked before (its embedding kept: `connectors.embed_cache`) | "
        f"{f['recall_cached_p50_ms']} |",
        "",
        f"The same through the Responses API (`POST /v1/responses`, interleaved with the two above, questions of "
        f"its own): {r['responses']['served_p50_ms']} ms, added {r['responses']['added_p50_ms']}, of which the recall "
        f"{r['responses']['recall_p50_ms']} and {r['responses']['added_minus_recall_p50_ms']} beyond it; streamed, "
        f"the first event after {r['responses']['stream_first_event_p50_ms']} ms.",
        "",
        f"{r['clients']} requests at once through the server: p50 {f['concurrent_p50_s']} s, p95 "
        f"{f['concurrent_p95_s']} s = {f['concurrent_p95_over_single']}× one request alone (their queries are embedded "
        "together, `connectors.embed_batching`).",
        "",
        f"One query's embedding in this process before the servers start, MiniLM, {r['queries']} distinct questions, "
        "ONNX Runtime first, then torch (not interleaved: torch's idle threads spin and slow what follows), p50:",
        "",
        "| backend | ms |",
        "|---|---|",
        f"| torch (sentence-transformers) | {e['embed_query_ms_p50_torch']} |",
        f"| ONNX Runtime (`connectors.onnx_embedder`, target ≤ 5) | {e['embed_query_ms_p50_onnx']} |",
        "",
        f"The least cosine between the two backends' vectors: {e['embed_query_cosine_min']}. On ONNX Runtime after "
        f"{1000 * IDLE_S:.0f} ms asleep before each query, as in a server between requests: "
        f"{e['embed_query_ms_p50_onnx_after_idle']} ms.",
        "",
        f"What idle costs on this machine in this run (a shared host; days differ): a point read of an in-memory "
        f"SQLite table takes {e['idle_cost_sqlite_read_us_busy']} µs back to back and "
        f"{e['idle_cost_sqlite_read_us_after_idle']} µs after {1000 * IDLE_S:.0f} ms asleep; every step of a request "
        "pays it.",
        "",
    ])  # fmt: skip


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--latency", type=float, default=0.05, help="the upstream's fixed latency in seconds")
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=200, help="distinct questions for the embedding timing")
    parser.add_argument("--embedder", default="onnx", help='the served spec\'s embedder ("minilm": whichever runs)')
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results are written")
    args = parser.parse_args()
    embedding = {**embed_query_ms(args.queries), **idle_cost_us()}  # first, alone: no server shares the cores
    served = measure(args.latency, args.requests, args.clients, args.memories, args.embedder)
    result = {**served, "queries": args.queries, "embedding": embedding, "machine": machine()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "serve_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "serve_overhead.md").write_text(markdown(result))
    f = result["figures"]
    merge_summary(args.out / "summary.json", {
        "serve_added_p50_ms": f["added_p50_ms"],
        "serve_added_recall_p50_ms": f["recall_p50_ms"],
        "serve_added_recall_cached_p50_ms": f["recall_cached_p50_ms"],
        "serve_added_minus_recall_p50_ms": f["added_minus_recall_p50_ms"],
        "serve_concurrent_upstream_p95_s": f["concurrent_p95_s"],
        "serve_concurrent_upstream_p95_over_single": f["concurrent_p95_over_single"],
        **{f"serve_responses_{name}": value for name, value in result["responses"].items()},
        **embedding,
    })  # fmt: skip
    print(markdown(result))


if __name__ == "__main__":
    main()
