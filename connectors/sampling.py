"""Sampling settings and maths shared by the local backends (``LocalChat``, ``VLLMChat``): OpenAI-style
parameters validated into ``GenerationParams``, nucleus sampling with a seeded generator, OpenAI's
presence and frequency penalties, stop strings.

torch is imported inside the functions that need it, never when ``connectors`` is imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from connectors.errors import ConfigError


@dataclass(frozen=True)
class GenerationParams:
    """The sampling settings of one call, validated."""

    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    adapter: str | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0


def generation_params(
    default_max_tokens: int,
    max_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    seed: int | None,
    stop: str | Sequence[str] | None,
    adapter: str | None = None,
    *,
    presence_penalty: float | None = None,
    frequency_penalty: float | None = None,
) -> GenerationParams:
    """OpenAI-style sampling arguments, validated; ``None`` means the default (``default_max_tokens``,
    greedy, no nucleus cut, no penalty). Shared by the local backends (``LocalChat``, ``VLLMChat``).

    Example:
        >>> generation_params(64, None, None, 0.9, 7, "###", frequency_penalty=0.5).frequency_penalty
        0.5
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
    presence = _penalty("presence_penalty", presence_penalty)
    frequency = _penalty("frequency_penalty", frequency_penalty)
    return GenerationParams(n, float(temperature), float(top_p), seed, stops, adapter, presence, frequency)


def _penalty(name: str, value: float | None) -> float:
    """A penalty in OpenAI's range [-2, 2] (None: 0)."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -2.0 <= value <= 2.0:
        raise ConfigError(f"{name} must be a number in [-2, 2], got {value!r}")
    return float(value)


def penalize(logits: Any, generated: Any, presence: float, frequency: float) -> Any:
    """OpenAI's presence and frequency penalties: ``logits[j] - c[j] * frequency - (c[j] > 0) * presence``,
    where ``c[j]`` counts token ``j`` among each row's ``generated`` tokens (the answer so far, not the
    prompt). Positive values push the answer towards tokens it has not used yet; negative ones, back."""
    import torch

    counts = torch.zeros_like(logits, dtype=torch.float32)
    counts.scatter_add_(1, generated, torch.ones_like(generated, dtype=torch.float32))
    penalty = counts * frequency + (counts > 0).float() * presence
    return (logits.float() - penalty).to(logits.dtype)


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


class Penalties:
    """A logits processor applying ``penalize`` to the tokens generated after the first ``prompt_length``."""

    def __init__(self, presence: float, frequency: float, prompt_length: int) -> None:
        self.presence = presence
        self.frequency = frequency
        self.prompt_length = prompt_length

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        return penalize(scores, input_ids[:, self.prompt_length :], self.presence, self.frequency)


def logits_processors(params: GenerationParams, generator: Any, prompt_length: int, mask: Any = None) -> list[Any]:
    """What transformers' ``generate`` applies to each step's logits, in order: the penalties (when set),
    the grammar ``mask`` (when given: ``connectors.constrained.GrammarMask``), then the seeded sampler (when
    sampling: ``generator`` is not None), which so draws only tokens the grammar allows."""
    out: list[Any] = []
    if params.presence_penalty or params.frequency_penalty:
        out.append(Penalties(params.presence_penalty, params.frequency_penalty, prompt_length))
    if mask is not None:
        out.append(mask)
    if generator is not None:
        out.append(SeededSampler(params.temperature, params.top_p, generator))
    return out


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


__all__ = [
    "GenerationParams", "Penalties", "SeededSampler", "generation_params", "logits_processors", "nucleus_probs",
    "penalize", "truncate_at_stop",
]  # fmt: skip
