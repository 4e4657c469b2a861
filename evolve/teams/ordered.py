"""A chain that learns its order per task group: PMAT's AGPS over a team's agents (docs/concepts/teams.md).

``OrderedTeam`` is a chain whose agents act in an order drawn for each task: each agent sees the output of
the one before it in that order, and the last one answers (and gets the environment's tools). The orders
come from an ``OrderPolicy`` (``optimizers.order_policy``): one priority per agent and per task group,
orders drawn from Plackett–Luce over them while learning and the most probable one when serving
(``OrderedTeam.serving``).

Learning is a policy gradient on the order, credited by step. Choosing the agent at position i is one
decision; its return is the episode's reward less the score the answer had before that agent acted (the
checker run on the previous agent's output as if it were the answer; 0 before the first). The steps' score
changes sum to the reward, so each position is credited with what the steps from it on added, and what
came before it (which its choice could not change) is left out: unbiased, with less variance than crediting
every position with the whole reward. Without a checker that can score an intermediate output (more than one
turn, or a critic), every position gets the reward. Each group keeps a mean return per position as its
baseline; the priorities move by ``lr`` · Σᵢ (Gᵢ − bᵢ) ∇ log pᵢ(σ) (``optimizers.order.grad_log_prob``).

Example:
    >>> from connectors import load_chat
    >>> from evolve.agent import Agent
    >>> team = OrderedTeam([Agent(n, load_chat("fake/scripted", replies=[n])) for n in ("a", "b")], seed=0)
    >>> team.policy.learn("any task", ("b", "a"), [1.0, 1.0])
    >>> team.policy.orders(["any task"], explore=False)
    [('b', 'a')]
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from connectors import ConfigError
from evolve.agent import Agent, Team, TeamAct
from evolve.envs.tasks import Task
from evolve.episode import Episode, Step, TeamStream
from optimizers.order_policy import Order, OrderPolicy, position_returns


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

    def task_order(self, task: Task, explore: bool) -> Order:
        """The order ``task`` acts in: drawn from its group's priorities (``explore``), else the most probable
        one (what MARFT's escalation trains and evaluates in, ``evolve.weights.switch.train_adapters``)."""
        return self.policy.orders([task.prompt], explore=explore)[0]

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
    """An ordered team's policy learns from the orders ``episodes`` were acted in (``replay``); other teams
    have no order to learn."""
    if isinstance(team, OrderedTeam):
        replay(team.policy, episodes)


def replay(policy: OrderPolicy, episodes: Sequence[Episode]) -> None:
    """``policy`` learns from the orders ``episodes`` were acted in, in the order given (failed episodes:
    nothing). The loop gives a batch in its tasks' ids' order, as ``RunLog.learned_episodes`` gives them back,
    so that a resumed run replaying its log reaches the same priorities."""
    if not policy.learns:
        return
    for e in episodes:
        if e.error is None:
            for order, returns in turn_orders(e, policy.agents):
                policy.learn(e.prompt, order, returns)


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
