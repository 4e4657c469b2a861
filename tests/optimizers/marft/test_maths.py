"""The MARFT maths against numbers worked out by hand, and GAE against a plain nested-loop reference."""

from __future__ import annotations

import doctest
import math

import pytest
import torch
from torch.testing import assert_close

import optimizers.marft.maths as maths
from connectors.errors import ConfigError
from optimizers.marft.maths import (
    gae,
    group_advantages,
    kl_to_reference,
    log_ratio,
    masked_mean,
    normalise,
    ppo_loss,
    value_loss,
)

F64 = torch.float64


def t(rows: list | float) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def gae_reference(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    last_values: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE the slow obvious way: one trajectory at a time, skipping masked positions."""
    adv = [[0.0] * rewards.shape[1] for _ in range(rewards.shape[0])]
    ret = [[0.0] * rewards.shape[1] for _ in range(rewards.shape[0])]
    for b in range(rewards.shape[0]):
        next_value, next_adv = float(last_values[b]), 0.0
        for i in reversed(range(rewards.shape[1])):
            if not mask[b, i]:
                continue
            keep = 1.0 - float(dones[b, i])
            delta = float(rewards[b, i]) + gamma * next_value * keep - float(values[b, i])
            adv[b][i] = delta + gamma * lam * keep * next_adv
            ret[b][i] = adv[b][i] + float(values[b, i])
            next_value, next_adv = float(values[b, i]), adv[b][i]
    return t(adv), t(ret)


def test_the_docstring_examples_run() -> None:
    assert doctest.testmod(maths).failed == 0


def test_masked_mean_ignores_masked_positions_and_an_empty_mask_gives_zero() -> None:
    x = t([[1.0, 3.0, float("nan")], [5.0, 7.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    assert masked_mean(x, mask).item() == 2.0
    assert masked_mean(x, mask, dim=1).tolist() == [2.0, 0.0]
    assert masked_mean(x, mask.float(), dim=0).tolist() == [1.0, 3.0, 0.0]


def test_action_level_gae_chains_agents_by_hand() -> None:
    # Two agents × two steps, team reward on the last agent of each step; γ = 0.9, λ = 0.5 (γλ = 0.45).
    # Row 0: [s1a1, s1a2, s2a1, s2a2(done), pad]; last_values = 5 is ignored because of the done.
    #   A3 = 2 − 0.8 = 1.2
    #   A2 = (0 + 0.9·0.8 − 0.7) + 0.45·1.2 = 0.02 + 0.54 = 0.56        (agent 1 bootstraps from agent 2)
    #   A1 = (1 + 0.9·0.7 − 0.6) + 0.45·0.56 = 1.03 + 0.252 = 1.282      (agent 2 from agent 1 of step 2)
    #   A0 = (0 + 0.9·0.6 − 0.5) + 0.45·1.282 = 0.04 + 0.5769 = 0.6169
    # Row 1: [s1a1, pad, s1a2(done), s1a1 of a new episode, s1a2], last_values = 2 (truncated).
    #   A4 = 1 + 0.9·2 − 0.2 = 2.6
    #   A3 = (0 + 0.9·0.2 − 0.3) + 0.45·2.6 = −0.12 + 1.17 = 1.05
    #   A2 = 1 − 0.4 = 0.6                                              (done: no bootstrap across it)
    #   A0 = (0 + 0.9·0.4 − 0.5) + 0.45·0.6 = −0.14 + 0.27 = 0.13        (the pad is skipped)
    rewards = t([[0, 1, 0, 2, 0], [0, 7, 1, 0, 1]])
    values = t([[0.5, 0.6, 0.7, 0.8, 99], [0.5, -3, 0.4, 0.3, 0.2]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 0, 1, 1, 1]])
    dones = t([[0, 0, 0, 1, 0], [0, 0, 1, 0, 0]])
    adv, ret = gae(rewards, values, mask, last_values=t([5, 2]), dones=dones, gamma=0.9, lam=0.5)
    assert_close(adv, t([[0.6169, 1.282, 0.56, 1.2, 0], [0.13, 0, 0.6, 1.05, 2.6]]))
    assert_close(ret, t([[1.1169, 1.882, 1.26, 2.0, 0], [0.63, 0, 1.0, 1.35, 2.8]]))


def test_token_level_gae_over_two_agents_tokens_by_hand() -> None:
    # Agent 1 wrote 2 tokens, agent 2 wrote 3, then 2 pads; reward 1 on the last token; γ = 1, λ = 0.5.
    # δ = V_{t+1} − V_t = 0.1 inside (agent 1's last token bootstraps from agent 2's first), δ4 = 1 − 0.6.
    # A4 = 0.4, A3 = 0.1 + 0.2 = 0.3, A2 = 0.1 + 0.15 = 0.25, A1 = 0.1 + 0.125 = 0.225, A0 = 0.2125.
    rewards = t([[0, 0, 0, 0, 1, 5, 5]])
    values = t([[0.2, 0.3, 0.4, 0.5, 0.6, -9, 9]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0]])
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=0.5)
    assert_close(adv, t([[0.2125, 0.225, 0.25, 0.3, 0.4, 0, 0]]))
    assert_close(ret, t([[0.4125, 0.525, 0.65, 0.8, 1.0, 0, 0]]))
    # With γ = λ = 1 every valid position's target is the same team return (no inconsistent targets).
    _, ret = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    assert_close(ret, t([[1, 1, 1, 1, 1, 0, 0]]))


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_vectorised_gae_equals_the_loop_reference(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    shape = (6, 17)
    rewards = torch.randn(shape, generator=g, dtype=F64)
    values = torch.randn(shape, generator=g, dtype=F64)
    mask = torch.rand(shape, generator=g) > 0.25
    dones = (torch.rand(shape, generator=g) > 0.8).to(F64)
    last_values = torch.randn(shape[0], generator=g, dtype=F64)
    gamma, lam = 0.5 + 0.5 * torch.rand(1, generator=g).item(), torch.rand(1, generator=g).item()
    adv, ret = gae(rewards, values, mask, last_values=last_values, dones=dones * mask, gamma=gamma, lam=lam)
    ref_adv, ref_ret = gae_reference(rewards, values, mask, last_values, dones * mask, gamma, lam)
    assert_close(adv, ref_adv)
    assert_close(ret, ref_ret)


def test_gae_outputs_are_detached_targets() -> None:
    values = t([[0.1, 0.2]]).requires_grad_()
    adv, ret = gae(t([[0, 1]]), values, torch.ones(1, 2))
    assert not adv.requires_grad and not ret.requires_grad


def test_per_agent_normalisation_by_hand_and_global_differs() -> None:
    # Columns are agents 0, 1, 2. Agent 0: [1, 3] → mean 2, population std 1 → [−1, 1].
    # Agent 1: [10, 30] → mean 20, std 10 → [−1, 1]. Agent 2 has one valid element → 0; the pad stays 0.
    adv = t([[1, 10, 5], [3, 30, 1e6]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    per_agent = normalise(adv, mask, keys=torch.tensor([0, 1, 2]))
    assert_close(per_agent, t([[-1, -1, 0], [1, 1, 0]]))
    # Global over the five valid values: mean 49/5 = 9.8, var = (77.44+0.04+23.04+46.24+408.04)/5 = 110.96.
    global_ = normalise(adv, mask)
    std = math.sqrt(110.96)
    assert_close(global_, t([[-8.8 / std, 0.2 / std, -4.8 / std], [-6.8 / std, 20.2 / std, 0]]))
    assert not torch.allclose(global_, per_agent)


def test_per_key_normalisation_gives_mean_zero_std_one_within_each_key() -> None:
    g = torch.Generator().manual_seed(7)
    adv = torch.randn(32, 3, generator=g, dtype=F64) * t([1, 10, 100]) + t([0, 5, -50])
    # Dr. MAS: key = prompt id · M + agent id, here 4 prompts × 3 agents.
    keys = (torch.arange(32) % 4).unsqueeze(1) * 3 + torch.arange(3)
    out = normalise(adv, keys=keys)
    for key in keys.unique():
        group = out[keys == key]
        assert abs(group.mean().item()) < 1e-9
        assert abs(group.std(unbiased=False).item() - 1.0) < 1e-6


def test_group_advantages_by_hand() -> None:
    # Group 0 (positions 0, 2, 5): [1, 0, 0.5] → mean 0.5, population std √(1/6) = 0.408248.
    # Group 1 (positions 1, 4): [2, 4] → mean 3, std 1. Group 2 (position 3) has one element → 0.
    rewards = t([1, 2, 0, 7, 4, 0.5])
    groups = torch.tensor([0, 1, 0, 2, 1, 0])
    s = math.sqrt(1 / 6)
    assert_close(group_advantages(rewards, groups), t([0.5 / s, -1, -0.5 / s, 0, 1, 0]), atol=1e-5, rtol=0)
    assert_close(group_advantages(rewards, groups, scale=False), t([0.5, -1, -0.5, 0, 1, 0]))


def test_ppo_loss_clips_by_hand_and_the_clipped_tokens_get_no_gradient() -> None:
    # ε = 0.2; four valid tokens and a pad holding garbage:
    #   ρ = 1.5, A = 2  → min(3, 1.2·2) = 2.4 (clipped)      ρ = 0.5, A = −1 → min(−0.5, −0.8) = −0.8 (clipped)
    #   ρ = 1.1, A = 2  → 2.2 (inside)                         ρ = 1.5, A = −1 → min(−1.5, −1.2) = −1.5 (not clipped)
    # loss = −(2.4 − 0.8 + 2.2 − 1.5)/4 = −0.575; d loss/d log π_new = −ρA/4 where not clipped.
    rho = t([[1.5, 0.5, 1.1, 1.5, 1.0]])
    logp_old = t([[-1.0, -2.0, -0.5, -3.0, -1.0]])
    logp_new = (logp_old + rho.log() + t([[0, 0, 0, 0, 50]])).requires_grad_()
    adv = t([[2, -1, 2, -1, 1e9]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    loss, stats = ppo_loss(logp_new, logp_old, adv, mask, clip=0.2)
    assert_close(loss, torch.tensor(-0.575, dtype=F64))
    loss.backward()
    assert logp_new.grad is not None
    assert_close(logp_new.grad, t([[0, 0, -2.2 / 4, 1.5 / 4, 0]]))
    assert stats["clip_fraction"].item() == 0.5
    # k3: mean of (ρ − 1) − log ρ over the four tokens; ratio_mean = (1.5 + 0.5 + 1.1 + 1.5)/4 = 1.15.
    k3 = [r - 1 - math.log(r) for r in (1.5, 0.5, 1.1, 1.5)]
    assert_close(stats["approx_kl"], torch.tensor(sum(k3) / 4, dtype=F64))
    assert_close(stats["ratio_mean"], torch.tensor(1.15, dtype=F64))
    assert stats["count"].item() == 4


def test_sequence_and_token_ratio_levels_by_hand() -> None:
    # Token diffs: row 0 [0.5, −1.0, pad], row 1 [0.3, pad, pad].
    logp_new = t([[-1.0, -2.0, 7.0], [-0.2, 3.0, 3.0]])
    logp_old = t([[-1.5, -1.0, 0.0], [-0.5, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert_close(log_ratio(logp_new, logp_old, mask, level="token"), t([[0.5, -1.0, 0], [0.3, 0, 0]]))
    assert_close(log_ratio(logp_new, logp_old, mask, level="sequence"), t([-0.5, 0.3]))
    assert_close(log_ratio(logp_new, logp_old, mask, level="sequence_mean"), t([-0.25, 0.3]))
    adv = t([1.0, -2.0])
    # Sequence (MARFT action level): ρ0 = e^−0.5 = 0.6065, A = 1 → min(0.6065, 0.8) = e^−0.5;
    # ρ1 = e^0.3 = 1.3499, A = −2 → min(−2.6997, −2.4) = −2e^0.3. loss = −(e^−0.5 − 2e^0.3)/2.
    loss, stats = ppo_loss(logp_new, logp_old, adv, mask, level="sequence")
    assert_close(loss, torch.tensor(-(math.exp(-0.5) - 2 * math.exp(0.3)) / 2, dtype=F64))
    assert stats["clip_fraction"].item() == 0.0
    # Sequence mean (ReMA): ρ0 = e^−0.25 = 0.7788 < 0.8 with A > 0 is not clipped either.
    loss, _ = ppo_loss(logp_new, logp_old, adv, mask, level="sequence_mean")
    assert_close(loss, torch.tensor(-(math.exp(-0.25) - 2 * math.exp(0.3)) / 2, dtype=F64))
    # Token level with one advantage per response: tokens (ρ, A) = (e^0.5, 1) → 1.2, (e^−1, 1) → e^−1,
    # (e^0.3, −2) → −2e^0.3; mean over 3 tokens.
    loss, _ = ppo_loss(logp_new, logp_old, adv, mask, level="token")
    assert_close(loss, torch.tensor(-(1.2 + math.exp(-1) - 2 * math.exp(0.3)) / 3, dtype=F64))


def test_value_loss_by_hand() -> None:
    values, returns, mask = t([1, 2, 3]), t([1.5, 2, 0]), torch.tensor([1, 1, 0])
    # 0.5·((1 − 1.5)² + 0)/2 = 0.0625
    assert_close(value_loss(values, returns, mask), torch.tensor(0.0625, dtype=F64))
    # Clip 0.2 around old [0, 2, ·]: V_c = [0.2, 2]; max((−0.5)², (0.2 − 1.5)² = 1.69) → 0.5·1.69/2 = 0.4225.
    clipped = value_loss(values, returns, mask, old_values=t([0, 2, 0]), clip=0.2)
    assert_close(clipped, torch.tensor(0.4225, dtype=F64))
    # old_values without clip means no clipping.
    assert_close(value_loss(values, returns, mask, old_values=t([0, 2, 0])), torch.tensor(0.0625, dtype=F64))


def test_kl_to_reference_by_hand_and_never_negative() -> None:
    # r = ref − logp = [−0.5, 0] → (e^−0.5 − 1 + 0.5 + 0)/2 = 0.0532653.
    kl = kl_to_reference(t([[-1, -2, 4]]), t([[-1.5, -2, 0]]), torch.tensor([[1, 1, 0]]))
    assert_close(kl, torch.tensor((math.exp(-0.5) - 0.5) / 2, dtype=F64))
    g = torch.Generator().manual_seed(3)
    logp, ref = torch.randn(8, 9, generator=g), torch.randn(8, 9, generator=g)
    assert kl_to_reference(logp, ref, torch.ones(8, 9)).item() >= 0.0


def test_masked_positions_never_leak() -> None:
    g = torch.Generator().manual_seed(11)
    shape = (4, 6)
    mask = torch.rand(shape, generator=g) > 0.3
    mask[:, 0] = True
    base = {name: torch.randn(shape, generator=g, dtype=F64) for name in ("r", "v", "new", "old", "ref", "a")}
    junk = {name: torch.where(mask, x, t(float("nan"))) for name, x in base.items()}
    junk["new"] = torch.where(mask, base["new"], t(1e4))  # a huge log-prob under the mask

    def everything(x: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        new = x["new"].clone().requires_grad_()
        adv, ret = gae(x["r"], x["v"], mask, gamma=0.9, lam=0.8)
        loss, stats = ppo_loss(new, x["old"], normalise(x["a"], mask), mask)
        total = loss + value_loss(new, ret, mask) + kl_to_reference(new, x["ref"], mask)
        total = total + value_loss(new, x["r"], mask, old_values=x["v"], clip=0.1)
        total.backward()
        assert new.grad is not None
        return [adv, ret, normalise(x["a"], mask, keys=torch.arange(6)), total.detach(), new.grad, *stats.values()]

    for clean, dirty in zip(everything(base), everything(junk), strict=True):
        assert_close(dirty, clean)


def test_shape_and_level_mistakes_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="one shape"):
        gae(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))
    with pytest.raises(ConfigError, match="last_values"):
        gae(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), last_values=torch.zeros(3))
    with pytest.raises(ConfigError, match="gamma"):
        gae(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), gamma=1.5)
    with pytest.raises(ConfigError, match="level"):
        log_ratio(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), level="turn")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="advantages of shape"):
        ppo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), level="sequence")
    with pytest.raises(ConfigError, match="broadcast"):
        normalise(torch.zeros(2, 3), keys=torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ConfigError, match="needs old_values"):
        value_loss(torch.zeros(2), torch.zeros(2), torch.ones(2), clip=0.2)
