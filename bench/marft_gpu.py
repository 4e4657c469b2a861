"""LoRA MARFT on a GPU: memory of one base + N adapters against N bases, and rollout tokens/s.

The base is a SmolLM2-sized Llama built in code by default (``--base built``: nothing to download), or
SmolLM2-135M (``--base smollm2``; vLLM's rollouts are measured only then).

Memory: peak CUDA memory (``torch.cuda.max_memory_allocated`` above what was allocated before) of
``AgentPolicies`` with N agent adapters on one base, each agent generating once, against N separate
base models each generating once, and one base alone. Speed: generated tokens per second of the same
multi-agent rollouts (every agent answers every prompt, sampled at temperature 1) with transformers
(``AgentPolicies.generate``, float32) and, when vLLM is installed, with ``VLLMEngine`` (one vLLM engine,
one ``LoRARequest`` per agent, bfloat16).

Run: python -m bench.marft_gpu [--agents 4] [--prompts 64] [--max-new-tokens 64]
Writes bench/results/marft_gpu.{json,md} and ``marft_gpu_*`` keys of bench/results/summary.json. On a
machine without CUDA it says so and exits 0, writing nothing. The measuring functions are
``tests/support/marft_gpu.py``'s (the GPU tests assert on the same numbers).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import machine, merge_summary
from tests.support.marft_gpu import BUILT, PROMPTS, bases_peak, rollout_speed, team_peak, team_policies

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def gpu() -> dict[str, Any]:
    import torch

    props = torch.cuda.get_device_properties(0)
    vllm = importlib.util.find_spec("vllm") is not None
    return {
        "gpu": props.name,
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "vllm": __import__("vllm").__version__ if vllm else None,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--base", choices=("built", "smollm2"), default="built",
                        help="the base: a SmolLM2-sized Llama built in code (nothing to download), or SmolLM2-135M "
                             "(its GGUF installed; vLLM's rollouts need it)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS)
    opts = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench.marft_gpu needs a CUDA GPU; none here, nothing measured or written.")
        return None

    small = list(PROMPTS[: min(4, len(PROMPTS))])
    memory = {
        "team_mb": team_peak(opts.agents, small, max_new_tokens=16, base=opts.base) / 2**20,
        "bases_mb": bases_peak(opts.agents, small, max_new_tokens=16, base=opts.base) / 2**20,
        "one_base_mb": bases_peak(1, small, max_new_tokens=16, base=opts.base) / 2**20,
    }
    memory = {k: round(v, 1) for k, v in memory.items()}
    memory["ratio_team_to_bases"] = round(memory["team_mb"] / memory["bases_mb"], 3)
    memory["ratio_team_to_one_base"] = round(memory["team_mb"] / memory["one_base_mb"], 3)

    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(opts.prompts)]
    policy = team_policies(opts.agents, base=opts.base)
    ids = policy.encode(prompts)
    speed: dict[str, Any] = {
        "transformers": rollout_speed(policy, policy.agents, ids, max_new_tokens=opts.max_new_tokens)
    }
    if importlib.util.find_spec("vllm") is not None and opts.base == "smollm2":
        from connectors.smollm2 import smollm2_path
        from optimizers.marft.vllm_engine import VLLMEngine

        started = time.perf_counter()
        engine = VLLMEngine(policy, smollm2_path(), dtype="bfloat16", max_model_len=2048)
        speed["vllm_start_seconds"] = round(time.perf_counter() - started, 1)
        speed["vllm"] = rollout_speed(engine, policy.agents, ids, max_new_tokens=opts.max_new_tokens)
        engine.close()
    result = {
        "machine": {**machine(), **gpu()},
        "model": ("SmolLM2-135M-Instruct" if opts.base == "smollm2" else f"a Llama built in code ({BUILT})")
        + "; LoRA rank 8 on q,k,v,o,gate,up,down per agent",
        "agents": opts.agents,
        "prompts": opts.prompts,
        "max_new_tokens": opts.max_new_tokens,
        "memory": memory,
        "speed": speed,
    }
    write(result, opts.out)
    print(markdown(result))
    return result


def write(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "marft_gpu.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "marft_gpu.md").write_text(markdown(result), encoding="utf-8")
    mem, speed = result["memory"], result["speed"]
    flat = {
        "marft_gpu_team_peak_mb": mem["team_mb"],
        "marft_gpu_bases_peak_mb": mem["bases_mb"],
        "marft_gpu_memory_ratio": mem["ratio_team_to_bases"],
        "marft_gpu_transformers_tokens_per_s": speed["transformers"]["tokens_per_s"],
    }
    if "vllm" in speed:
        flat["marft_gpu_vllm_tokens_per_s"] = speed["vllm"]["tokens_per_s"]
    merge_summary(out / "summary.json", flat)


def markdown(result: dict[str, Any]) -> str:
    m, s, n = result["memory"], result["speed"], result["agents"]
    lines = [
        f"# LoRA MARFT on a GPU: {result['machine']['gpu']}",
        "",
        f"{result['model']}; {n} agents.",
        "",
        "| peak CUDA memory (each generating once) | MB |",
        "|---|---|",
        f"| one base + {n} adapters (AgentPolicies) | {m['team_mb']} |",
        f"| {n} separate bases | {m['bases_mb']} |",
        f"| one base alone | {m['one_base_mb']} |",
        "",
        f"One base + {n} adapters takes {m['ratio_team_to_bases']} of {n} bases and "
        f"{m['ratio_team_to_one_base']} × one base.",
        "",
        f"| rollouts: {n} agents × {result['prompts']} prompts, ≤ {result['max_new_tokens']} new tokens, T = 1 "
        "| tokens | seconds | tokens/s |",
        "|---|---|---|---|",
    ]
    names = {"transformers": "transformers (AgentPolicies.generate, float32)", "vllm": "vLLM multi-LoRA (bfloat16)"}
    for key, name in names.items():
        if key in s:
            lines.append(f"| {name} | {s[key]['tokens']} | {s[key]['seconds']} | {s[key]['tokens_per_s']} |")
    if "vllm" not in s:
        lines.append("| vLLM | not run (not installed, or --base built) | | |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
