"""The maths of LoRA MARFT (multi-agent PPO) as pure torch functions: no state, no I/O.

A batch holds B trajectories, each a flat sequence of T positions in time order. A position is one
agent's action (action level: agent 1 of step 1, …, agent M of step 1, agent 1 of step 2, …) or one
generated token (token level: agent 1's tokens, then agent 2's, …). Chaining across agents (MARFT;
docs/design/decisions.md, "LoRA MARFT") is GAE run over that flat sequence: the last agent of a step
bootstraps from the first agent of the next. The team reward sits on the last position of each env step
(earlier agents get r = 0), so every value estimates the same team return.

Masks: nonzero entries are valid positions. Masked positions never leak: whatever they hold (even NaN)
changes no result, and per-position outputs are 0 there.

Example:
    >>> r = torch.tensor([[0.0, 1.0]])  # two agents, one step, team reward on the last agent
    >>> v = torch.tensor([[0.5, 0.5]])
    >>> adv, ret = gae(r, v, torch.ones(1, 2), gamma=1.0, lam=1.0)
    >>> ret.tolist()  # both agents' values target the same team return
    [[1.0, 1.0]]
"""

from __future__ import annotations

import logging
from typing import Literal

import torch

from connectors.errors import ConfigError

logger = logging.getLogger(__name__)

Level = Literal["token", "sequence", "sequence_mean"]
LEVELS: tuple[str, ...] = ("token", "sequence", "sequence_mean")


def _valid(mask: torch.Tensor) -> torch.Tensor:
    return mask.bool() if mask.dtype != torch.bool else mask


def _same_shape(where: str, **tensors: torch.Tensor | None) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items() if t is not None}
    if len(set(shapes.values())) > 1:
        raise ConfigError(f"{where}: expected tensors of one shape, got {shapes}")


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over valid positions: Σ mask·x / Σ mask; an empty mask gives 0, not NaN.

    Example:
        >>> masked_mean(torch.tensor([1.0, 3.0, 100.0]), torch.tensor([1, 1, 0])).item()
        2.0
    """
    valid = _valid(mask).expand_as(x)
    kept = torch.where(valid, x, torch.zeros((), dtype=x.dtype))
    if dim is None:
        return kept.sum() / valid.sum().clamp(min=1)
    return kept.sum(dim) / valid.sum(dim).clamp(min=1)


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    last_values: torch.Tensor | None = None,
    dones: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over (B, T), chained across agents; returns (advantages, returns).

    δ_t = r_t + γ·V_t'·(1 − done_t) − V_t and A_t = δ_t + γλ·(1 − done_t)·A_t', where t' is the next
    *valid* position (masked ones are skipped); after the last valid position V = ``last_values``
    (default 0). ``dones`` is 1 where the episode ends after that position; a done on a masked position
    is ignored. returns = A + V. Both come out detached (they are targets) and 0 where masked.

    Example:
        >>> adv, ret = gae(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.2, 0.6]]), torch.ones(1, 2),
        ...                gamma=1.0, lam=0.5)
        >>> [round(a, 4) for a in adv[0].tolist()]  # A1 = 0.4; A0 = (0.6 − 0.2) + 0.5·0.4
        [0.6, 0.4]
    """
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ConfigError(f"gae: expected gamma and lam in [0, 1], got gamma={gamma}, lam={lam}")
    _same_shape("gae", rewards=rewards, values=values, mask=mask, dones=dones)
    if rewards.dim() != 2:
        raise ConfigError(f"gae: expected (B, T) tensors, got shape {tuple(rewards.shape)}")
    batch, steps = rewards.shape
    if last_values is not None and tuple(last_values.shape) != (batch,):
        raise ConfigError(f"gae: expected last_values of shape ({batch},), got {tuple(last_values.shape)}")
    with torch.no_grad():
        valid = _valid(mask)
        zero = torch.zeros((), dtype=values.dtype)
        r = torch.where(valid, rewards.to(values.dtype), zero)
        v = torch.where(valid, values, zero)
        cont = torch.ones_like(v) if dones is None else 1.0 - torch.where(valid, dones.to(v.dtype), zero)
        next_value = torch.zeros(batch, dtype=v.dtype) if last_values is None else last_values.to(v.dtype)
        next_adv = torch.zeros(batch, dtype=v.dtype)
        advantages = torch.zeros_like(v)
        for t in range(steps - 1, -1, -1):
            delta = r[:, t] + gamma * next_value * cont[:, t] - v[:, t]
            adv_t = delta + gamma * lam * cont[:, t] * next_adv
            advantages[:, t] = torch.where(valid[:, t], adv_t, zero)
            next_value = torch.where(valid[:, t], v[:, t], next_value)
            next_adv = torch.where(valid[:, t], adv_t, next_adv)
        returns = torch.where(valid, advantages + v, zero)
    return advantages, returns


def _standardise(x: torch.Tensor, keys: torch.Tensor, eps: float, *, scale: bool = True) -> torch.Tensor:
    """(x − mean of its key) / (population std of its key + eps), for 1-D x and keys."""
    _, inverse = torch.unique(keys, return_inverse=True)
    count = torch.bincount(inverse).to(x.dtype)
    mean = torch.zeros_like(count).index_add_(0, inverse, x) / count
    centred = x - mean[inverse]
    if not scale:
        return centred
    var = torch.zeros_like(count).index_add_(0, inverse, centred * centred) / count
    return centred / (var.sqrt()[inverse] + eps)


def group_advantages(
    rewards: torch.Tensor, groups: torch.Tensor, *, eps: float = 1e-6, scale: bool = True
) -> torch.Tensor:
    """Critic-free (GRPO-style) advantages: (r − mean of its group) / (std of its group + eps).

    ``rewards`` and ``groups`` are (N,); ``groups`` holds int64 ids in any order. The std is the
    population std (unbiased=False), so a group of one element (or of equal rewards) gives 0.
    ``scale=False`` only centres.

    Example:
        >>> adv = group_advantages(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([0, 0, 1]))
        >>> [round(a, 4) for a in adv.tolist()]  # group 0: mean 2, std 1; group 1 has one element
        [-1.0, 1.0, 0.0]
    """
    _same_shape("group_advantages", rewards=rewards, groups=groups)
    if rewards.dim() != 1:
        raise ConfigError(f"group_advantages: expected (N,) tensors, got shape {tuple(rewards.shape)}")
    if rewards.numel() == 0:
        return rewards.clone()
    return _standardise(rewards, groups, eps, scale=scale)


def normalise(
    advantages: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    keys: torch.Tensor | None = None,
    eps: float = 1e-8,
) -> torch.Tensor:
    """Advantages standardised over valid positions: (A − mean) / (std + eps), masked positions 0.

    Global when ``keys`` is None; else per key (``keys`` is an int64 tensor broadcastable to
    ``advantages``): per agent id, or per (prompt id, agent id) as in Dr. MAS, which stabilises
    heterogeneous agents. The std is the population std (unbiased=False); a key with one valid element
    is centred to 0.

    Example:
        >>> a = torch.tensor([[1.0, 10.0], [3.0, 30.0]])  # columns are agents 0 and 1
        >>> [[round(x, 4) for x in row] for row in normalise(a, keys=torch.tensor([0, 1])).tolist()]
        [[-1.0, -1.0], [1.0, 1.0]]
    """
    valid = torch.ones_like(advantages, dtype=torch.bool) if mask is None else _valid(mask)
    _same_shape("normalise", advantages=advantages, mask=valid)
    if keys is None:
        keys = torch.zeros((), dtype=torch.int64)
    try:
        keys = keys.expand_as(advantages)
    except RuntimeError as exc:
        raise ConfigError(
            f"normalise: keys of shape {tuple(keys.shape)} do not broadcast to {tuple(advantages.shape)}"
        ) from exc
    out = torch.zeros_like(advantages)
    if valid.any():
        out[valid] = _standardise(advantages[valid], keys[valid], eps)
    return out


def log_ratio(logp_new: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor, *, level: Level) -> torch.Tensor:
    """log ρ = log π_new − log π_old over a (B, R) batch of responses' token log-probs.

    ``level``: "token" → per token (B, R), 0 where masked; "sequence" → summed over the response
    (B,), the action-level ratio of MARFT; "sequence_mean" → mean over its tokens (B,), the log of the
    geometric mean of token ratios (ReMA's turn-level ratio); an empty response gives 0.

    Example:
        >>> new, old = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])
        >>> log_ratio(new, old, torch.ones(1, 2), level="sequence").tolist()
        [-0.5]
    """
    _same_shape("log_ratio", logp_new=logp_new, logp_old=logp_old, mask=mask)
    valid = _valid(mask)
    diff = torch.where(valid, logp_new - logp_old, torch.zeros((), dtype=logp_new.dtype))
    if level == "token":
        return diff
    if level == "sequence":
        return diff.sum(-1)
    if level == "sequence_mean":
        return diff.sum(-1) / valid.sum(-1).clamp(min=1)
    raise ConfigError(f"log_ratio: expected level in {LEVELS}, got {level!r}")


def ppo_loss(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: float = 0.2,
    level: Level = "token",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate −min(ρA, clip(ρ, 1−ε, 1+ε)A), averaged over valid units; returns (loss, stats).

    Units are tokens at level "token" (``advantages`` (B, R), or (B,) shared by a response's tokens)
    and responses at the sequence levels (``advantages`` (B,); responses with no valid token are left
    out of the mean). Stats, over the same units and detached: ``clip_fraction`` (share whose gradient
    the clip removed: ρ > 1+ε with A > 0, or ρ < 1−ε with A < 0), ``approx_kl`` (k3: mean of
    (ρ − 1) − log ρ), ``ratio_mean`` and ``count`` (units averaged). Nothing is ever skipped.

    Example:
        >>> lp = torch.log(torch.tensor([[1.5]]))  # ρ = 1.5 with A = 2 is clipped to 1.2·2
        >>> loss, stats = ppo_loss(lp, torch.zeros(1, 1), torch.tensor([[2.0]]), torch.ones(1, 1))
        >>> round(loss.item(), 4), stats["clip_fraction"].item()
        (-2.4, 1.0)
    """
    if not clip > 0:
        raise ConfigError(f"ppo_loss: expected clip > 0, got {clip}")
    log_rho = log_ratio(logp_new, logp_old, mask, level=level)
    units = _valid(mask) if level == "token" else _valid(mask).any(-1)
    if level == "token" and tuple(advantages.shape) == tuple(units.shape[:1]):
        advantages = advantages.unsqueeze(-1).expand_as(log_rho)
    if tuple(advantages.shape) != tuple(units.shape):
        raise ConfigError(
            f"ppo_loss: expected advantages of shape {tuple(units.shape)} at level {level!r}, "
            f"got {tuple(advantages.shape)}"
        )
    adv = torch.where(units, advantages.detach(), torch.zeros((), dtype=log_rho.dtype))
    rho = torch.exp(log_rho)
    surrogate = torch.minimum(rho * adv, torch.clamp(rho, 1.0 - clip, 1.0 + clip) * adv)
    loss = -masked_mean(surrogate, units)
    with torch.no_grad():
        clipped = ((rho > 1.0 + clip) & (adv > 0)) | ((rho < 1.0 - clip) & (adv < 0))
        stats = {
            "clip_fraction": masked_mean(clipped.to(rho.dtype), units),
            "approx_kl": masked_mean((rho - 1.0) - log_rho, units),
            "ratio_mean": masked_mean(rho, units),
            "count": units.sum(),
        }
    return loss, stats


def value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    old_values: torch.Tensor | None = None,
    clip: float | None = None,
) -> torch.Tensor:
    """0.5·mean (V − R)² over valid positions; with ``clip`` (which needs ``old_values``) the PPO clipped loss.

    Clipped: V_c = V_old + clip(V − V_old, −c, c) and the loss is 0.5·mean max((V − R)², (V_c − R)²).
    ``old_values`` without ``clip`` are not used (``clip=None`` means no clipping).

    Example:
        >>> value_loss(torch.tensor([1.0, 2.0]), torch.tensor([2.0, 2.0]), torch.ones(2)).item()
        0.25
    """
    if clip is not None and old_values is None:
        raise ConfigError(f"value_loss: clip={clip} needs old_values (the values at rollout time), got None")
    _same_shape("value_loss", values=values, returns=returns, mask=mask, old_values=old_values)
    valid, zero = _valid(mask), torch.zeros((), dtype=values.dtype)
    target = torch.where(valid, returns.detach(), zero)
    error = torch.where(valid, values - target, zero) ** 2
    if old_values is not None and clip is not None:
        if not clip > 0:
            raise ConfigError(f"value_loss: expected clip > 0, got {clip}")
        old = torch.where(valid, old_values.detach(), zero)
        clipped = torch.where(valid, old + torch.clamp(values - old, -clip, clip) - target, zero)
        error = torch.maximum(error, clipped**2)
    return 0.5 * masked_mean(error, valid)


def kl_to_reference(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(π ‖ π_ref) by the k3 estimator exp(r) − 1 − r, r = log π_ref − log π, mean over valid tokens.

    Each term is ≥ 0, so the estimate is too; ``ref_logp`` (the adapter-free base) is not differentiated.

    Example:
        >>> kl_to_reference(torch.tensor([-1.0]), torch.tensor([-1.0]), torch.ones(1)).item()
        0.0
    """
    _same_shape("kl_to_reference", logp=logp, ref_logp=ref_logp, mask=mask)
    valid = _valid(mask)
    r = torch.where(valid, ref_logp.detach() - logp, torch.zeros((), dtype=logp.dtype))
    return masked_mean(torch.exp(r) - 1.0 - r, valid)
