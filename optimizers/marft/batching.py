"""Pure tensor helpers for MARFT policies: pack prompt + response rows, sample a token, score tokens.

A batch row is a prompt, left-padded, followed by its response, right-padded: every prompt ends at the
same column, so the logits at column ``prompt_len - 1 + t`` predict response token ``t`` in every row.
Position ids count real tokens only, so padding changes no row's numbers.

Example:
    >>> batch = pack([[1, 5], [1, 6, 7]], [[8, 2], [9]], pad_id=0, device="cpu")
    >>> batch.input_ids.tolist()
    [[0, 1, 5, 8, 2], [1, 6, 7, 9, 0]]
    >>> batch.position_ids.tolist(), batch.response_mask.tolist()
    ([[0, 0, 1, 2, 3], [0, 1, 2, 3, 3]], [[1.0, 1.0], [1.0, 0.0]])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from connectors.errors import ConfigError

if TYPE_CHECKING:
    import torch
    from torch import Tensor

Ids = Sequence[Sequence[int]]
"""Token ids, one unpadded list per row."""


@dataclass(frozen=True)
class Packed:
    """Prompts left-padded to ``prompt_len``, then responses right-padded to ``response_len``."""

    input_ids: Tensor  # (B, P + R)
    attention_mask: Tensor  # (B, P + R), 1 on real tokens
    position_ids: Tensor  # (B, P + R), counting real tokens only
    responses: Tensor  # (B, R), padded with pad_id
    response_mask: Tensor  # (B, R) float, 1.0 on real response tokens
    prompt_len: int
    response_len: int


def pack(prompts: Ids, responses: Ids, *, pad_id: int, device: Any) -> Packed:
    """One batch of prompt + response rows: logits at ``prompt_len - 1 + t`` predict response token ``t``.

    Raises:
        ConfigError: no rows, an empty prompt, or a different number of prompts and responses.
    """
    import torch

    if not prompts or len(prompts) != len(responses) or any(len(p) == 0 for p in prompts):
        raise ConfigError(
            f"need one non-empty prompt per response; got {len(prompts)} prompts, {len(responses)} responses"
        )
    p_len, r_len = max(map(len, prompts)), max(map(len, responses))
    rows, masks = [], []
    for prompt, response in zip(prompts, responses, strict=True):
        left, right = p_len - len(prompt), r_len - len(response)
        rows.append([pad_id] * left + list(prompt) + list(response) + [pad_id] * right)
        masks.append([0] * left + [1] * (len(prompt) + len(response)) + [0] * right)
    ids = torch.tensor(rows, dtype=torch.long, device=device)
    mask = torch.tensor(masks, dtype=torch.long, device=device)
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    return Packed(ids, mask, positions, ids[:, p_len:], mask[:, p_len:].float(), p_len, r_len)


def sample_next(logits: Tensor, temperature: float, generator: torch.Generator | None) -> Tensor:
    """(B,) next tokens: argmax at temperature 0, else one draw per row from softmax(logits / T).

    The draw uses ``generator`` (the global RNG when None) on the generator's device, so a seeded CPU
    generator gives the same tokens whatever device the model is on.
    """
    import torch

    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    probs = probs.to(generator.device) if generator is not None else probs
    return torch.multinomial(probs, 1, generator=generator).squeeze(1).to(logits.device)


def token_logprobs(logits: Tensor, tokens: Tensor, temperature: float) -> Tensor:
    """(B, R) log softmax(logits / T) of the chosen ``tokens``; ``logits`` is (B, R, V)."""
    import torch

    if tokens.shape[1] == 0:
        return tokens.new_zeros(tokens.shape, dtype=torch.float32)
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
