"""vLLM's OpenAI-compatible server behind ``openai/…`` with ``base_url``: start-up, tokens/s, an evolution round.

Starts ``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 with the converted SmolLM2 folder,
waits for ``/health``, then talks to it only through Evolve's own ``openai/<served name>`` provider (no
API key: the server is local):

1. tokens/s of one stream (requests one after another) and of 16 concurrent requests, each generating
   exactly ``--max-tokens`` tokens (``ignore_eos``), counted from the usage the server returns;
2. ``--rounds`` evolution rounds of an ``Evolver`` (Q-memory on SQLite, a ``HashEmbedder``) on the
   bundled format-rules tasks, the team's agent on the server;
3. with ``--in-process``, after the server stops: the same figures for the in-process ``vllm/…``
   provider (one ``generate`` call for the batch).

The machine is shared: the load average before and after goes into the results.

Run (in the vLLM venv, e.g. from ``make test-vllm``): ``python -m bench.vllm_server [--rounds 2]``.
Writes bench/results/vllm_server.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import machine
from tests.support.vllm_serve import SERVED_NAME, evolution_rounds, serve

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PROMPTS = (
    "Describe the sea in one paragraph.",
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle works.",
    "List some fruits and say what colour each one is.",
)


def throughput(chat: Any, *, requests: int, concurrency: int, max_tokens: int, **extra: Any) -> dict[str, float]:
    """Aggregate tokens/s of ``requests`` answers, ``concurrency`` at a time, each exactly ``max_tokens`` long."""

    def one(i: int) -> Any:
        return chat.complete(PROMPTS[i % len(PROMPTS)], max_tokens=max_tokens, temperature=0.0, **extra)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        answers = list(pool.map(one, range(requests)))
    seconds = time.perf_counter() - started
    tokens = sum(a.usage.completion_tokens for a in answers)
    return {
        "requests": requests,
        "concurrency": concurrency,
        "completion_tokens": tokens,
        "seconds": round(seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1),
    }


def batched_throughput(chat: Any, *, requests: int, max_tokens: int) -> dict[str, float]:
    """Aggregate tokens/s of one ``complete_batch`` of ``requests`` prompts (the in-process provider)."""
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(requests)]
    started = time.perf_counter()
    answers = chat.complete_batch(prompts, max_tokens=max_tokens, temperature=0.0)
    seconds = time.perf_counter() - started
    tokens = sum(a.usage.completion_tokens for a in answers)
    return {
        "requests": requests,
        "completion_tokens": tokens,
        "seconds": round(seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1),
    }


def protocol_check(chat: Any) -> dict[str, Any]:
    """What the server gives back through ``OpenAIChat``: text, usage and per-token logprobs."""
    answer = chat.complete("What is the capital of France?", max_tokens=16, temperature=0.0, logprobs=True)
    logprobs = answer.logprobs or ()
    return {
        "text": answer.text,
        "model": answer.model,
        "prompt_tokens": answer.usage.prompt_tokens,
        "completion_tokens": answer.usage.completion_tokens,
        "logprobs": len(logprobs),
        "logprobs_match_usage": len(logprobs) == answer.usage.completion_tokens,
        "finish_reason": answer.finish_reason,
    }


def server_figures(opts: argparse.Namespace, folder: Path, workdir: Path) -> dict[str, Any]:
    """Start the server, measure through ``openai/<served name>``, run the rounds, stop the server."""
    from connectors import load_chat

    log_path = workdir / "vllm_server.log"
    extra = ["--enforce-eager"] if opts.eager else []
    with serve(folder, max_model_len=opts.max_model_len, dtype=opts.dtype, log_path=log_path, extra=extra) as server:
        chat = load_chat(f"openai/{SERVED_NAME}", base_url=server.base_url, timeout=600.0)
        check = protocol_check(chat)
        fixed = {"extra_body": {"ignore_eos": True}}
        single = throughput(chat, requests=opts.single_requests, concurrency=1, max_tokens=opts.max_tokens, **fixed)
        concurrent = throughput(chat, requests=16, concurrency=16, max_tokens=opts.max_tokens, **fixed)
        round_started = time.perf_counter()
        rounds = evolution_rounds(chat, opts.rounds, workdir)
        rounds_seconds = time.perf_counter() - round_started
        models = server.models()
    return {
        "base_url": server.base_url,
        "served_models": models,
        "start_seconds": round(server.start_seconds, 1),
        "protocol": check,
        "single_stream": single,
        "concurrent": concurrent,
        "rounds": rounds,
        "rounds_seconds": round(rounds_seconds, 1),
        "stop_seconds": round(server.stop_seconds, 1),
    }


def in_process_figures(opts: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """The same model on the in-process ``vllm/…`` provider: start, one stream, one batch of 16."""
    from connectors import load_chat

    started = time.perf_counter()
    chat: Any = load_chat(
        f"vllm/{folder}", dtype=opts.dtype, max_model_len=opts.max_model_len, enforce_eager=opts.eager
    )
    chat.complete("Hello", max_tokens=1)  # the engine starts on the first call
    start_seconds = time.perf_counter() - started
    try:
        single = throughput(chat, requests=opts.single_requests, concurrency=1, max_tokens=opts.max_tokens)
        batched = batched_throughput(chat, requests=16, max_tokens=opts.max_tokens)
    finally:
        chat.backend.close()
    return {"start_seconds": round(start_seconds, 1), "single_stream": single, "batched": batched}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from connectors.smollm2 import smollm2_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=2, help="evolution rounds through the server")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per answer in the tokens/s figures")
    parser.add_argument("--single-requests", type=int, default=4, help="answers in the single-stream figure")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--dtype", default="bfloat16", help="vLLM --dtype (bfloat16 is vLLM's CPU default)")
    parser.add_argument("--eager", action="store_true", help="--enforce-eager: no graph compilation (quicker start)")
    parser.add_argument("--in-process", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--out", type=Path, default=RESULTS)
    opts = parser.parse_args(argv)

    import vllm

    folder = smollm2_path()
    result: dict[str, Any] = {
        "model": "SmolLM2-135M-Instruct (converted HF folder)",
        "served_name": SERVED_NAME,
        "vllm": vllm.__version__,
        "dtype": opts.dtype,
        "enforce_eager": opts.eager,
        "max_model_len": opts.max_model_len,
        "max_tokens": opts.max_tokens,
        "machine": machine(),
        "kv_cache_gib": os.environ.get("VLLM_CPU_KVCACHE_SPACE"),
    }
    with tempfile.TemporaryDirectory(prefix="evolve-vllm-bench-") as tmp:
        result["server"] = server_figures(opts, folder, Path(tmp))
    if opts.in_process:
        result["in_process"] = in_process_figures(opts, folder)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "vllm_server.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (opts.out / "vllm_server.md").write_text(report(result), encoding="utf-8")
    print(report(result))
    return result


def report(r: dict[str, Any]) -> str:
    """The results as a short Markdown page."""
    s = r["server"]
    lines = [
        "# vLLM's OpenAI-compatible server through `openai/…`",
        "",
        f"{r['model']} on vLLM {r['vllm']} (CPU), dtype {r['dtype']}, max_model_len {r['max_model_len']}, "
        f"{'eager (no graph compilation)' if r['enforce_eager'] else 'compiled (vLLM default)'}; "
        f"served as `{r['served_name']}` at {s['base_url']}, reached with "
        f'`load_chat("openai/{r["served_name"]}", base_url=...)` and no API key. '
        f"{r['machine']['cpu_count']} CPUs, load average {r['machine']['load_average_at_start']} at start, "
        f"{r['load_average_at_end']} at the end (the machine is shared: figures are noisy).",
        "",
        "| figure | server | in-process `vllm/…` |",
        "|---|---|---|",
    ]
    p = r.get("in_process")
    lines.append(f"| engine start, s | {s['start_seconds']} (to /health) | {p['start_seconds'] if p else '—'} |")
    one = s["single_stream"]
    lines.append(
        f"| single stream, tokens/s ({one['requests']} × {r['max_tokens']} tokens) | {one['tokens_per_s']} "
        f"| {p['single_stream']['tokens_per_s'] if p else '—'} |"
    )
    many = s["concurrent"]
    lines.append(
        f"| 16 at once, tokens/s (server: 16 concurrent requests; in-process: one batch) | {many['tokens_per_s']} "
        f"| {p['batched']['tokens_per_s'] if p else '—'} |"
    )
    lines += ["", "| round | episodes | success | tokens | seconds | memory size |", "|---|---|---|---|---|---|"]
    for m in s["rounds"]:
        lines.append(
            f"| {m['round']} | {m['episodes']} | {m['success_rate']:.3f} | {m['tokens']:,} | {m['seconds']:.1f} "
            f"| {m['memory_size']} |"
        )
    c = s["protocol"]
    lines += [
        "",
        f"Protocol check: usage {c['prompt_tokens']} + {c['completion_tokens']} tokens, {c['logprobs']} logprobs "
        f"(match usage: {c['logprobs_match_usage']}), finish_reason {c['finish_reason']!r}; "
        f"the server lists {s['served_models']}.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
