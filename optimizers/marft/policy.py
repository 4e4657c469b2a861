"""``AgentPolicies``: one frozen base model, one peft LoRA adapter per agent, and a LoRA critic with a value head.

Every agent of a MARFT team is the same base model seen through its own adapter (switched with peft's
``set_adapter``), so a team costs one model plus a few MB per agent. The critic is one more adapter,
named ``"critic"``, whose final hidden state feeds a scalar value head.

Sampling and scoring use the same distribution: :meth:`AgentPolicies.generate` samples from
softmax(logits / T) with the caller's ``torch.Generator``, and :meth:`AgentPolicies.logprobs` scores
tokens under softmax(logits / T) at the same T, so a PPO ratio compares like with like.

Token ids go in and out as plain lists (one list per row, no padding); :mod:`optimizers.marft.batching`
packs them into left-padded prompts followed by right-padded responses.

Saving, loading and copying weights live in :mod:`optimizers.marft.policy_io`. torch, transformers and
peft are imported when a policy is built, never when this module is.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors.errors import ConfigError
from connectors.local_chat import render_prompt, require_local
from optimizers.marft import policy_io
from optimizers.marft.batching import Ids, Packed, pack, sample_next, token_logprobs
from optimizers.marft.policy_io import CRITIC
from optimizers.marft.rollout import Prompt

if TYPE_CHECKING:
    import torch
    from torch import Tensor, nn

    Logprobs = tuple[Tensor, Tensor]  # (B, R) log-probs, 0 on padding; (B, R) float mask

log = logging.getLogger(__name__)

TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class AgentPolicies:
    """One base model, one LoRA adapter per agent, and a LoRA critic with a value head.

    The base model is taken over: peft injects the adapters into it and its own weights are frozen.

    Args:
        base: a causal LM (e.g. :func:`~optimizers.marft.tiny.tiny_llama`, SmolLM2).
        tokenizer: its tokenizer; a chat template, when present, wraps each prompt as a user message.
        agents: agent names, one adapter each (identifiers, distinct, not ``"critic"``).
        rank: LoRA rank.
        alpha: LoRA alpha (the update is scaled by alpha / rank).
        dropout: LoRA dropout, active only in forward passes that take gradients.
        target_modules: the projections that get adapters.
        critic: also build the ``"critic"`` adapter and value head (needed by :meth:`values`).
        seed: seeds the adapters' and value head's initialisation (the global RNG is untouched).

    Example:
        >>> import torch
        >>> from optimizers.marft.tiny import tiny_policies
        >>> pol = tiny_policies(["say", "star"], ["speaker"])                      # doctest: +SKIP
        >>> prompts = pol.encode(["say"])                                          # doctest: +SKIP
        >>> out = pol.generate("speaker", prompts, max_new_tokens=3, temperature=1.0,
        ...                    generator=torch.Generator().manual_seed(0))         # doctest: +SKIP
        >>> logp, mask = pol.logprobs("speaker", prompts, out, temperature=1.0)    # doctest: +SKIP
    """

    def __init__(
        self,
        base: Any,
        tokenizer: Any,
        agents: Sequence[str],
        *,
        rank: int = 8,
        alpha: int = 16,
        dropout: float = 0.0,
        target_modules: Sequence[str] = TARGET_MODULES,
        critic: bool = True,
        seed: int = 0,
    ) -> None:
        require_local("AgentPolicies")
        self.agents = _checked_agents(agents)
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1 or alpha <= 0 or not 0.0 <= dropout < 1.0:
            raise ConfigError(
                f"AgentPolicies: need rank >= 1, alpha > 0, 0 <= dropout < 1; got {rank}, {alpha}, {dropout}"
            )
        self.tokenizer = tokenizer
        self.critic = critic
        self.rank, self.alpha, self.dropout, self.seed = rank, alpha, dropout, seed
        self.target_modules = tuple(target_modules)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = _eos_ids(base, tokenizer)
        self.model, self.value_head = self._build(base)
        self._lora = {name: policy_io.lora_parameters(self.model, name) for name in self.adapters}
        self.model.eval()

    @classmethod
    def from_smollm2(
        cls, agents: Sequence[str], *, cache_dir: str | Path | None = None, device: str = "cpu", **options: Any
    ) -> AgentPolicies:
        """The same on SmolLM2-135M-Instruct (float32), converted once by :mod:`connectors.smollm2`.

        ``options`` are the constructor's keywords (``rank``, ``alpha``, ``critic``...).
        """
        require_local("AgentPolicies.from_smollm2")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from connectors.smollm2 import smollm2_path

        folder = smollm2_path(cache_dir=cache_dir)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        base: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
        return cls(base.to(device).eval(), tokenizer, agents, **options)

    def _build(self, base: Any) -> tuple[Any, nn.Linear | None]:
        import torch
        from peft import LoraConfig, get_peft_model

        base.requires_grad_(False)
        config = LoraConfig(
            r=self.rank, lora_alpha=self.alpha, lora_dropout=self.dropout, target_modules=list(self.target_modules)
        )
        names = self.adapters
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            # peft 0.21 calls a method transformers 5 deprecated; drop this filter once peft catches up
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
            torch.manual_seed(self.seed)
            try:
                model = get_peft_model(base, config, adapter_name=names[0])
            except ValueError as e:
                raise ConfigError(
                    f"AgentPolicies: target_modules {self.target_modules} do not fit the model: {e}"
                ) from e
            for name in names[1:]:
                model.add_adapter(name, config)
            head = torch.nn.Linear(base.config.hidden_size, 1) if self.critic else None
        device, dtype = base.device, base.dtype
        return model, (head.to(device=device, dtype=dtype) if head is not None else None)

    @property
    def adapters(self) -> tuple[str, ...]:
        """Every adapter: the agents, then ``"critic"`` when there is one."""
        return (*self.agents, CRITIC) if self.critic else self.agents

    @property
    def device(self) -> torch.device:
        """Where the model lives (a ``torch.Generator`` for :meth:`generate` may live there or on the CPU)."""
        return self.model.device  # type: ignore[no-any-return]

    def encode(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        """Prompt token ids. A list of ``Message``s is rendered as ``LocalChat`` serves it
        (:func:`~connectors.local_chat.render_prompt`), so an adapter trains on the prompts it will see;
        a string is one user message through the chat template when the tokenizer has one, else
        ``<bos>`` + its plain encoding."""
        tok = self.tokenizer
        out: list[list[int]] = []
        for prompt in prompts:
            if not isinstance(prompt, str):
                out.append(list(tok(render_prompt(tok, prompt), add_special_tokens=False)["input_ids"]))
            elif tok.chat_template:
                user = [{"role": "user", "content": prompt}]
                text = tok.apply_chat_template(user, add_generation_prompt=True, tokenize=False)
                out.append(list(tok(text, add_special_tokens=False)["input_ids"]))
            else:
                bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
                out.append(bos + list(tok(prompt, add_special_tokens=False)["input_ids"]))
        return out

    def decode(self, ids: Sequence[int]) -> str:
        """Text of a response without its EOS. Other special tokens stay visible: a reward on "the first
        word" then sees the first token (``<pad> star`` does not start with ``star``), and the next agent
        reads exactly what was said."""
        return str(self.tokenizer.decode([t for t in ids if t not in self.eos_ids], skip_special_tokens=False))

    @contextlib.contextmanager
    def using(self, adapter: str) -> Iterator[None]:
        """Make ``adapter`` (an agent's name or ``"critic"``) the active one; it stays active after the block."""
        self._check_adapter(adapter)
        self.model.set_adapter(adapter)
        # peft's set_adapter freezes the other adapters; a loss built before the switch would then lose
        # their gradients silently, so every LoRA weight stays trainable (inactive ones get no gradient)
        for params in self._lora.values():
            for p in params.values():
                p.requires_grad_(True)
        yield

    def generate(
        self,
        agent: str,
        prompt_ids: Ids,
        *,
        max_new_tokens: int,
        temperature: float,
        generator: torch.Generator | None = None,
    ) -> list[list[int]]:
        """Responses sampled under ``agent``'s adapter, one per prompt, each ending at its first EOS (kept).

        Samples from softmax(logits / ``temperature``) with ``generator`` (same seed → same tokens);
        ``temperature`` 0 is greedy and needs no generator. Runs one prompt forward pass, then one
        token at a time on the KV cache; rows that finished are fed padding until all have.

        Raises:
            ConfigError: unknown agent, empty prompt, ``max_new_tokens`` < 1, ``temperature`` < 0, or
                sampling without a generator.
        """
        import torch

        self._check_agent(agent)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ConfigError(f"generate: max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        if temperature < 0 or (temperature > 0 and generator is None):
            raise ConfigError(f"generate: temperature must be >= 0 (got {temperature}), and > 0 needs a generator")
        batch = pack(prompt_ids, [[] for _ in prompt_ids], pad_id=self.pad_id, device=self.device)
        responses: list[list[int]] = [[] for _ in prompt_ids]
        done = torch.zeros(len(responses), dtype=torch.bool, device=self.device)
        eos = torch.tensor(sorted(self.eos_ids), device=self.device)
        mask, positions = batch.attention_mask, batch.position_ids
        with torch.no_grad(), self.using(agent):
            out = self.model(
                input_ids=batch.input_ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1
            )
            for step in range(max_new_tokens):
                token = sample_next(out.logits[:, -1], temperature, generator).masked_fill(done, self.pad_id)
                for row in (~done).nonzero().flatten().tolist():
                    responses[row].append(int(token[row]))
                done |= torch.isin(token, eos)
                if bool(done.all()) or step == max_new_tokens - 1:
                    break
                mask = torch.cat([mask, mask.new_ones(len(responses), 1)], dim=1)
                positions = positions[:, -1:] + 1
                out = self.model(
                    input_ids=token[:, None], attention_mask=mask, position_ids=positions,
                    past_key_values=out.past_key_values, use_cache=True,
                )  # fmt: skip
        return responses

    def logprobs(self, agent: str, prompt_ids: Ids, response_ids: Ids, *, temperature: float) -> Logprobs:
        """(B, R) log-probabilities of each response token under ``agent``'s adapter at ``temperature``
        (0 where the mask is 0), and the (B, R) float mask of real tokens; carries gradients."""
        self._check_agent(agent)
        with self.using(agent):
            return self._logprobs(prompt_ids, response_ids, temperature)

    def reference_logprobs(self, agent: str, prompt_ids: Ids, response_ids: Ids, *, temperature: float) -> Logprobs:
        """Like :meth:`logprobs` with every adapter disabled (the base model), without gradients.

        ``agent`` only keeps the signature parallel to :meth:`logprobs`: every agent shares the base."""
        import torch

        self._check_agent(agent)
        with torch.no_grad(), self.model.disable_adapter():
            return self._logprobs(prompt_ids, response_ids, temperature)

    def values(self, prompt_ids: Ids, response_ids: Ids) -> Tensor:
        """(B, R) critic values of the state before each response token; column 0 (the prompt's last
        position) is the action-level value. Critic adapter active; carries gradients."""
        if self.value_head is None:
            raise ConfigError("values: these policies were built with critic=False; build them with critic=True")
        batch = pack(prompt_ids, response_ids, pad_id=self.pad_id, device=self.device)
        with self.using(CRITIC), self._dropout_mode():
            decoder = self.model.get_base_model().get_decoder()
            hidden = decoder(
                input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids
            ).last_hidden_state
        start = batch.prompt_len - 1
        states = hidden[:, start : start + batch.response_len]
        return self.value_head(states).squeeze(-1) * batch.response_mask  # type: ignore[no-any-return]

    def _logprobs(self, prompt_ids: Ids, response_ids: Ids, temperature: float) -> Logprobs:
        if not temperature > 0:
            raise ConfigError(
                f"logprobs need the sampling temperature > 0 (greedy has no distribution), got {temperature}"
            )
        batch = pack(prompt_ids, response_ids, pad_id=self.pad_id, device=self.device)
        with self._dropout_mode():
            logits = self._response_logits(batch)
        return token_logprobs(logits, batch.responses, temperature) * batch.response_mask, batch.response_mask

    def _response_logits(self, batch: Packed) -> Tensor:
        """(B, R, V) logits at the positions that predict the response tokens (prompt's last onwards)."""
        ids, mask, positions = batch.input_ids, batch.attention_mask, batch.position_ids
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=batch.response_len + 1
        )
        return out.logits[:, :-1]  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def _dropout_mode(self) -> Iterator[None]:
        """Train mode (LoRA dropout on) only for passes that take gradients and only when dropout > 0."""
        import torch

        self.model.train(self.dropout > 0 and torch.is_grad_enabled())
        try:
            yield
        finally:
            self.model.eval()

    def parameters_of(self, adapter: str) -> list[nn.Parameter]:
        """The trainable weights of an agent's adapter; for ``"critic"``, its adapter plus the value head."""
        self._check_adapter(adapter)
        params = list(self._lora[adapter].values())
        return params + list(self.value_head.parameters()) if adapter == CRITIC and self.value_head else params

    def adapter_state(self, adapter: str) -> dict[str, Tensor]:
        """A detached copy of an adapter's weights, keyed as peft saves them (plus ``value_head.*`` for the critic)."""
        return {key: p.detach().clone() for key, p in self._weights(adapter).items()}

    def load_adapter_state(self, adapter: str, state: dict[str, Tensor]) -> None:
        """Overwrite an adapter's weights with ``state`` (as :meth:`adapter_state` returns it), exactly.

        Raises:
            ConfigError: the keys or shapes differ from this adapter's.
        """
        targets = self._weights(adapter)
        what = f"adapter {adapter!r}: state does not fit (rank {self.rank}, targets {self.target_modules})"
        policy_io.copy_state(targets, state, what=what)

    def manifest(self) -> dict[str, Any]:
        """What a saved folder must match to load into these policies: agents, critic, rank, alpha, targets."""
        return {"agents": list(self.agents), "critic": self.critic, "rank": self.rank,
                "alpha": self.alpha, "target_modules": list(self.target_modules)}  # fmt: skip

    def save(self, folder: str | Path) -> Path:
        """Write every adapter as a peft folder ``<folder>/<name>/``, the value head, and a manifest
        (:mod:`optimizers.marft.policy_io` describes the folder)."""
        states = {name: self.adapter_state(name) for name in self.adapters}
        configs = {name: self.model.peft_config[name] for name in self.adapters}
        root = policy_io.save(folder, states, configs, self.manifest())
        log.info("saved adapters %s to %s", self.adapters, root)
        return root

    def load(self, folder: str | Path) -> None:
        """Restore every adapter and the value head from :meth:`save`'s folder, bit for bit.

        Raises:
            ConfigError: no saved team there, or one with other agents, rank, targets or critic.
        """
        for name, state in policy_io.load(folder, self.manifest(), self.adapters).items():
            self.load_adapter_state(name, state)

    def _weights(self, adapter: str) -> dict[str, nn.Parameter]:
        """An adapter's weights keyed as saved: peft's keys, plus ``value_head.*`` for the critic."""
        self._check_adapter(adapter)
        weights = dict(self._lora[adapter])
        if adapter == CRITIC and self.value_head is not None:
            weights.update({f"{policy_io.HEAD_PREFIX}{k}": p for k, p in self.value_head.named_parameters()})
        return weights

    def _check_agent(self, agent: str) -> None:
        if agent not in self.agents:
            raise ConfigError(f"unknown agent {agent!r}; these policies have agents {self.agents}")

    def _check_adapter(self, adapter: str) -> None:
        if adapter not in self.adapters:
            raise ConfigError(f"unknown adapter {adapter!r}; these policies have adapters {self.adapters}")


def _checked_agents(agents: Sequence[str]) -> tuple[str, ...]:
    names = (agents,) if isinstance(agents, str) else tuple(agents)
    if not names or len(set(names)) != len(names):
        raise ConfigError(f"AgentPolicies: agents must be distinct names, at least one; got {names!r}")
    for name in names:
        # peft keys weights by adapter name: it must be one path segment and not inside its "lora_" prefix
        if not isinstance(name, str) or not name.isidentifier() or name == CRITIC or name in "lora_":
            raise ConfigError(f"AgentPolicies: agent {name!r} must be an identifier, not 'critic' nor part of 'lora_'")
    return names


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """Token ids that end a response: the tokenizer's EOS and the model's generation EOS id(s)."""
    eos = getattr(model.generation_config, "eos_token_id", None)
    ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    if not ids:
        raise ConfigError("AgentPolicies: neither the tokenizer nor the model names an EOS token; set eos_token")
    return ids
