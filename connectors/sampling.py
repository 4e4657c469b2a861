"""Sampling settings and maths shared by the local backends (``LocalChat``, ``VLLMChat``): OpenAI-style
parameters validated into ``GenerationParams``, nucleus sampling with a seeded generator, stop strings.

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


__all__ = ["GenerationParams", "SeededSampler", "generation_params", "nucleus_probs", "truncate_at_stop"]
