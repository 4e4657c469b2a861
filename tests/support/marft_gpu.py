"""What a MARFT team costs on a CUDA GPU (SmolLM2-135M): peak memory and rollout tokens/s.

``team_peak`` measures one base with N LoRA agent adapters, ``bases_peak`` N separate bases, each
generating once; ``rollout_speed`` times every agent answering every prompt through a rollout engine
(``AgentPolicies`` or ``VLLMEngine``). ``tests/optimizers/marft/test_gpu.py`` asserts on them and
``bench/marft_gpu.py`` records them.

Example:
    >>> team = team_peak(4, PROMPTS[:4], max_new_tokens=8)              # doctest: +SKIP
    >>> team < 0.5 * bases_peak(4, PROMPTS[:4], max_new_tokens=8)       # doctest: +SKIP
    True
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

PROMPTS = (
    "What is the capital of France?",
    "Name a colour and say why you like it.",
    "Say hello to a friend in one sentence.",
    "What is two plus two? Explain briefly.",
    "Give me three words that rhyme with cat.",
    "Describe the sea in ten words.",
    "Which animal says moo, and where does it live?",
    "Write a greeting for a birthday card.",
)


def agent_names(count: int) -> tuple[str, ...]:
    return tuple(f"agent{i}" for i in range(count))


def peak_bytes(work: Callable[[], Any]) -> int:
    """Peak CUDA bytes allocated by ``work()`` above what was allocated before it; what it built is freed."""
    import torch

    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    kept = work()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del kept
    gc.collect()
    torch.cuda.empty_cache()
    return int(peak)


def team_peak(agents: int, prompts: Sequence[str], *, max_new_tokens: int) -> int:
    """Peak bytes of one SmolLM2 base with ``agents`` LoRA adapters on CUDA, every agent generating once."""
    from optimizers.marft.policy import AgentPolicies

    def work() -> Any:
        policy = AgentPolicies.from_smollm2(agent_names(agents), device="cuda", critic=False)
        ids = policy.encode(prompts)
        for agent in policy.agents:
            policy.generate(agent, ids, max_new_tokens=max_new_tokens, temperature=0.0)
        return policy

    return peak_bytes(work)


def bases_peak(count: int, prompts: Sequence[str], *, max_new_tokens: int) -> int:
    """Peak bytes of ``count`` separate SmolLM2 models on CUDA (float32), each generating once (greedy)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from connectors.smollm2 import smollm2_path

    folder = smollm2_path()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    tokenizer.padding_side = "left"
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in prompts
    ]

    def work() -> Any:
        models = []
        for _ in range(count):
            model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
            models.append(model.to("cuda").eval())
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to("cuda")
        with torch.no_grad():
            for model in models:
                model.generate(
                    **batch, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id
                )
        return models

    return peak_bytes(work)


def rollout_speed(
    engine: Any, agents: Sequence[str], prompt_ids: Sequence[Sequence[int]], *, max_new_tokens: int, seed: int = 0
) -> dict[str, Any]:
    """Every agent answers every prompt (temperature 1) through ``engine`` (a ``RolloutEngine``): tokens, seconds,
    tokens/s, and the tokens per agent."""
    import torch

    def sync() -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    generator = torch.Generator().manual_seed(seed)
    engine.generate(agents[0], prompt_ids[:2], max_new_tokens=4, temperature=1.0, generator=generator)  # warm-up
    per_agent: dict[str, int] = {}
    sync()
    started = time.perf_counter()
    for agent in agents:
        out = engine.generate(agent, prompt_ids, max_new_tokens=max_new_tokens, temperature=1.0, generator=generator)
        per_agent[agent] = sum(len(r) for r in out)
    sync()
    seconds = time.perf_counter() - started
    tokens = sum(per_agent.values())
    return {
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(tokens / seconds, 1),
        "per_agent": per_agent,
    }
