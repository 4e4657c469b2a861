"""Multi-agent PPO over one base model with one LoRA adapter per agent (MARFT, arXiv 2504.16129).

One iteration, top to bottom (``train``):

1. roll out a batch of team episodes: agents act in team order, agent m sees agents 1..m-1
   (``rollout.collect``);
2. score them: the team reward sits on the last agent's action (earlier agents get 0), so every value
   estimates the same team return;
3. advantages: GAE chained across the agents (action level: one position per agent; token level: one
   per generated token), or critic-free group advantages; then normalised globally or per agent;
4. PPO: recompute every agent's log-probs with the training model, clipped surrogate with a per-agent
   ratio (per token, or per answer), optional KL to the adapter-free base, gradient clipping; all agents
   at once or round-robin one agent per iteration; the critic (its own adapter + a value head) regresses
   the returns;
5. checkpoint: adapters, value head, optimizer states and every random state, so a resumed run
   continues bit for bit.

The maths are the pure functions of ``optimizers.marft.maths``; this module only orders them.

Example:
    >>> Args(steps=2, batch_size=8).updates_per_step(agents=2)
    2
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from connectors import ConfigError
from optimizers.marft import checkpoint
from optimizers.marft import maths as M
from optimizers.marft.rollout import Batch, MarftTask, collect

if TYPE_CHECKING:
    import torch

    from optimizers.marft.policy import AgentPolicies

log = logging.getLogger(__name__)

CRITIC = "critic"


@dataclass(frozen=True)
class Args:
    """MARFT settings; each comment is the help text of the field."""

    steps: int = 100  # PPO iterations (one rollout batch and its updates each)
    batch_size: int = 64  # episodes per iteration
    group_size: int = 1  # episodes per drawn state (group advantages need > 1)
    max_new_tokens: int = 1  # tokens each agent may say
    temperature: float = 1.0  # sampling temperature; the ratio uses the same one
    lr: float = 3e-3  # Adam learning rate of the agents' adapters
    critic_lr: float = 3e-3  # Adam learning rate of the critic adapter and value head
    anneal_lr: bool = True  # decay both learning rates linearly to 0 at the last iteration
    epochs: int = 2  # passes over each batch
    minibatches: int = 2  # minibatches per pass
    clip: float = 0.2  # PPO clip range epsilon
    value_clip: float | None = None  # PPO value clipping (None: plain squared error)
    gamma: float = 1.0  # discount between positions
    lam: float = 0.95  # GAE lambda
    advantage: Literal["gae", "group"] = "gae"  # chained GAE with the critic, or critic-free groups
    level: Literal["action", "token"] = "action"  # GAE positions: one per agent answer, or per token
    ratio: Literal["token", "sequence", "sequence_mean"] = "token"  # per-token or per-answer ratio
    normalise: Literal["agent", "global", "none"] = "agent"  # advantage normalisation
    kl_coef: float = 0.0  # weight of the KL to the adapter-free base
    schedule: Literal["all", "round_robin"] = "all"  # update every agent each iteration, or one in turn
    max_grad_norm: float = 1.0  # gradient clipping per parameter set
    seed: int = 0  # seeds episodes, sampling and minibatch order
    checkpoint_every: int = 10  # iterations between checkpoints (0: only at the end)

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.epochs < 1 or self.minibatches < 1:
            raise ConfigError("steps, batch_size, epochs and minibatches must all be >= 1")
        if self.batch_size % self.group_size or self.batch_size < self.minibatches:
            raise ConfigError(
                f"batch_size ({self.batch_size}) must be a multiple of group_size ({self.group_size}) "
                f"and at least minibatches ({self.minibatches})"
            )
        if self.advantage == "group" and self.group_size < 2:
            raise ConfigError("advantage='group' compares episodes of one state: set group_size >= 2")
        if self.level == "token" and self.ratio != "token":
            raise ConfigError("level='token' gives each token its own advantage: it needs ratio='token'")
        if self.temperature <= 0:
            raise ConfigError(f"temperature must be > 0 for PPO sampling, got {self.temperature}")

    def updates_per_step(self, agents: int) -> int:
        """Adapters updated per iteration: all of them, or one with round-robin."""
        return agents if self.schedule == "all" else 1


@dataclass
class StepLog:
    """What one iteration did: the batch's success and reward, and per-agent loss statistics."""

    step: int
    success: float
    reward: float
    seconds: float
    agents: dict[str, dict[str, float]] = field(default_factory=dict)
    value_loss: float | None = None


@dataclass
class Trainer:
    """Owns the optimizers and random state of a run; ``train`` drives it.

    Example:
        >>> trainer = Trainer(policy, task, Args(steps=50))  # doctest: +SKIP
        >>> history = trainer.run(checkpoint_dir="runs/relay")  # doctest: +SKIP
    """

    policy: AgentPolicies
    task: MarftTask
    args: Args
    step: int = 0
    history: list[StepLog] = field(default_factory=list)

    def __post_init__(self) -> None:
        import torch

        self.rng = random.Random(self.args.seed)
        self.generator = torch.Generator().manual_seed(self.args.seed)
        self.optimizers = {a: torch.optim.Adam(self.policy.parameters_of(a), lr=self.args.lr) for a in self.task.agents}
        if self.uses_critic:
            self.optimizers[CRITIC] = torch.optim.Adam(self.policy.parameters_of(CRITIC), lr=self.args.critic_lr)

    @property
    def uses_critic(self) -> bool:
        return self.args.advantage == "gae"

    def run(
        self, *, checkpoint_dir: str | Path | None = None, on_step: Callable[[StepLog], None] | None = None
    ) -> list[StepLog]:
        """Train up to ``args.steps`` iterations, resuming from the newest checkpoint in ``checkpoint_dir``."""
        if checkpoint_dir is not None and checkpoint.latest(checkpoint_dir) is not None:
            checkpoint.restore(self, checkpoint_dir)
            log.info("resumed MARFT at iteration %d from %s", self.step, checkpoint_dir)
        while self.step < self.args.steps:
            entry = self.iteration()
            self.history.append(entry)
            if on_step is not None:
                on_step(entry)
            every = self.args.checkpoint_every
            if checkpoint_dir is not None and (self.step == self.args.steps or (every and self.step % every == 0)):
                checkpoint.save(self, checkpoint_dir)
        return self.history

    def iteration(self) -> StepLog:
        """One rollout batch and its PPO updates."""
        started = time.perf_counter()
        a = self.args
        batch = collect(
            self.policy,
            self.task,
            episodes=a.batch_size,
            rng=self.rng,
            generator=self.generator,
            max_new_tokens=a.max_new_tokens,
            temperature=a.temperature,
            group_size=a.group_size,
        )
        targets = self.targets(batch)
        agents = self.task.agents if a.schedule == "all" else (self.task.agents[self.step % len(self.task.agents)],)
        self._set_learning_rates()
        stats = self.update(batch, targets, agents)
        self.step += 1
        entry = StepLog(
            self.step,
            batch.success,
            batch.mean_reward,
            round(time.perf_counter() - started, 3),
            {k: v for k, v in stats.items() if k != CRITIC},
            stats.get(CRITIC, {}).get("value_loss"),
        )
        log.info("MARFT iteration %d: success %.2f", self.step, entry.success)
        return entry

    def targets(self, batch: Batch) -> Targets:
        """Old log-probs, advantages per agent and (with a critic) old values and returns."""
        import torch

        with torch.no_grad():
            old = [
                self.policy.logprobs(t.agent, t.prompt_ids, t.response_ids, temperature=self.args.temperature)
                for t in batch.turns
            ]
            ref: list[torch.Tensor | None] = [None] * len(batch.turns)
            if self.args.kl_coef:
                ref = [
                    self.policy.reference_logprobs(
                        t.agent, t.prompt_ids, t.response_ids, temperature=self.args.temperature
                    )[0]
                    for t in batch.turns
                ]
            if self.uses_critic:
                values = [self.policy.values(t.prompt_ids, t.response_ids) for t in batch.turns]
                advantages, returns = advantages_gae(batch, values, [m for _, m in old], self.args)
            else:
                values, returns = [], []
                advantages = advantages_group(batch, [m for _, m in old], self.args)
        return Targets([lp for lp, _ in old], [m for _, m in old], ref, advantages, values, returns)

    def update(self, batch: Batch, targets: Targets, agents: Sequence[str]) -> dict[str, dict[str, float]]:
        """PPO epochs over minibatches for ``agents`` (and the critic); mean statistics per agent."""
        import torch

        a = self.args
        sums: dict[str, dict[str, float]] = {}
        count = len(batch.rewards)
        index = {t.agent: m for m, t in enumerate(batch.turns)}
        for _ in range(a.epochs):
            order = torch.randperm(count, generator=self.generator).tolist()
            for chunk in _chunks(order, a.minibatches):
                for agent in agents:
                    _accumulate(sums, agent, self.policy_step(batch, targets, index[agent], chunk))
                if self.uses_critic:
                    _accumulate(sums, CRITIC, self.critic_step(batch, targets, chunk))
        passes = a.epochs * a.minibatches
        return {k: {s: v / passes for s, v in d.items()} for k, d in sums.items()}

    def policy_step(self, batch: Batch, targets: Targets, m: int, rows: list[int]) -> dict[str, float]:
        a, turn = self.args, batch.turns[m]
        new, mask = self.policy.logprobs(
            turn.agent,
            [turn.prompt_ids[i] for i in rows],
            [turn.response_ids[i] for i in rows],
            temperature=a.temperature,
        )
        loss, stats = M.ppo_loss(
            new, targets.logprobs[m][rows], targets.advantages[m][rows], mask, clip=a.clip, level=a.ratio
        )
        ref = targets.reference[m]
        if ref is not None:
            kl = M.kl_to_reference(new, ref[rows], mask)
            loss = loss + a.kl_coef * kl
            stats = {**stats, "kl_ref": kl.detach()}
        grad_norm = self._descend(turn.agent, loss)
        return {"loss": float(loss.detach()), "grad_norm": grad_norm, **{k: float(v) for k, v in stats.items()}}

    def critic_step(self, batch: Batch, targets: Targets, rows: list[int]) -> dict[str, float]:
        a = self.args
        losses = []
        for m, turn in enumerate(batch.turns):
            values = self.policy.values([turn.prompt_ids[i] for i in rows], [turn.response_ids[i] for i in rows])
            mask = targets.masks[m][rows]
            if a.level == "action":  # the value of the state before the answer
                values, mask = values[:, :1], mask.new_ones((len(rows), 1))
            old = targets.values[m][rows][:, : values.shape[1]]
            losses.append(M.value_loss(values, targets.returns[m][rows], mask, old_values=old, clip=a.value_clip))
        loss = sum(losses[1:], losses[0]) / len(losses)
        grad_norm = self._descend(CRITIC, loss)
        return {"value_loss": float(loss.detach()), "grad_norm": grad_norm}

    def _set_learning_rates(self) -> None:
        """Linear annealing (as in CleanRL's PPO): late updates are small, so a learned protocol stays learned."""
        frac = 1.0 - self.step / self.args.steps if self.args.anneal_lr else 1.0
        for who, optimizer in self.optimizers.items():
            base = self.args.critic_lr if who == CRITIC else self.args.lr
            for group in optimizer.param_groups:
                group["lr"] = base * frac

    def _descend(self, who: str, loss: torch.Tensor) -> float:
        import torch

        optimizer = self.optimizers[who]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = self.policy.parameters_of(who)
        norm = torch.nn.utils.clip_grad_norm_(params, self.args.max_grad_norm)
        optimizer.step()
        return float(norm)

    def state(self) -> dict[str, Any]:
        """Everything but the weights a bit-for-bit resume needs."""
        return {
            "step": self.step,
            "args": asdict(self.args),
            "rng": self.rng.getstate(),
            "generator": self.generator.get_state(),
            "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()},
            "history": [asdict(h) for h in self.history],
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.rng.setstate(state["rng"])
        self.generator.set_state(state["generator"])
        for k, o in self.optimizers.items():
            o.load_state_dict(state["optimizers"][k])
        self.history = [StepLog(**h) for h in state["history"]]


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


def _chunks(order: list[int], parts: int) -> list[list[int]]:
    size = -(-len(order) // parts)
    return [order[i : i + size] for i in range(0, len(order), size)]


def _accumulate(sums: dict[str, dict[str, float]], key: str, stats: dict[str, float]) -> None:
    target = sums.setdefault(key, {})
    for name, value in stats.items():
        if not name.startswith("_"):
            target[name] = target.get(name, 0.0) + value


def evaluate(
    policy: AgentPolicies,
    task: MarftTask,
    *,
    episodes: int,
    seed: int,
    temperature: float = 1.0,
    max_new_tokens: int = 1,
) -> float:
    """The team's success rate on ``episodes`` fresh episodes (its own seeds: training state untouched)."""
    import torch

    batch = collect(
        policy,
        task,
        episodes=episodes,
        rng=random.Random(seed),
        generator=torch.Generator().manual_seed(seed),
        max_new_tokens=max_new_tokens,
        temperature=temperature,
    )
    return batch.success
