"""Escalation from memory and prompts to LoRA MARFT: when it is allowed, when it is due, what it trains on.

- ``weights_blocker(team)`` says why a team cannot have its weights updated (an agent on a backend
  that cannot take LoRA adapters, such as an API model), or None when every agent's backend can;
- ``plateaued(curve, patience=…)`` is the trigger: no gain over the last ``patience`` rounds;
- ``TeamTask`` turns bundled tasks and a team into a ``MarftTask``: agents act in team order, each
  seeing the task and what its inputs said, in the messages the team serves, and the environment's
  checker scores the last agent's answer.

Example:
    >>> plateaued([0.2, 0.5, 0.5, 0.5], patience=2)
    True
    >>> plateaued([0.2, 0.5, 0.5, 0.6], patience=2)
    False
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from connectors import ConfigError, Message
from evolve.agent import Team, turn_messages
from evolve.envs.tasks import Task, check


def plateaued(curve: Sequence[float], *, patience: int, min_gain: float = 0.0) -> bool:
    """True when the best of the last ``patience`` rounds beats the best before them by ``min_gain`` or less.

    Raises:
        ConfigError: ``patience`` < 1.
    """
    if patience < 1:
        raise ConfigError(f"patience must be >= 1 round, got {patience}")
    if len(curve) <= patience:
        return False
    return max(curve[-patience:]) <= max(curve[:-patience]) + min_gain


def weights_blocker(team: Team) -> str | None:
    """Why the team's weights cannot be trained here, or None when every agent's backend serves LoRA
    adapters (``ChatClient.serves_adapters``: ``LocalChat`` in transformers, ``VLLMChat`` in an
    in-process vLLM engine)."""
    agents = [team.agents[n] for n in team.order]
    remote = [f"{a.name} ({a.model.name})" for a in agents if not a.model.serves_adapters]
    if not remote:
        return None
    return (
        f"weight updates need local models, and {', '.join(remote)} "
        f"{'runs' if len(remote) == 1 else 'run'} on an API; memory and prompt evolution keep working "
        "without them (leave weights=None, or give the agents a 'local/…' or 'vllm/…' model)"
    )


@dataclass(frozen=True)
class TeamTask:
    """A ``MarftTask`` over bundled tasks: the team's agents in order, rewarded by the task's checker.

    Agent m's prompt is the messages the team gives it at inference, less recalled memories: its role
    as the system message, then what its inputs (``inputs[m]``, default: the agent before it) said and
    the task. Trained on the format it is served with, an adapter helps where it is used. The reward is
    the checker's score of the last agent's answer.

    Example:
        >>> t = TeamTask([Task(id="a", prompt="2 + 2?", answer="4")], ("solver",), ("Reply with a number.",))
        >>> [m.content for m in t.prompt(t.sample(random.Random(0)), 0, [])]
        ['Reply with a number.', '2 + 2?']
        >>> t.reward(t.tasks[0], ["4"])
        1.0
    """

    tasks: Sequence[Task]
    agents: tuple[str, ...]
    roles: tuple[str, ...]
    inputs: tuple[tuple[str, ...], ...] = ()
    any_order: bool = False
    """True: episodes may act in drawn orders (a team that learns its order): each agent sees the one before it
    in its episode's order, and the last one answers."""

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ConfigError("TeamTask needs at least one task")
        if len(self.roles) != len(self.agents) or not self.agents:
            raise ConfigError(f"TeamTask needs one role per agent, got {len(self.roles)} for {len(self.agents)}")
        if not self.inputs:
            object.__setattr__(self, "inputs", ((),) + tuple((a,) for a in self.agents[:-1]))
        if len(self.inputs) != len(self.agents) or any(
            not set(inputs) <= set(self.agents[:m]) for m, inputs in enumerate(self.inputs)
        ):
            raise ConfigError(f"TeamTask inputs must name earlier agents, one tuple per agent; got {self.inputs}")

    @classmethod
    def of(cls, team: Team, tasks: Sequence[Task], *, any_order: bool = False) -> TeamTask:
        """The team's agents in order, with their current system prompts as roles and its edges as inputs
        (``any_order``: episodes may act in drawn orders)."""
        agents = [team.agents[n] for n in team.order]
        return cls(
            list(tasks),
            tuple(a.name for a in agents),
            tuple(a.system_prompt() for a in agents),
            tuple(tuple(team.predecessors(a.name)) for a in agents),
            any_order,
        )

    def sample(self, rng: random.Random) -> Task:
        return rng.choice(list(self.tasks))

    def prompt(
        self, state: Task, agent_index: int, previous: Sequence[str], acted: Sequence[int] | None = None
    ) -> list[Message]:
        if acted is not None:  # a drawn order: the agent before this one, as a chain in that order
            upstream = {self.agents[acted[-1]]: previous[-1].strip()} if acted else {}
        else:
            upstream = {name: previous[self.agents.index(name)].strip() for name in self.inputs[agent_index]}
        return turn_messages(self.roles[agent_index], state.prompt, None, upstream)

    def reward(self, state: Task, responses: Sequence[str], order: Sequence[int] | None = None) -> float:
        return check(state, responses[order[-1]] if order else responses[-1])[0]
