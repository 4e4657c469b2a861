"""What optimizers see and return. They never see a team or an environment: the ``evolve`` layer hands
them an ``Evaluate`` callable (run a candidate on some examples, return traces) and gets back a
``StepResult``.

A ``Candidate`` maps component names to prompt text. Components are named ``"<agent>.<part>"``:
``"solver.system"`` (role and instructions) and ``"solver.library"`` (the experience library of
Training-Free GRPO, one numbered ``[1] When …, do …`` line per entry; an empty library is ``""``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

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
class Critique:
    """A textual gradient: a critique of one component, saying what to change (not the new text).

    Called a critique, not feedback: ``Trace.feedback`` is the environment's text about an output (the
    loss), and a ``Critique`` is what the critic derives from it for one component (its gradient).
    ``example_ids`` are the examples whose failures it speaks for.

    Example:
        >>> Critique("solver.system", "State the units of the answer.", ("t1", "t3")).component
        'solver.system'
    """

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
    critiques: tuple[Critique, ...] = ()
    minibatch: tuple[float, float] | None = None  # (parent mean, proposal mean)
    val_scores: Mapping[str, float] | None = None
    usage: Usage = field(default_factory=Usage)
    parent_scores: Mapping[str, float] | None = None
    usage_by_component: Mapping[str, Usage] = field(default_factory=dict)

    @property
    def gradients(self) -> tuple[Critique, ...]:
        """Deprecated name of ``critiques`` (before 0.2.0); removed in 0.3.0."""
        warnings.warn("StepResult.gradients is now StepResult.critiques", DeprecationWarning, stacklevel=2)
        return self.critiques


class Evaluate(Protocol):
    """Runs a candidate's prompts on examples: what an optimizer gets instead of a team and environment.

    ``evolve.make_evaluate`` builds one over a team; any plain function with this signature is one too
    (the two leading parameters are positional-only, so their names are free).

    Example:
        >>> def evaluate(candidate, example_ids, *, samples=1, temperature=None):
        ...     return [Trace(i, (), "4", 1.0, "right") for i in example_ids for _ in range(samples)]
        >>> [t.example_id for t in evaluate({"solver.system": "Be brief."}, ["a", "b"], samples=2)]
        ['a', 'a', 'b', 'b']
    """

    def __call__(
        self, candidate: Candidate, example_ids: Sequence[str], /, *, samples: int = 1, temperature: float | None = None
    ) -> list[Trace]:
        """One ``Trace`` per example and sample, example by example (``samples`` draws of each, in a row).

        Args:
            candidate: the prompt text of every component to run with.
            example_ids: which examples to run; an unknown id is a ``ConfigError``.
            samples: draws per example (Training-Free GRPO's group size; 1 elsewhere).
            temperature: the sampling temperature of the draws (None: the team's own).
        """
        ...


@runtime_checkable
class PromptOptimizer(Protocol):
    """One gated step over the versions of a team's prompts (``TextualGradientOptimizer``,
    ``TrainingFreeGRPO``); ``evolve.PromptEvolution`` calls it once a round.

    ``extra`` holds traces recorded elsewhere — answers users rated through ``evolve serve``, their
    comments as the feedback. An optimizer may learn from them (textual gradients treat the poorly
    rated ones as more failures to critique) but never gates on them: they cannot be re-run.

    Example:
        >>> from connectors import ChatClient, ScriptedChat
        >>> from optimizers import TextualGradientOptimizer
        >>> isinstance(TextualGradientOptimizer(critic=ChatClient(ScriptedChat(["NO CHANGE"]))), PromptOptimizer)
        True
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
