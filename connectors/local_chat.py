"""``LocalChat``: a transformers model on this machine, with real batched generation and LoRA adapters.

One base model serves every call. Prompts go through the tokenizer's chat template, are left-padded
and generated together in chunks of ``batch_size``; greedy when ``temperature`` is 0, else sampled
with a ``torch.Generator`` seeded by ``seed`` (same seed, same prompts → same text, and no global RNG
is touched). Optional peft LoRA adapters are loaded onto the one base model and picked per call.

torch, transformers and peft are imported when the model first loads, never when ``connectors`` is
imported.

Example:
    >>> from connectors import load_chat
    >>> chat = load_chat("local/smollm2", max_new_tokens=16)            # doctest: +SKIP
    >>> chat.complete("What is the capital of France?").text            # doctest: +SKIP
    'The capital of France is Paris.'
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connectors.errors import ConfigError, ConnectorError
from connectors.prompted_tools import prompted_batch
from connectors.quoting import neutralise_tokens
from connectors.tools import Tool
from connectors.types import Completion, Message, Usage

log = logging.getLogger(__name__)

DTYPES = ("float32", "bfloat16", "float16")
LOCAL_HINT = "pip install 'evolve[local]'"


def require_local(what: str) -> None:
    """Raise :class:`ConfigError` naming the ``local`` extra when torch, transformers or peft is missing.

    Args:
        what: the feature that needs them, for the message (e.g. ``"LoRA MARFT"``).
    """
    import importlib.util

    missing = [name for name in ("torch", "transformers", "peft") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"{what} needs {', '.join(missing)} from the 'local' extra: {LOCAL_HINT}")


@dataclass(frozen=True)
class GenerationParams:
    """The sampling settings of one call, validated."""

    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    adapter: str | None = None


def generation_params(
    default_max_tokens: int,
    max_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    seed: int | None,
    stop: str | Sequence[str] | None,
    adapter: str | None = None,
) -> GenerationParams:
    """OpenAI-style sampling arguments, validated; ``None`` means the default (``default_max_tokens``,
    greedy, no nucleus cut). Shared by the local backends (``LocalChat``, ``VLLMChat``).

    Example:
        >>> generation_params(64, None, None, 0.9, 7, "###")
        GenerationParams(max_new_tokens=64, temperature=0.0, top_p=0.9, seed=7, stop=('###',), adapter=None)
    """
    n = default_max_tokens if max_tokens is None else max_tokens
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    temperature = 0.0 if temperature is None else temperature
    top_p = 1.0 if top_p is None else top_p
    if temperature < 0:
        raise ConfigError(f"temperature must be >= 0, got {temperature!r}")
    if not 0.0 < top_p <= 1.0:
        raise ConfigError(f"top_p must be in (0, 1], got {top_p!r}")
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    return GenerationParams(n, float(temperature), float(top_p), seed, stops, adapter)


def nucleus_probs(logits: Any, temperature: float, top_p: float) -> Any:
    """Sampling distribution over the vocabulary: softmax(logits / T), keeping the smallest set of
    tokens whose mass reaches ``top_p`` (the most likely token always stays). Rows sum to 1."""
    import torch

    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum(dim=-1, keepdim=True)


def truncate_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """``text`` cut before the earliest stop string, and whether one was found."""
    cuts = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


class SeededSampler:
    """A logits processor that samples the next token with its own generator and leaves only that token.

    transformers' ``generate`` cannot take a ``torch.Generator``; running greedy decoding behind this
    processor gives seeded sampling without touching the global RNG.
    """

    def __init__(self, temperature: float, top_p: float, generator: Any) -> None:
        self.temperature = temperature
        self.top_p = top_p
        self.generator = generator

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        probs = nucleus_probs(scores, self.temperature, self.top_p)
        choice = torch.multinomial(probs, 1, generator=self.generator)
        return torch.full_like(scores, float("-inf")).scatter(1, choice, 0.0)


def render_prompt(tokenizer: Any, messages: Sequence[Message]) -> str:
    """The text a local model continues for ``messages``: the chat template with the generation prompt,
    or, for a base model without one, a plain transcript that ends where the answer starts.

    Tokenize it with ``add_special_tokens=False``: the template already holds the special tokens.
    MARFT trains on prompts rendered by this same function, so an adapter sees at inference exactly
    the prompt format it was trained on.
    """
    specials = special_token_texts(tokenizer)
    dicts = [{**m.to_dict(), "content": neutralise_tokens(m.content, specials)} for m in messages]
    if tokenizer.chat_template:
        return str(tokenizer.apply_chat_template(dicts, add_generation_prompt=True, tokenize=False))
    return "".join(f"{m['role']}: {m['content']}\n" for m in dicts) + "assistant:"


def special_token_texts(tokenizer: Any) -> list[str]:
    """The texts a tokenizer turns into control tokens (``<|im_start|>``, ``</s>``, added tokens): message
    text holding one is neutralised by ``render_prompt``, so a stored payload cannot open a system turn."""
    texts = set(getattr(tokenizer, "all_special_tokens", None) or [])
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    texts.update(str(getattr(t, "content", t)) for t in decoder.values())
    return sorted(texts)


class LocalChat:
    """A local Hugging Face causal LM behind the ``ChatModel`` seam.

    Args:
        model: ``"smollm2"`` (the converted default model) or a local HF folder.
        path: an explicit folder, overriding what ``model`` points to.
        device: a torch device (``"cpu"``, ``"cuda"``).
        dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        max_new_tokens: the default answer length limit (``max_tokens=`` overrides it per call).
        batch_size: how many prompts one ``generate`` call takes.
        adapters: peft LoRA adapters as ``{name: folder}``, loaded onto the one base model.
        threads: torch intra-op threads (process-wide; None leaves torch's default).

    Example:
        >>> chat = LocalChat("smollm2", max_new_tokens=8)                      # doctest: +SKIP
        >>> [c.text for c in chat.complete_batch([[Message("user", "Hi")]] * 2)]  # doctest: +SKIP
        ['Hello! How can I help you today?', 'Hello! How can I help you today?']
    """

    serves_adapters = True  # its weights live here: MARFT can train adapters for it (load_adapter serves them)
    tools_each = True  # complete_batch takes one tool list per prompt (ChatClient batches them together)

    def __init__(
        self,
        model: str = "smollm2",
        *,
        path: str | None = None,
        device: str = "cpu",
        dtype: str = "float32",
        max_new_tokens: int = 64,
        batch_size: int = 16,
        adapters: Mapping[str, str] | None = None,
        threads: int | None = None,
    ) -> None:
        if dtype not in DTYPES:
            raise ConfigError(f"LocalChat dtype must be one of {DTYPES}, got {dtype!r}")
        for field, value in (("max_new_tokens", max_new_tokens), ("batch_size", batch_size), ("threads", threads or 1)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"LocalChat {field} must be a positive integer, got {value!r}")
        self.name = f"local/{model}"
        self.model = model
        self.path = path or (None if model == "smollm2" else model)
        if self.path is not None and not Path(self.path).is_dir():
            raise ConfigError(f"LocalChat: {self.path!r} is not a local model folder (or use model='smollm2')")
        self.device = device
        self.dtype = dtype
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.adapters = dict(adapters or {})
        self.threads = threads
        self._lock = threading.Lock()
        self._model: Any = None
        self._tokenizer: Any = None

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
    ) -> list[Completion]:
        """Answers for many prompts, generated together in chunks of ``batch_size``.

        ``None`` for ``max_tokens``, ``temperature`` or ``top_p`` means the default (``max_new_tokens``,
        greedy, no nucleus cut), so callers can forward OpenAI-style parameters unchanged. ``tools`` are
        prompted in and the calls read back (``connectors.prompted_tools``); ``tools_each`` gives each
        prompt its own tools, still in one batch.
        """
        params = self._params(max_tokens, temperature, top_p, seed, stop, adapter)

        def generate(batch: list[list[Message]], prefill: str = "") -> list[Completion]:
            out: list[Completion] = []
            with self._lock:
                self._ensure_loaded()
                generator = self._generator(params)
                for start in range(0, len(batch), self.batch_size):
                    out.extend(self._generate(batch[start : start + self.batch_size], params, generator, prefill))
            return out

        return prompted_batch(generate, prompts, tools, tool_choice, tools_each)

    @property
    def folder(self) -> Path:
        """The base model's folder (for ``"smollm2"``, the converted folder, made on first use)."""
        if self.path is not None:
            return Path(self.path)
        from connectors.smollm2 import smollm2_path

        return Path(smollm2_path())

    def load_adapter(self, name: str, folder: str | Path) -> None:
        """Add a peft LoRA adapter (or replace the one called ``name``), usable as ``adapter=name`` from
        the next call on; the base model is loaded once and shared, whatever the number of adapters.

        Raises:
            ConfigError: ``folder`` holds no peft adapter, or it does not fit this base model.
        """
        if not isinstance(name, str) or not name:
            raise ConfigError(f"adapter name must be a non-empty string, got {name!r}")
        if not (Path(folder) / "adapter_config.json").is_file():
            raise ConfigError(f"adapter {name!r}: {str(folder)!r} holds no peft adapter (adapter_config.json)")
        with self._lock:
            if self._model is None:
                self.adapters[name] = str(folder)
                return
            if not self.adapters:
                self._model = _with_adapters(self._model, {name: str(folder)}).to(self.device).eval()
            else:
                if name in self.adapters:
                    with warnings.catch_warnings():  # peft warns when the adapter it drops was the active one
                        warnings.simplefilter("ignore", UserWarning)
                        self._model.delete_adapter(name)
                try:
                    with quiet_peft():
                        self._model.load_adapter(str(folder), adapter_name=name, is_trainable=False)
                except (ValueError, RuntimeError, KeyError) as e:
                    raise ConfigError(f"adapter {name!r} from {folder} does not fit {self.name}: {e}") from e
            self.adapters[name] = str(folder)
            log.info("%s: loaded adapter %s from %s", self.name, name, folder)

    def _params(
        self,
        max_tokens: int | None,
        temperature: float | None,
        top_p: float | None,
        seed: int | None,
        stop: str | Sequence[str] | None,
        adapter: str | None,
    ) -> GenerationParams:
        if adapter is not None and adapter not in self.adapters:
            raise ConfigError(f"{self.name}: unknown adapter {adapter!r}; loaded adapters: {sorted(self.adapters)}")
        return generation_params(self.max_new_tokens, max_tokens, temperature, top_p, seed, stop, adapter)

    def _generator(self, params: GenerationParams) -> Any:
        import torch

        if params.temperature == 0.0:
            return None
        seed = params.seed if params.seed is not None else random.getrandbits(63)
        return torch.Generator(device=self.device).manual_seed(int(seed))

    def _ensure_loaded(self) -> None:
        if self._model is not None:
            return
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as e:
            raise ConfigError(f"LocalChat needs the 'local' extra: {LOCAL_HINT}") from e
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        folder = str(self.folder)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, padding_side="left")
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, self.dtype), local_files_only=True)
        model = _with_adapters(model, self.adapters).to(self.device).eval()
        self._tokenizer, self._model = tokenizer, model
        log.info("loaded %s from %s (%d adapters)", self.name, folder, len(self.adapters))

    def _render(self, messages: Sequence[Message]) -> str:
        return render_prompt(self._tokenizer, messages)

    def _generate(
        self, batch: Sequence[Sequence[Message]], params: GenerationParams, generator: Any, prefill: str = ""
    ) -> list[Completion]:
        """Answers for one chunk; ``prefill`` is written at the start of every answer, which the model
        continues (the returned text leaves it out)."""
        import torch
        from transformers import GenerationConfig

        tok, model = self._tokenizer, self._model
        texts = [self._render(m) + prefill for m in batch]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        enc = enc.to(self.device)
        eos_ids = _eos_token_ids(model, tok)
        end_ids = eos_ids | {tok.pad_token_id}  # finished rows are padded; the first of either ends the answer
        config = GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            do_sample=False,
            eos_token_id=sorted(eos_ids) or None,
            pad_token_id=tok.pad_token_id,
            stop_strings=list(params.stop) or None,
            return_dict_in_generate=True,
            output_logits=True,
        )
        processors = [SeededSampler(params.temperature, params.top_p, generator)] if generator is not None else []
        try:
            with torch.inference_mode(), self._adapter_context(params.adapter):
                out = model.generate(
                    **enc, generation_config=config, logits_processor=processors, tokenizer=tok if params.stop else None
                )
        except RuntimeError as e:
            raise ConnectorError(f"{self.name}: generation failed: {e}") from e
        new_tokens = out.sequences[:, enc["input_ids"].shape[1] :]
        logprobs = _chosen_logprobs(out.logits, new_tokens)
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        return [
            self._completion(new_tokens[i].tolist(), logprobs[i], int(prompt_lens[i]), eos_ids, end_ids, params.stop)
            for i in range(len(batch))
        ]

    def _completion(
        self,
        tokens: list[int],
        logprobs: list[float],
        prompt_tokens: int,
        eos_ids: set[int],
        end_ids: set[int],
        stop: tuple[str, ...],
    ) -> Completion:
        n = next((i for i, t in enumerate(tokens) if t in end_ids), None)
        # an EOS was generated (and counts); padding after a stop string was not
        generated = len(tokens) if n is None else n + int(tokens[n] in eos_ids)
        text = self._tokenizer.decode(tokens[: len(tokens) if n is None else n], skip_special_tokens=True)
        text, stopped = truncate_at_stop(text, stop)
        finish = "stop" if stopped or n is not None else "length"
        usage = Usage(prompt_tokens, generated, 0.0)
        return Completion(text, self.name, usage, tuple(logprobs[:generated]), finish)

    def _adapter_context(self, adapter: str | None) -> contextlib.AbstractContextManager[Any]:
        if not self.adapters:
            return contextlib.nullcontext()
        if adapter is None:
            return self._model.disable_adapter()  # type: ignore[no-any-return]
        self._model.set_adapter(adapter)
        return contextlib.nullcontext()


def _with_adapters(model: Any, adapters: Mapping[str, str]) -> Any:
    if not adapters:
        return model
    try:
        from peft import PeftModel
    except ImportError as e:
        raise ConfigError(f"LoRA adapters need peft, part of the 'local' extra: {LOCAL_HINT}") from e
    items = list(adapters.items())
    for name, folder in items:
        if not Path(folder).is_dir():
            raise ConfigError(f"adapter {name!r}: {folder!r} is not a folder holding a peft adapter")
    with quiet_peft():
        peft_model = PeftModel.from_pretrained(model, items[0][1], adapter_name=items[0][0], is_trainable=False)
        for name, folder in items[1:]:
            peft_model.load_adapter(folder, adapter_name=name, is_trainable=False)
    return peft_model


@contextlib.contextmanager
def quiet_peft() -> Iterator[None]:
    """peft 0.21 calls a method transformers 5 deprecated; drop this filter once peft catches up."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
        yield


def _eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """Token ids that end an answer: the model's EOS id(s) and the tokenizer's."""
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def _chosen_logprobs(step_logits: Sequence[Any], tokens: Any) -> list[list[float]]:
    """Log-probabilities (of the raw model distribution) of the generated tokens, one list per row."""
    import torch

    if not step_logits:
        return [[] for _ in range(tokens.shape[0])]
    per_step = [
        torch.log_softmax(logits.float(), dim=-1).gather(1, tokens[:, t : t + 1]).squeeze(1)
        for t, logits in enumerate(step_logits)
    ]
    return torch.stack(per_step, dim=1).tolist()  # type: ignore[no-any-return]
