"""MARFT advantages: chained GAE over the agents' positions, or critic-free group advantages.

The team reward sits on the last valid position of the last agent (earlier agents get 0), so every
value estimates the same team return. GAE runs over the agents' positions chained in team order (one
per answer at the action level, one per generated token at the token level); group advantages compare
each episode's reward with its group's. Both are then normalised (globally or per agent) and shaped
for the ratio: (B, R) per token, or (B,) per answer.

The maths are the pure functions of ``optimizers.marft.maths``; this module only arranges the batch.

Example:
    >>> import torch
    >>> from optimizers.marft.rollout import AgentTurns, Batch
    >>> from optimizers.marft.args import Args
    >>> turn = AgentTurns("solo", [[1]] * 4, [[2]] * 4, ["x"] * 4)
    >>> batch = Batch((turn,), rewards=[1.0, 0.0, 1.0, 1.0], groups=[0, 0, 1, 1])
    >>> args = Args(batch_size=4, advantage="group", group_size=2, normalise="none", ratio="sequence")
    >>> [round(a, 3) for a in advantages_group(batch, [torch.ones(4, 1)], args)[0].tolist()]
    [1.0, -1.0, 0.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from optimizers.marft import maths as M

if TYPE_CHECKING:
    import torch

    from optimizers.marft.args import Args
    from optimizers.marft.rollout import Batch


@dataclass(frozen=True)
class Targets:
    """Per agent (in team order): old log-probs and masks (B, R), reference log-probs, advantages
    ((B, R) for the token ratio, (B,) for answer-level ratios), and with a critic old values and returns."""

    logprobs: list[torch.Tensor]
    masks: list[torch.Tensor]
    reference: list[torch.Tensor | None]
    advantages: list[torch.Tensor]
    values: list[torch.Tensor]
    returns: list[torch.Tensor]


def advantages_gae(
    batch: Batch, values: Sequence[torch.Tensor], masks: Sequence[torch.Tensor], args: Args
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Chained GAE over the agents' positions (one per answer, or one per token), normalised, split back."""
    import torch

    if args.level == "action":
        spans = [v[:, :1] for v in values]
        valid = [torch.ones_like(s) for s in spans]
    else:
        spans, valid = list(values), [m.to(values[0].dtype) for m in masks]
    v, mask = torch.cat(spans, dim=1), torch.cat(valid, dim=1)
    rewards = torch.zeros_like(v)
    last = _last_valid(mask)
    rewards[torch.arange(v.shape[0]), last] = torch.tensor(batch.rewards, dtype=v.dtype)
    adv, ret = M.gae(rewards, v, mask, gamma=args.gamma, lam=args.lam)
    keys = torch.cat([torch.full_like(s, m, dtype=torch.int64) for m, s in enumerate(spans)], dim=1)
    adv = _normalised(adv, mask, keys, args)
    bounds = torch.tensor([0] + [s.shape[1] for s in spans]).cumsum(0).tolist()
    adv_parts = [adv[:, b:e] for b, e in zip(bounds, bounds[1:], strict=False)]
    ret_parts = [ret[:, b:e] for b, e in zip(bounds, bounds[1:], strict=False)]
    return [_per_ratio(p, masks[m], args) for m, p in enumerate(adv_parts)], ret_parts


def advantages_group(batch: Batch, masks: Sequence[torch.Tensor], args: Args) -> list[torch.Tensor]:
    """Critic-free: each episode's reward against its group's, the same for every agent of the team."""
    import torch

    group = M.group_advantages(torch.tensor(batch.rewards), torch.tensor(batch.groups, dtype=torch.int64))
    adv = group[:, None].repeat(1, len(batch.turns))
    keys = torch.arange(len(batch.turns))[None, :].expand_as(adv)
    adv = _normalised(adv, torch.ones_like(adv), keys, args)
    return [_per_ratio(adv[:, m : m + 1], masks[m], args) for m in range(len(batch.turns))]


def _normalised(adv: torch.Tensor, mask: torch.Tensor, keys: torch.Tensor, args: Args) -> torch.Tensor:
    if args.normalise == "none":
        return adv
    return M.normalise(adv, mask, keys=keys if args.normalise == "agent" else None)


def _per_ratio(adv: torch.Tensor, mask: torch.Tensor, args: Args) -> torch.Tensor:
    """Shape an agent's advantages for its ratio: per token (B, R), or one per answer (B,)."""
    if args.ratio != "token":
        return adv[:, 0]
    if adv.shape[1] == 1:  # an answer-level advantage on every token of the answer
        return adv.expand_as(mask) * mask
    return adv * mask


def _last_valid(mask: Any) -> Any:
    """The index of the last valid position of every row."""
    import torch

    positions = torch.arange(mask.shape[1]).expand_as(mask)
    return torch.where(mask > 0, positions, torch.full_like(positions, -1)).max(dim=1).values
