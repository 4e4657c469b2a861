"""One attempt at a task: an ``Episode`` made of ``Step``s, with its reward and the recalls it used.

``condense`` turns steps into the trajectory memory stores, ``to_trace`` into the ``Trace`` a prompt
optimizer learns from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from connectors import Message, Usage
from optimizers.types import NodeCall, Trace


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


def to_trace(
    example_id: str, steps: Sequence[Step], output: str, score: float, feedback: str, *, prompt: str = ""
) -> Trace:
    """Steps as the ``Trace`` a prompt optimizer learns from: one ``NodeCall`` per step, on the agent's
    trainable components (``<agent>.system``, ``<agent>.library``), and the steps' summed usage.

    A call's input is the step's last message; steps stored without their messages (a served response's:
    ``evolve.run_log.steps_to_json`` keeps none) take ``prompt``, what the team was asked.

    Example:
        >>> step = Step("solver", (), "4")
        >>> trace = to_trace("t1", [step], "4", 1.0, "correct", prompt="What is 2 + 2?")
        >>> trace.calls[0].components, trace.calls[0].prompt
        (('solver.system', 'solver.library'), 'What is 2 + 2?')
    """
    calls = tuple(
        NodeCall(
            s.agent,
            (f"{s.agent}.system", f"{s.agent}.library"),
            s.messages[-1].content if s.messages else prompt,
            s.output,
        )
        for s in steps
    )
    return Trace(example_id, calls, output, score, feedback, sum((s.usage for s in steps), Usage()))
