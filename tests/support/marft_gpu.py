"""What a MARFT team costs on a CUDA GPU (a SmolLM2-sized model built in code, or SmolLM2-135M): peak memory
and rollout tokens/s.

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
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

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


BUILT = {"hidden": 576, "layers": 30}
"""A Llama of about SmolLM2-135M's size (576 wide, 30 layers; 163 M parameters over the prompts' words), built
in code with random weights (``optimizers.marft.tiny``): what the GPU memory tests load, so that a GPU machine
needs nothing downloaded. Memory depends on the shapes, not on what the weights learned."""

Base = Literal["built", "smollm2"]


def team_policies(agents: int, *, base: Base = "built", device: str = "cuda") -> Any:
    """One base (``BUILT`` or SmolLM2-135M) with ``agents`` LoRA adapters, no critic, on ``device``."""
    from optimizers.marft.policy import AgentPolicies
    from optimizers.marft.tiny import tiny_policies

    if base == "smollm2":
        return AgentPolicies.from_smollm2(agent_names(agents), device=device, critic=False)
    team = tiny_policies(prompt_words(), agent_names(agents), critic=False, **BUILT)
    team.model.to(device)
    return team


def prompt_words() -> list[str]:
    """Every word of ``PROMPTS``: the built model's vocabulary."""
    return sorted({w for p in PROMPTS for w in re.findall(r"\w+|[^\w\s]", p)})


def team_peak(agents: int, prompts: Sequence[str], *, max_new_tokens: int, base: Base = "built") -> int:
    """Peak bytes of one base with ``agents`` LoRA adapters on CUDA, every agent generating once (greedy)."""

    def work() -> Any:
        policy = team_policies(agents, base=base)
        ids = policy.encode(prompts)
        for agent in policy.agents:
            policy.generate(agent, ids, max_new_tokens=max_new_tokens, temperature=0.0)
        return policy

    return peak_bytes(work)


def bases_peak(count: int, prompts: Sequence[str], *, max_new_tokens: int, base: Base = "built") -> int:
    """Peak bytes of ``count`` separate base models on CUDA (float32), each generating once (greedy)."""
    import torch

    def work() -> Any:
        models = [team_policies(1, base=base) for _ in range(count)]  # a base each (with one small adapter)
        ids = models[0].encode(prompts)
        with torch.no_grad():
            for m in models:
                m.generate(m.agents[0], ids, max_new_tokens=max_new_tokens, temperature=0.0)
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
