"""``evolve serve`` on the local model: 16 concurrent requests against one alone, with and without batching
of concurrent requests, and time to first token streamed against the whole answer.

A live server on 127.0.0.1 (SmolLM2-135M on the CPU, the bundled test spec's one agent), the real
``openai`` SDK in 16 threads, client-side latency. The same run measures the server with its requests
batched (``connectors.coalesce.Coalescing``, what ``Deployment`` uses) and one by one (the backend
unwrapped), so the ratio is against a baseline of the same run.

Run: ``python -m bench.serve_concurrency [--clients 16] [--max-tokens 32]`` → bench/results/serve_concurrency.{json,md}
and the ``serve_concurrent_*`` and ``serve_ttft_*`` keys of bench/results/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import at_once, machine, merge_summary
from connectors.coalesce import Coalescing
from tests.support.serve import Served, serving, write_serve_spec

RESULTS = Path(__file__).resolve().parent / "results"
QUESTIONS = [
    f"Describe in detail everything a night guard at the {place} should check during a shift."
    for place in (
        "Harbor warehouse", "north depot", "Quartz lab", "Entrepôt du port", "Zürich archive", "São Paulo office",
        "east gate", "cold store", "server room", "loading bay", "roof access", "west yard", "chemistry wing",
        "parking deck", "visitor lobby", "boiler room",
    )
]  # fmt: skip


TOKENS: list[int] = []  # completion tokens of every answer timed by ``one``, in order


def one(served: Served, question: str, max_tokens: int) -> float:
    """Seconds for one whole answer (its completion tokens go to ``TOKENS``: a lone answer that stops early
    would make a batch that runs to ``max_tokens`` look slower than it is, so the report shows both)."""
    started = time.perf_counter()
    answer = served.client("alice").chat.completions.create(
        model=served.deployment.model_id, messages=[{"role": "user", "content": question}], max_tokens=max_tokens
    )
    TOKENS.append(answer.usage.completion_tokens if answer.usage is not None else 0)
    return time.perf_counter() - started


def crowd(served: Served, clients: int, max_tokens: int) -> list[float]:
    """Every client's latency when ``clients`` ask at once."""
    return at_once(lambda i: one(served, QUESTIONS[i % len(QUESTIONS)], max_tokens), clients)


def first_token(served: Served, question: str, max_tokens: int) -> tuple[float, float]:
    """(seconds to the first content chunk, seconds to the end) of a streamed answer."""
    started, first = time.perf_counter(), None
    stream = served.client("alice").chat.completions.create(
        model=served.deployment.model_id,
        messages=[{"role": "user", "content": question}],
        max_tokens=max_tokens,
        stream=True,
    )
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - started
    total = time.perf_counter() - started
    return (first if first is not None else total), total


def measure(clients: int, max_tokens: int) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        serving(write_serve_spec(Path(tmp), model='chat = "local/smollm2"')) as s,
    ):
        one(s, QUESTIONS[0], max_tokens)  # load the model
        TOKENS.clear()
        alone = [one(s, q, max_tokens) for q in QUESTIONS[:3]]
        alone_tokens = list(TOKENS)
        batched = crowd(s, clients, max_tokens)
        batched_tokens = TOKENS[len(alone_tokens) :]
        wrapper = s.deployment.chat.backend
        assert isinstance(wrapper, Coalescing)
        batches = list(wrapper.batches)
        s.deployment.chat.backend = wrapper.backend  # the baseline: one request at a time
        serial = crowd(s, clients, max_tokens)
        s.deployment.chat.backend = wrapper
        streamed = [first_token(s, q, max_tokens) for q in QUESTIONS[3:6]]
    single = statistics.median(alone)
    figures = {
        "single_s": round(single, 3),
        "batched_p50_s": round(float(np.percentile(batched, 50)), 3),
        "batched_p95_s": round(float(np.percentile(batched, 95)), 3),
        "serial_p50_s": round(float(np.percentile(serial, 50)), 3),
        "serial_p95_s": round(float(np.percentile(serial, 95)), 3),
    }
    figures["batched_p95_over_single"] = round(figures["batched_p95_s"] / single, 2)
    figures["serial_p95_over_single"] = round(figures["serial_p95_s"] / single, 2)
    figures["single_tokens_mean"] = round(statistics.mean(alone_tokens), 1)
    figures["batched_tokens_mean"] = round(statistics.mean(batched_tokens), 1)
    figures["ttft_s"] = round(statistics.median(f for f, _ in streamed), 3)
    figures["stream_total_s"] = round(statistics.median(t for _, t in streamed), 3)
    return {"clients": clients, "max_tokens": max_tokens, "figures": figures, "batch_sizes": batches[-clients:]}


def markdown(r: dict[str, Any]) -> str:
    f = r["figures"]
    return "\n".join([
        "# evolve serve: concurrent requests on the local model",
        "",
        f"SmolLM2-135M on the CPU behind `evolve serve`, the `openai` SDK in {r['clients']} threads asking at once, "
        f"`max_tokens={r['max_tokens']}`; client-side seconds. Batched: concurrent requests generated together "
        "(`connectors.coalesce`); serial: the same server with its backend unwrapped, in the same run.",
        "",
        "| figure | seconds | × one request alone |",
        "|---|---|---|",
        f"| one request alone (median of 3; {f['single_tokens_mean']} completion tokens on average) | {f['single_s']} | 1 |",
        f"| {r['clients']} at once, batched ({f['batched_tokens_mean']} tokens on average): p50 / p95 | "
        f"{f['batched_p50_s']} / {f['batched_p95_s']} | "
        f"{f['batched_p95_over_single']} (p95) |",
        f"| {r['clients']} at once, serial: p50 / p95 | {f['serial_p50_s']} / {f['serial_p95_s']} | "
        f"{f['serial_p95_over_single']} (p95) |",
        f"| streamed: first token / whole answer (median of 3) | {f['ttft_s']} / {f['stream_total_s']} | |",
        "",
        f"Batch sizes the model saw in the batched crowd: {r['batch_sizes']}.",
        "",
    ])  # fmt: skip


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    report = measure(args.clients, args.max_tokens) | {"machine": machine()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "serve_concurrency.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (RESULTS / "serve_concurrency.md").write_text(markdown(report), encoding="utf-8")
    f = report["figures"]
    merge_summary(RESULTS / "summary.json", {
        "serve_single_s": f["single_s"],
        "serve_concurrent_p50_s": f["batched_p50_s"],
        "serve_concurrent_p95_s": f["batched_p95_s"],
        "serve_concurrent_p95_over_single": f["batched_p95_over_single"],
        "serve_concurrent_serial_p95_s": f["serial_p95_s"],
        "serve_concurrent_serial_p95_over_single": f["serial_p95_over_single"],
        "serve_ttft_stream_s": f["ttft_s"],
        "serve_ttft_stream_total_s": f["stream_total_s"],
    })  # fmt: skip
    print(markdown(report))


if __name__ == "__main__":
    main()
