"""Rollouts for MARFT: agents act in team order (or each episode in an order drawn for it), each seeing what
the agents before it said.

A task (``MarftTask``) says who the agents are, draws an episode, writes each agent's prompt from the
episode and its predecessors' answers, and scores the team's answers. An engine (``RolloutEngine``)
samples answers for one agent: ``AgentPolicies`` does it with transformers, switching adapters per
agent (CPU or GPU); ``VLLMEngine`` does it with one ``LoRARequest`` per agent when vLLM and a GPU are
there. Either way the log-probs for the loss are recomputed later by the training model.

One ``collect`` call generates a whole batch agent by agent (every episode's agent-1 prompt in one
batch, then every agent-2 prompt, ...), so a local model always decodes in batches.

Example:
    >>> import random
    >>> from optimizers.marft.toys import RelayTask
    >>> task = RelayTask()
    >>> state = task.sample(random.Random(0))
    >>> "secret" in task.prompt(state, 0, [])
    True
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from connectors import ConfigError
from connectors.types import Message

if TYPE_CHECKING:
    import torch


S = TypeVar("S")
"""A task's episode state (what the environment knows about one episode)."""

Prompt = str | Sequence[Message]
"""What a task shows one agent: a user message's text, or the whole conversation as ``Message``s."""


class MarftTask(Protocol[S]):
    """A task a team is trained on: episodes, prompts in team order, and a team reward; ``S`` is the
    episode state.

    One episode: ``state = task.sample(rng)``; for each agent ``m`` in order,
    ``task.prompt(state, m, responses[:m])`` is what it sees and its answer is appended to
    ``responses``; then ``task.reward(state, responses)`` scores the team. ``agents`` is read-only, so
    a frozen dataclass with an ``agents`` field fits. A task whose ``any_order`` attribute is true also
    takes episodes in drawn orders (``collect``'s ``order_of``): it is then called as
    ``prompt(state, m, previous, acted=...)``, ``previous`` being what the agents ``acted`` (indices, in the
    episode's order) said before ``m``, and ``reward(state, responses, order=...)``.
    """

    @property
    def agents(self) -> tuple[str, ...]:
        """The agents, in team order."""
        ...

    def sample(self, rng: random.Random) -> S:
        """A fresh episode's state, drawn only from ``rng``."""
        ...

    def prompt(self, state: S, agent_index: int, previous: Sequence[str]) -> Prompt:
        """What agent ``agent_index`` sees, given its predecessors' responses ``previous``."""
        ...

    def reward(self, state: S, responses: Sequence[str]) -> float:
        """The team's reward for the answers of all agents, in team order."""
        ...


class AnyOrderTask(MarftTask[S], Protocol[S]):
    """A ``MarftTask`` whose episodes may act in drawn orders (``any_order`` true): its prompts are told who
    said what came before (``acted``), its reward the order the episode acted in."""

    any_order: bool

    def prompt(self, state: S, agent_index: int, previous: Sequence[str], acted: Sequence[int] = ()) -> Prompt: ...

    def reward(self, state: S, responses: Sequence[str], order: Sequence[int] = ()) -> float: ...


class RolloutEngine(Protocol):
    """Samples answers (token ids) for one agent; ``AgentPolicies`` and ``VLLMEngine`` both are one."""

    def encode(self, prompts: Sequence[Prompt]) -> list[list[int]]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def generate(
        self,
        agent: str,
        prompt_ids: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        generator: torch.Generator,
    ) -> list[list[int]]: ...


@dataclass(frozen=True)
class AgentTurns:
    """One agent's part of a batch: prompts and sampled answers, as ids and as text."""

    agent: str
    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    texts: list[str]


@dataclass(frozen=True)
class Batch:
    """A batch of single-step team episodes: every agent's turns, the rewards and the group ids.

    ``groups[i]`` is the episode state episode ``i`` was drawn for: episodes of one group share their
    state (for critic-free group advantages); with ``group_size=1`` every episode is its own group.
    """

    turns: tuple[AgentTurns, ...]
    rewards: list[float]
    groups: list[int]
    orders: list[tuple[int, ...]] | None = None
    """Each episode's order (agent indices, first to act first) when the order was drawn; None: team order."""

    @property
    def success(self) -> float:
        """The fraction of episodes with a full reward."""
        return sum(r >= 1.0 for r in self.rewards) / len(self.rewards)

    @property
    def mean_reward(self) -> float:
        return sum(self.rewards) / len(self.rewards)


def collect(
    engine: RolloutEngine,
    task: MarftTask[Any],
    *,
    episodes: int,
    rng: random.Random,
    generator: torch.Generator,
    max_new_tokens: int,
    temperature: float,
    group_size: int = 1,
    order_of: Callable[[Any], Sequence[int]] | None = None,
) -> Batch:
    """Run ``episodes`` team episodes (``episodes / group_size`` states, each played ``group_size`` times).

    ``order_of`` (called once per episode, in episode order, with its state) gives each episode an order of its
    own (agent indices, first to act first), for a task whose ``any_order`` is true: agent m then sees what the
    agents before it in its episode's order said (``previous``, with their indices as ``acted``), and the
    reward takes the answers in team order with the order as ``order``. The agents at one position are
    generated together, one batch per agent there. None: every episode in team order.

    Raises:
        ConfigError: ``episodes`` is not a positive multiple of ``group_size``, an order is not one of every
            agent, or the task's prompts follow team order.
    """
    if episodes < 1 or group_size < 1 or episodes % group_size:
        raise ConfigError(
            f"episodes must be a positive multiple of group_size, got episodes={episodes}, group_size={group_size}"
        )
    n = len(task.agents)
    any_order = bool(getattr(task, "any_order", False))
    drawn = cast("AnyOrderTask[Any]", task)
    if order_of is not None and not any_order:
        raise ConfigError(
            f"{type(task).__name__}'s prompts follow team order; a drawn order needs a task with any_order"
        )
    states = [task.sample(rng) for _ in range(episodes // group_size)]
    groups = [g for g in range(len(states)) for _ in range(group_size)]
    each = [tuple(order_of(states[g])) if order_of is not None else tuple(range(n)) for g in groups]
    if any(sorted(o) != list(range(n)) for o in each):
        raise ConfigError(f"an episode's order must name each of the {n} agents' indices once, got {each}")
    said: list[dict[int, str]] = [{} for _ in groups]
    prompt_ids: list[list[list[int]]] = [[[] for _ in groups] for _ in range(n)]
    response_ids: list[list[list[int]]] = [[[] for _ in groups] for _ in range(n)]
    for position in range(n):
        for m, agent in enumerate(task.agents):
            which = [i for i in range(episodes) if each[i][position] == m]
            if not which:
                continue
            prompts = []
            for i in which:
                before = each[i][:position]
                previous = [said[i][k] for k in before]
                state = states[groups[i]]
                prompts.append(
                    drawn.prompt(state, m, previous, acted=before) if any_order else task.prompt(state, m, previous)
                )
            ids = engine.encode(prompts)
            answers = engine.generate(
                agent, ids, max_new_tokens=max_new_tokens, temperature=temperature, generator=generator
            )
            for i, p_ids, r_ids in zip(which, ids, answers, strict=True):
                prompt_ids[m][i], response_ids[m][i], said[i][m] = p_ids, r_ids, engine.decode(r_ids)
    turns = tuple(
        AgentTurns(agent, prompt_ids[m], response_ids[m], [said[i][m] for i in range(episodes)])
        for m, agent in enumerate(task.agents)
    )
    answers_in_team_order = [[said[i][m] for m in range(n)] for i in range(episodes)]
    rewards = [
        float(drawn.reward(states[g], answers_in_team_order[i], order=each[i]) if any_order
              else task.reward(states[g], answers_in_team_order[i]))
        for i, g in enumerate(groups)
    ]  # fmt: skip
    return Batch(turns, rewards, groups, each if order_of is not None else None)
