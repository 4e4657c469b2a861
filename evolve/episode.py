"""One attempt at a task: an ``Episode`` made of ``Step``s, with its reward and the recalls it used."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from connectors import Message, Usage


@dataclass(frozen=True)
class Step:
    """One agent call inside an episode: what it saw, what it said, which memories it recalled
    (``recall_id``, made in the memory namespace ``recall_namespace``)."""

    agent: str
    messages: tuple[Message, ...]
    output: str
    usage: Usage = field(default_factory=Usage)
    recall_id: str | None = None
    turn: int = 0
    recall_namespace: str | None = None


@dataclass(frozen=True)
class Episode:
    """A finished attempt.

    ``answer`` is the team's last output; ``feedback`` is the environment's last observation text, which
    is what memory learns from. ``error`` is set when the attempt could not be made (a backend failed
    after its retries); such an episode has reward 0 and is not written to memory.
    """

    id: str
    task_id: str
    prompt: str
    steps: tuple[Step, ...]
    answer: str
    reward: float
    feedback: str
    round: int = 0
    error: str | None = None
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return self.error is None and self.reward >= 1.0

    @property
    def usage(self) -> Usage:
        total = Usage()
        for s in self.steps:
            total = total + s.usage
        return total

    @property
    def recall_ids(self) -> tuple[str, ...]:
        return tuple(s.recall_id for s in self.steps if s.recall_id is not None)

    def trajectory(self) -> str:
        """The condensed trajectory memory stores: each agent's output, in order."""
        return condense(self.steps)


def condense(steps: Sequence[Step]) -> str:
    """Steps as the condensed trajectory memory stores: each agent's output, in order."""
    if len(steps) == 1:
        return f"Answer given: {steps[0].output.strip()}"
    return "\n".join(f"[{s.agent}, turn {s.turn}] {s.output.strip()}" for s in steps)
