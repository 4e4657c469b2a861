"""A chain that learns its order per task group: PMAT's AGPS over a team's agents (docs/concepts/teams.md).

``OrderedTeam`` is a chain whose agents act in an order drawn for each task: each agent sees the output of
the one before it in that order, and the last one answers (and gets the environment's tools). The orders
come from an ``OrderPolicy``: one priority per agent and per task group, orders drawn from Plackett–Luce
over the priorities while learning (``evolve.teams.order.sample``) and the most probable one when serving
(``greedy``; ``OrderedTeam.serving``).

Task groups are the memory's intent grouping (``memory.write.grouping.assign_groups``) over the task's text
embedded: a task joins the group whose first task is at least ``group_threshold`` similar, or founds one, so
tasks alike share what was learned. Without an embedder every task is in one group.

Learning is a policy gradient on the order, credited by step. Choosing the agent at position i is one
decision; its return is the episode's reward less the score the answer had before that agent acted (the
checker run on the previous agent's output as if it were the answer; 0 before the first). The steps' score
changes sum to the reward, so each position is credited with what the steps from it on added, and what
came before it (which its choice could not change) is left out: unbiased, with less variance than crediting
every position with the whole reward. Without a checker that can score an intermediate output (more than one
turn, or a critic), every position gets the reward. Each group keeps a mean return per position as its
baseline; the priorities move by ``lr`` · Σᵢ (Gᵢ − bᵢ) ∇ log pᵢ(σ) (``evolve.teams.order.grad_log_prob``).

Example:
    >>> from connectors import load_chat
    >>> from evolve.agent import Agent
    >>> team = OrderedTeam([Agent(n, load_chat("fake/scripted", replies=[n])) for n in ("a", "b")], seed=0)
    >>> team.policy.learn("any task", ("b", "a"), [1.0, 1.0])
    >>> team.policy.greedy_orders(["any task"])
    [('b', 'a')]
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from connectors import ConfigError
from evolve.agent import Agent, Team, TeamAct
from evolve.episode import Episode, Step, TeamStream
from evolve.teams.order import grad_log_prob, greedy, sample
from memory.write.grouping import assign_groups

Order = tuple[str, ...]


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
    group_threshold: float = 0.8
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

    def greedy_orders(self, texts: Sequence[str]) -> list[Order]:
        return self.orders(texts, explore=False)

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


class OrderedTeam(Team):
    """A chain of ``agents`` whose order is drawn per task from ``policy`` (see the module).

    Args:
        agents: the agents, in the listed order (the order while nothing is learned).
        policy: the priorities (default: a fresh ``OrderPolicy`` over the agents, with ``**policy_args``).
        serving: act in the greedy order (serving) instead of drawing orders (learning).
        workers: threads for backends without batched generation.
    """

    def __init__(
        self,
        agents: Sequence[Agent],
        *,
        policy: OrderPolicy | None = None,
        serving: bool = False,
        workers: int = 4,
        **policy_args: Any,
    ) -> None:
        super().__init__(agents, None, workers=workers)
        names = tuple(a.name for a in agents)
        if policy is not None and (policy_args or tuple(policy.agents) != names):
            raise ConfigError(f"OrderedTeam: a policy over {list(policy.agents)} given for agents {list(names)}")
        self.policy = policy if policy is not None else OrderPolicy(names, **policy_args)
        if not self.policy.learns:
            warnings.warn("a team of one agent has one order: a learned order learns nothing", stacklevel=2)
        self.serving = serving
        self.credits_steps = True  # the rollout scores each step's output: its credit (``position_returns``)
        self._chains: dict[Order, Team] = {}

    def _with_agents(self, agents: list[Agent]) -> Team:
        return OrderedTeam(agents, policy=self.policy, serving=self.serving, workers=self.workers)

    def chain(self, order: Order) -> Team:
        """The plain chain of this team's agents in ``order`` (kept: its thread pool serves every call)."""
        if order not in self._chains:
            self._chains[order] = Team([self.agents[n] for n in order], workers=self.workers)
        return self._chains[order]

    def answers_task(self, name: str) -> bool:
        """Any agent may be the last of an order, and the last one answers (``chain`` gives it the tools)."""
        return name in self.agents

    def _decide(
        self,
        observations: Sequence[str],
        queries: Sequence[str],
        turn: int,
        sample_index: int,
        params: Any,
        contexts: Sequence[str | None] | None,
        tools: Sequence[Sequence[Any]] | None,
    ) -> list[TeamAct]:
        """Each observation acted on by the chain of its order (drawn from its query's group); the
        observations sharing an order act together (one batch per agent, as a plain chain)."""
        orders = self.policy.orders(queries, explore=not self.serving)
        out: dict[int, TeamAct] = {}
        for order in dict.fromkeys(orders):
            which = [i for i, o in enumerate(orders) if o == order]
            acts = self.chain(order).act(
                [observations[i] for i in which],
                queries=[queries[i] for i in which],
                turn=turn,
                sample_index=sample_index,
                params=params,
                contexts=None if contexts is None else [contexts[i] for i in which],
                tools=None if tools is None else [tools[i] for i in which],
            )
            out.update(zip(which, acts, strict=True))
        return [out[i] for i in range(len(observations))]

    def stream(self, observation: str, *, query: str | None = None, **kwargs: Any) -> TeamStream:
        """``Team.stream`` through the chain of the observation's order."""
        order = self.policy.orders([observation if query is None else query], explore=not self.serving)[0]
        return self.chain(order).stream(observation, query=query, **kwargs)


def turn_orders(episode: Episode, agents: Sequence[str]) -> list[tuple[Order, list[float]]]:
    """Each turn's order in ``episode`` with its positions' returns (``position_returns``: credited by step when
    the episode has one turn whose steps were scored); turns that are not a whole order (a failed agent) are
    left out."""
    turns: dict[int, list[Step]] = {}
    for s in episode.steps:
        turns.setdefault(s.turn, []).append(s)
    out = []
    for steps in turns.values():
        order = tuple(s.agent for s in steps)
        if sorted(order) != sorted(agents):
            continue
        scores = [s.score for s in steps[:-1]]
        credited = len(turns) == 1 and all(x is not None for x in scores)
        out.append((order, position_returns(episode.reward, scores if credited else None, len(order))))  # type: ignore[arg-type]
    return out


def learn_orders(team: Team, episodes: Sequence[Episode]) -> None:
    """An ordered team's policy learns from the orders ``episodes`` were acted in, in the order given (failed
    episodes: nothing). The loop gives a batch in its tasks' ids' order, as ``RunLog.learned_episodes`` gives
    them back, so that a resumed run replaying its log reaches the same priorities."""
    if not isinstance(team, OrderedTeam) or not team.policy.learns:
        return
    for e in episodes:
        if e.error is None:
            for order, returns in turn_orders(e, team.policy.agents):
                team.policy.learn(e.prompt, order, returns)


def order_counts(episodes: Sequence[Episode], agents: Sequence[str]) -> dict[str, list[int]]:
    """The orders ``episodes`` were acted in (``"a > b > c"``) with how many episodes used each and how many of
    those succeeded, most used first."""
    counts: dict[str, list[int]] = {}
    for e in episodes:
        for order, _ in turn_orders(e, agents):
            c = counts.setdefault(" > ".join(order), [0, 0])
            c[0] += 1
            c[1] += int(e.success)
    return dict(sorted(counts.items(), key=lambda kv: -kv[1][0]))
