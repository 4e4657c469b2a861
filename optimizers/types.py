"""What optimizers see and return. They never see a team or an environment: the ``evolve`` layer hands
them an ``Evaluate`` callable (run a candidate on some examples, return traces) and gets back a
``StepResult``.

A ``Candidate`` maps component names to prompt text. Components are named ``"<agent>.<part>"``:
``"solver.system"`` (role and instructions) and ``"solver.library"`` (the experience library of
Training-Free GRPO, one numbered ``[1] When …, do …`` line per entry; an empty library is ``""``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from connectors import Usage

Candidate = Mapping[str, str]


@dataclass(frozen=True)
class NodeCall:
    """One LLM call inside a forward pass: which agent, the trainable components it used, its I/O."""

    node: str
    components: tuple[str, ...]
    prompt: str
    output: str


@dataclass(frozen=True)
class Trace:
    """One example run under one candidate: every call in order, the final output, and the loss.

    ``feedback`` is the environment's text about the output — the loss the critic differentiates.
    """

    example_id: str
    calls: tuple[NodeCall, ...]
    output: str
    score: float
    feedback: str
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True)
class Gradient:
    """A textual gradient: a critique of one component, saying what to change (not the new text)."""

    component: str
    text: str
    example_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Version:
    """A past version as the optimizer sees it: its text and its validation score per example."""

    id: str
    candidate: Candidate
    scores: Mapping[str, float]

    @property
    def mean(self) -> float:
        return sum(self.scores.values()) / len(self.scores) if self.scores else 0.0


@dataclass(frozen=True)
class StepResult:
    """What one optimizer step did.

    ``candidate`` is the proposal (None when nothing was proposed); ``accepted`` says whether it passed
    both gates; ``reason`` says why or why not in one line; ``val_scores`` holds the proposal's
    per-example validation scores when it reached the validation gate. ``parent_scores`` holds the
    parent's per-example validation scores when the step had to evaluate them (the parent version had
    none for some validation examples), so the caller can store them. ``usage`` is the critic's spend
    in this step; ``usage_by_component`` splits it by the component each call was about.
    """

    parent: str
    candidate: Candidate | None
    accepted: bool
    reason: str
    changed: tuple[str, ...] = ()
    gradients: tuple[Gradient, ...] = ()
    minibatch: tuple[float, float] | None = None  # (parent mean, proposal mean)
    val_scores: Mapping[str, float] | None = None
    usage: Usage = field(default_factory=Usage)
    parent_scores: Mapping[str, float] | None = None
    usage_by_component: Mapping[str, Usage] = field(default_factory=dict)


# evaluate(candidate, example_ids, *, samples=1, temperature=None) -> one Trace per example per sample
Evaluate = Callable[..., list[Trace]]
ExampleIds = Sequence[str]


class PromptOptimizer(Protocol):
    """One gated step over the versions of a team's prompts (``TextualGradientOptimizer``,
    ``TrainingFreeGRPO``); ``evolve.PromptEvolution`` calls it once a round.

    ``extra`` holds traces recorded elsewhere — answers users rated through ``evolve serve``, their
    comments as the feedback. An optimizer may learn from them (textual gradients treat the poorly
    rated ones as more failures to critique) but never gates on them: they cannot be re-run.
    """

    def step(
        self,
        versions: Sequence[Version],
        head: str,
        evaluate: Evaluate,
        train_ids: Sequence[str],
        val_ids: Sequence[str],
        *,
        rejected: Sequence[Candidate] = (),
        extra: Sequence[Trace] = (),
    ) -> StepResult: ...
