"""What ``LocalChat`` reads back from transformers' ``generate``: where an answer ends, its text cut at a stop
string, its tokens' text and log-probabilities, its usage.

torch is imported inside the functions that need it, never when ``connectors`` is imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from connectors.sampling import truncate_at_stop
from connectors.types import Completion, Usage


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """Token ids that end an answer: the model's EOS id(s) and the tokenizer's."""
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def chosen_logprobs(step_logits: Sequence[Any], tokens: Any) -> list[list[float]]:
    """Log-probabilities (of the raw model distribution) of the generated tokens, one list per row."""
    import torch

    if not step_logits:
        return [[] for _ in range(tokens.shape[0])]
    per_step = [
        torch.log_softmax(logits.float(), dim=-1).gather(1, tokens[:, t : t + 1]).squeeze(1)
        for t, logits in enumerate(step_logits)
    ]
    return torch.stack(per_step, dim=1).tolist()  # type: ignore[no-any-return]


def read_completion(
    tokenizer: Any,
    name: str,
    tokens: list[int],
    logprobs: list[float],
    prompt_tokens: int,
    ends: tuple[set[int], set[int]],
    stop: tuple[str, ...],
) -> Completion:
    """One row's answer: ``tokens`` generated after its prompt, up to the first of ``ends`` (EOS ids, which
    count as generated; and every id that ends a row, padding included), cut at the earliest ``stop`` string."""
    eos_ids, end_ids = ends
    n = next((i for i, t in enumerate(tokens) if t in end_ids), None)
    # an EOS was generated (and counts); padding after a stop string was not
    generated = len(tokens) if n is None else n + int(tokens[n] in eos_ids)
    kept = tokens[: len(tokens) if n is None else n]
    text, stopped = truncate_at_stop(tokenizer.decode(kept, skip_special_tokens=True), stop)
    finish = "stop" if stopped or n is not None else "length"
    usage = Usage(prompt_tokens, generated, 0.0)
    pieces = token_pieces(tokenizer, kept, len(text))
    return Completion(text, name, usage, tuple(logprobs[:generated]), finish, tokens=pieces)


def token_pieces(tokenizer: Any, tokens: list[int], length: int) -> tuple[str, ...]:
    """The text of each answer token, up to ``length`` characters of text (a stop string cut the rest)."""
    out: list[str] = []
    used = 0
    for t in tokens:
        if used >= length:
            break
        piece = tokenizer.decode([t], skip_special_tokens=True)
        out.append(piece)
        used += len(piece)
    return tuple(out)


__all__ = ["chosen_logprobs", "eos_token_ids", "read_completion", "token_pieces"]
