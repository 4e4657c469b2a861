"""Multi-agent PPO over one base model with one LoRA adapter per agent (MARFT, arXiv 2504.16129).

One iteration, top to bottom (``train``):

1. roll out a batch of team episodes: agents act in team order, agent m sees agents 1..m-1
   (``rollout.collect``), with the policy itself or another rollout engine (e.g. ``VLLMEngine``);
2. score them: the team reward sits on the last agent's action (earlier agents get 0), so every value
   estimates the same team return;
3. advantages: GAE chained across the agents (action level: one position per agent; token level: one
   per generated token), or critic-free group advantages; then normalised globally or per agent;
4. PPO: recompute every agent's log-probs with the training model, clipped surrogate with a per-agent
   ratio (per token, or per answer), optional KL to the adapter-free base, gradient clipping; all agents
   at once or round-robin one agent per iteration; the critic (its own adapter + a value head) regresses
   the returns; a separate rollout engine then gets the new adapters (``engine.sync(policy)``);
5. checkpoint: adapters, value head, optimizer states and every random state, so a resumed run
   continues bit for bit.

The maths are the pure functions of ``optimizers.marft.maths`` and the advantage arrangement is
``optimizers.marft.advantages``; this module only orders them.

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
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from connectors import ConfigError
from optimizers.marft import checkpoint
from optimizers.marft import maths as M
from optimizers.marft.advantages import Targets, advantages_gae, advantages_group
from optimizers.marft.args import Args
from optimizers.marft.policy_io import CRITIC
from optimizers.marft.rollout import Batch, MarftTask, RolloutEngine, collect
from optimizers.order_policy import OrderPolicy, position_returns

if TYPE_CHECKING:
    import torch

    from optimizers.marft.policy import AgentPolicies

ORDER_GROUP = "episodes"  # a MARFT task's episodes share one order group: there is no task text to group by

log = logging.getLogger(__name__)


@runtime_checkable
class SyncsWeights(Protocol):
    """A rollout engine that keeps its own copy of the agents' weights (``VLLMEngine``): the trainer
    hands it the policy after every update and after a resume."""

    def sync(self, policy: AgentPolicies) -> None: ...


@dataclass
class StepLog:
    """What one iteration did: the batch's success and reward, and per-agent loss statistics."""

    step: int
    success: float
    reward: float
    seconds: float
    agents: dict[str, dict[str, float]] = field(default_factory=dict)
    value_loss: float | None = None
    order: str | None = None  # with a learned order: the most probable one after this iteration


@dataclass
class Trainer:
    """Owns the optimizers and random state of a run; ``run`` drives it.

    ``engine`` samples the rollouts: by default the policy itself (transformers); another engine must
    be :class:`SyncsWeights` (e.g. ``VLLMEngine``) and is synced after every update. Either way the
    loss's log-probs come from the policy.

    ``order_of`` gives each episode's order (agent indices, from its state) when the caller keeps the order
    policy, as a team that learns its order does in the loop; ``args.order = "learned"`` keeps one here
    instead. Either way the rollouts act in drawn orders, which needs ``advantage = "group"``.

    Example:
        >>> trainer = Trainer(policy, task, Args(steps=50))  # doctest: +SKIP
        >>> history = trainer.run(checkpoint_dir="runs/relay")  # doctest: +SKIP
        >>> fast = Trainer(policy, task, Args(steps=50), engine=VLLMEngine(policy, smollm2_path()))  # doctest: +SKIP
    """

    policy: AgentPolicies
    task: MarftTask
    args: Args
    engine: RolloutEngine | None = None
    order_of: Callable[[Any], Sequence[int]] | None = None
    step: int = 0
    history: list[StepLog] = field(default_factory=list)

    def __post_init__(self) -> None:
        import torch

        if self.engine is not None and self.engine is not self.policy and not isinstance(self.engine, SyncsWeights):
            raise ConfigError(
                f"Trainer: a rollout engine other than the policy must take the new weights after each update "
                f"(a sync(policy) method, see SyncsWeights); {type(self.engine).__name__} has none"
            )
        if self.order_of is not None and (self.args.order == "learned" or self.args.advantage != "group"):
            raise ConfigError(
                "Trainer: order_of draws the rollouts' orders: it needs advantage='group' (GAE chains one team "
                "order), and args.order='fixed' (one order policy, the caller's)"
            )
        self.rng = random.Random(self.args.seed)
        self.generator = torch.Generator().manual_seed(self.args.seed)
        self.optimizers = {a: torch.optim.Adam(self.policy.parameters_of(a), lr=self.args.lr) for a in self.task.agents}
        self.orders = (
            OrderPolicy(self.task.agents, lr=self.args.order_lr, temperature=self.args.order_temperature, seed=self.args.seed)
            if self.args.order == "learned" else None
        )  # fmt: skip
        if self.uses_critic:
            self.optimizers[CRITIC] = torch.optim.Adam(self.policy.parameters_of(CRITIC), lr=self.args.critic_lr)

    @property
    def uses_critic(self) -> bool:
        return self.args.advantage == "gae"

    @property
    def rollouts(self) -> RolloutEngine:
        """What samples the episodes: the engine, or the policy itself."""
        return self.policy if self.engine is None else self.engine

    def run(
        self, *, checkpoint_dir: str | Path | None = None, on_step: Callable[[StepLog], None] | None = None
    ) -> list[StepLog]:
        """Train up to ``args.steps`` iterations, resuming from the newest checkpoint in ``checkpoint_dir``."""
        if checkpoint_dir is not None and checkpoint.latest(checkpoint_dir) is not None:
            self.load_state(checkpoint.restore(checkpoint_dir, self.policy, asdict(self.args)))
            self._sync_engine()
            log.info("resumed MARFT at iteration %d from %s", self.step, checkpoint_dir)
        while self.step < self.args.steps:
            entry = self.iteration()
            self.history.append(entry)
            if on_step is not None:
                on_step(entry)
            every = self.args.checkpoint_every
            if checkpoint_dir is not None and (self.step == self.args.steps or (every and self.step % every == 0)):
                checkpoint.save(checkpoint_dir, self.step, self.policy, self.state())
        return self.history

    def iteration(self) -> StepLog:
        """One rollout batch and its PPO updates."""
        started = time.perf_counter()
        a = self.args
        batch = collect(
            self.rollouts,
            self.task,
            episodes=a.batch_size,
            rng=self.rng,
            generator=self.generator,
            max_new_tokens=a.max_new_tokens,
            temperature=a.temperature,
            group_size=a.group_size,
            order_of=self.order_of if self.order_of is not None else self._drawn_order if self.orders else None,
        )
        targets = self.targets(batch)
        agents = self.task.agents if a.schedule == "all" else (self.task.agents[self.step % len(self.task.agents)],)
        self._set_learning_rates()
        stats = self.update(batch, targets, agents)
        self._sync_engine()
        self._learn_orders(batch)
        self.step += 1
        entry = StepLog(
            self.step,
            batch.success,
            batch.mean_reward,
            round(time.perf_counter() - started, 3),
            {k: v for k, v in stats.items() if k != CRITIC},
            stats.get(CRITIC, {}).get("value_loss"),
            None if self.orders is None else " > ".join(self.orders.orders([ORDER_GROUP], explore=False)[0]),
        )
        log.info("MARFT iteration %d: success %.2f", self.step, entry.success)
        return entry

    def _drawn_order(self, state: object) -> tuple[int, ...]:
        """An episode's order drawn from the trainer's order policy (``args.order = "learned"``)."""
        assert self.orders is not None
        (order,) = self.orders.orders([ORDER_GROUP], explore=True)
        return tuple(self.task.agents.index(a) for a in order)

    def _learn_orders(self, batch: Batch) -> None:
        """The order policy learns from the batch: each episode's order, its reward at every position.

        Outside the PPO loss: AGPS adds the order's log-probability to the loss because PMAT's priorities come
        from the network being trained; here they are a table of their own (``OrderPolicy``), so that term's
        gradient for the adapters is zero. The priorities take the same policy gradient by themselves."""
        if self.orders is None or batch.orders is None:
            return
        for order, reward in zip(batch.orders, batch.rewards, strict=True):
            names = tuple(self.task.agents[m] for m in order)
            self.orders.learn(ORDER_GROUP, names, position_returns(reward, None, len(order)))

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

    def _sync_engine(self) -> None:
        """Hand the policy's current adapters to a separate rollout engine."""
        if self.engine is not None and self.engine is not self.policy and isinstance(self.engine, SyncsWeights):
            self.engine.sync(self.policy)

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
            "orders": None if self.orders is None else self.orders.state(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.rng.setstate(state["rng"])
        self.generator.set_state(state["generator"])
        for k, o in self.optimizers.items():
            o.load_state_dict(state["optimizers"][k])
        self.history = [StepLog(**h) for h in state["history"]]
        if self.orders is not None:
            self.orders.load(state["orders"])


def _chunks(order: list[int], parts: int) -> list[list[int]]:
    size = -(-len(order) // parts)
    return [order[i : i + size] for i in range(0, len(order), size)]


def _accumulate(sums: dict[str, dict[str, float]], key: str, stats: dict[str, float]) -> None:
    target = sums.setdefault(key, {})
    for name, value in stats.items():
        if not name.startswith("_"):
            target[name] = target.get(name, 0.0) + value


def evaluate(
    policy: RolloutEngine,
    task: MarftTask,
    *,
    episodes: int,
    seed: int,
    temperature: float = 1.0,
    max_new_tokens: int = 1,
    order_of: Callable[[Any], Sequence[int]] | None = None,
) -> float:
    """The team's success rate on ``episodes`` fresh episodes (its own seeds: training state untouched).

    ``policy`` is any rollout engine: the policies themselves or a synced ``VLLMEngine``; ``order_of``, each
    episode's order (``collect``), e.g. the order a team that learns its order serves."""
    import torch

    batch = collect(
        policy,
        task,
        episodes=episodes,
        rng=random.Random(seed),
        generator=torch.Generator().manual_seed(seed),
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        order_of=order_of,
    )
    return batch.success
