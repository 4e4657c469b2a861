"""Rollouts for MARFT: agents act in team order, agent m sees what agents 1..m-1 said.

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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

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
    a frozen dataclass with an ``agents`` field fits.
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
) -> Batch:
    """Run ``episodes`` team episodes (``episodes / group_size`` states, each played ``group_size`` times).

    Raises:
        ConfigError: ``episodes`` is not a positive multiple of ``group_size``.
    """
    if episodes < 1 or group_size < 1 or episodes % group_size:
        raise ConfigError(
            f"episodes must be a positive multiple of group_size, got episodes={episodes}, group_size={group_size}"
        )
    states = [task.sample(rng) for _ in range(episodes // group_size)]
    groups = [g for g in range(len(states)) for _ in range(group_size)]
    said: list[list[str]] = [[] for _ in groups]
    turns = []
    for m, agent in enumerate(task.agents):
        prompt_ids = engine.encode([task.prompt(states[g], m, said[i]) for i, g in enumerate(groups)])
        response_ids = engine.generate(
            agent, prompt_ids, max_new_tokens=max_new_tokens, temperature=temperature, generator=generator
        )
        texts = [engine.decode(ids) for ids in response_ids]
        for i, text in enumerate(texts):
            said[i].append(text)
        turns.append(AgentTurns(agent, prompt_ids, response_ids, texts))
    rewards = [float(task.reward(states[g], said[i])) for i, g in enumerate(groups)]
    return Batch(tuple(turns), rewards, groups)
