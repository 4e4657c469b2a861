"""``Args``: the settings of one MARFT run, in one frozen dataclass (CleanRL style: a field's comment is its help).

A module of their own: the trainer and the advantage arrangement both read them, and the trainer
imports the advantages, so the settings cannot live in the trainer without a circle.

Example:
    >>> Args(steps=10, batch_size=32, advantage="group", group_size=4).updates_per_step(agents=3)
    3
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from connectors import ConfigError


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
    order: Literal["fixed", "learned"] = "fixed"  # agents in team order, or each episode's drawn (PMAT's AGPS)
    order_lr: float = 0.5  # the order priorities' step size (order="learned")
    order_temperature: float = 1.0  # Plackett-Luce temperature of the drawn orders (order="learned")
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
        if not (self.order_lr > 0 and self.order_temperature > 0):
            raise ConfigError(
                f"order_lr and order_temperature must be > 0, got {self.order_lr} and {self.order_temperature}"
            )
        if self.order == "fixed" and (self.order_lr, self.order_temperature) != (0.5, 1.0):
            raise ConfigError('order_lr and order_temperature tune a learned order: set order="learned" with them')
        if self.order == "learned" and self.advantage == "gae":
            raise ConfigError(
                "order='learned' needs advantage='group': GAE chains the agents' values in one team order, and "
                "each episode acts in its own"
            )

    def updates_per_step(self, agents: int) -> int:
        """Adapters updated per iteration: all of them, or one with round-robin."""
        return agents if self.schedule == "all" else 1
