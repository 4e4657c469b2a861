"""Priorities over a team's agents per task group, learned from rewards: the order policy of PMAT's AGPS.

``OrderPolicy`` keeps one priority per agent and per task group, draws orders from Plackett–Luce over them
(``optimizers.order``) while learning and takes the most probable one when serving, and moves them by a
policy gradient whose return may differ by position (``position_returns``). A chain of agents
(``evolve.teams.ordered.OrderedTeam``) and MARFT's rollouts (``optimizers.marft``) both draw from it.

Task groups are the memory's intent grouping (``memory.write.grouping.assign_groups``) over the task's text
embedded: a task joins the group whose first task is at least ``group_threshold`` similar, or founds one.
Without an embedder every task is in one group.

Example:
    >>> policy = OrderPolicy(("a", "b"), seed=0)
    >>> policy.learn("any task", ("b", "a"), [1.0, 1.0])
    >>> policy.orders(["any task"], explore=False)
    [('b', 'a')]
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from connectors import ConfigError
from memory.write.grouping import assign_groups
from optimizers.order import grad_log_prob, greedy, sample

Order = tuple[str, ...]

GROUP_THRESHOLD = 0.6
"""The cosine at which a task joins a group by default: MiniLM puts the price desk's tasks of one kind
(``data/team_order.jsonl``) at least 0.46 alike and of different kinds at most 0.56; at 0.6 no group mixed kinds."""


@dataclass
class OrderGroup:
    """What one task group learned: priorities per agent, mean return per position, episodes learned from."""

    key: np.ndarray | None
    priorities: np.ndarray
    baselines: np.ndarray
    episodes: int = 0
    example: str = ""


@dataclass
class OrderPolicy:
    """Priorities per agent and task group, learned from rewards (see the module).

    Args:
        agents: the agents' names, in the listed order (which breaks ties: with nothing learned the greedy
            order is the listed one).
        lr: the step size of the priorities' policy gradient.
        temperature: Plackett–Luce's τ; lower draws the best order more often while learning.
        embed: the task text's embedding (the run's embedder), or None for one group.
        group_threshold: the cosine at which a task joins a group.
        seed: the draws' random seed.
    """

    agents: tuple[str, ...]
    lr: float = 0.5
    temperature: float = 1.0
    embed: Callable[[list[str]], np.ndarray] | None = None
    group_threshold: float = GROUP_THRESHOLD
    seed: int = 0
    groups: list[OrderGroup] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.agents = tuple(self.agents)
        if len(set(self.agents)) != len(self.agents) or not self.agents:
            raise ConfigError(f"an order is over distinct agents, got {list(self.agents)}")
        if not (np.isfinite(self.temperature) and self.temperature > 0):
            raise ConfigError(f"team order: temperature must be > 0, got {self.temperature}")
        if not (np.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"team order: lr must be > 0, got {self.lr}")
        if not 0 < self.group_threshold <= 1:
            raise ConfigError(f"team order: group_threshold must be in (0, 1], got {self.group_threshold}")
        self._rng = np.random.default_rng(self.seed)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def learns(self) -> bool:
        """Whether there is an order to learn: one agent has only one."""
        return len(self.agents) > 1

    def _groups_of(self, texts: Sequence[str], *, found: bool) -> list[int | None]:
        """Each text's group; a text alike no group founds one when ``found`` (learning), else is None."""
        if self.embed is None:
            if found and not self.groups:
                self.groups.append(self._new_group(None, texts[0] if texts else ""))
            return [0 if self.groups else None] * len(texts)
        vecs = np.asarray(self.embed(list(texts)), dtype=np.float32)
        keys = (
            np.stack([g.key for g in self.groups if g.key is not None]) if self.groups else np.zeros((0, vecs.shape[1]))
        )
        labels, new_rows = assign_groups(vecs, keys, self.group_threshold)
        if found:
            for r in new_rows.tolist():
                self.groups.append(self._new_group(vecs[r], texts[r]))
            return [int(x) for x in labels]
        return [int(x) if x < len(keys) else None for x in labels]

    def _new_group(self, key: np.ndarray | None, example: str) -> OrderGroup:
        n = len(self.agents)
        return OrderGroup(key, np.zeros(n), np.zeros(n), example=example[:200])

    def priorities_of(self, group: int | None) -> np.ndarray:
        return np.zeros(len(self.agents)) if group is None else self.groups[group].priorities

    def orders(self, texts: Sequence[str], *, explore: bool) -> list[Order]:
        """An order per task text: drawn from Plackett–Luce when ``explore``, else the most probable one."""
        with self._lock:
            groups = self._groups_of(texts, found=False)
            picks = [
                sample(self.priorities_of(g), self.temperature, self._rng) if explore else greedy(self.priorities_of(g))
                for g in groups
            ]
        return [tuple(self.agents[i] for i in p.tolist()) for p in picks]

    def learn(self, text: str, order: Order, returns: Sequence[float]) -> None:
        """One episode of task ``text`` acted in ``order``, each position's return given (``returns``)."""
        if sorted(order) != sorted(self.agents):
            raise ConfigError(f"an order names each agent of {list(self.agents)} once, got {list(order)}")
        if len(returns) != len(order):
            raise ConfigError(f"one return per position ({len(order)}), got {len(returns)}")
        with self._lock:
            (label,) = self._groups_of([text], found=True)
            g = self.groups[label or 0]
            g.episodes += 1
            sigma = [self.agents.index(a) for a in order]
            advantage = np.asarray(returns, dtype=np.float64) - g.baselines
            g.priorities += self.lr * grad_log_prob(sigma, g.priorities, self.temperature, advantage)
            g.baselines += (np.asarray(returns, dtype=np.float64) - g.baselines) / min(g.episodes, 20)

    def state(self) -> dict[str, Any]:
        """What a resumed run needs to go on bit for bit: every group and the draws' random state."""
        with self._lock:
            return {
                "groups": [
                    {"key": None if g.key is None else g.key.tolist(), "priorities": g.priorities.tolist(),
                     "baselines": g.baselines.tolist(), "episodes": g.episodes, "example": g.example}
                    for g in self.groups
                ],
                "rng": self._rng.bit_generator.state,
            }  # fmt: skip

    def load(self, state: dict[str, Any]) -> None:
        """Go on from ``state()``."""
        with self._lock:
            self.groups = [
                OrderGroup(None if g["key"] is None else np.asarray(g["key"], dtype=np.float32),
                           np.asarray(g["priorities"]), np.asarray(g["baselines"]), g["episodes"], g["example"])
                for g in state["groups"]
            ]  # fmt: skip
            self._rng.bit_generator.state = state["rng"]

    def table(self) -> list[dict[str, Any]]:
        """Per group: an example task, the episodes learned from, the greedy order and the priorities."""
        with self._lock:
            return [
                {
                    "group": i,
                    "example": g.example,
                    "episodes": g.episodes,
                    "order": [self.agents[k] for k in greedy(g.priorities).tolist()],
                    "priorities": {a: round(float(p), 3) for a, p in zip(self.agents, g.priorities, strict=True)},
                }
                for i, g in enumerate(self.groups)
            ]


def position_returns(reward: float, step_scores: Sequence[float] | None, n: int) -> list[float]:
    """Each position's return: the reward less the score before that position's agent acted (``step_scores``:
    the checker's score of each step's output but the last; None: every position gets the reward).

    Example:
        >>> position_returns(1.0, [0.0, 1.0], 3), position_returns(1.0, None, 3)
        ([1.0, 1.0, 0.0], [1.0, 1.0, 1.0])
    """
    if step_scores is None:
        return [float(reward)] * n
    if len(step_scores) != n - 1:
        raise ConfigError(f"scores of the {n - 1} steps before the last expected, got {len(step_scores)}")
    before = [0.0, *map(float, step_scores)]
    return [float(reward) - b for b in before]
