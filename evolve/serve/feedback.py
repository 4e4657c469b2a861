"""A rating of a served answer, as ``Deployment.feedback`` takes it at once: the score checked, the memories
the rated answer recalled reinforced (``reinforce_recalls``), and the receipt. The rating is also queued in
``evolve_feedback`` (``evolve.serve.responses``) for the next ``evolve job``, which learns it fully
(``evolve.jobs.served``).

Example:
    >>> check_score(True), check_score(0.25)
    (1.0, 0.25)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real

from connectors import ConfigError
from evolve.build import agent_namespace
from evolve.episode import Step
from memory import MemoryStore, reinforcements


@dataclass(frozen=True)
class FeedbackReceipt:
    """What one feedback did: ``applied`` is False when its idempotency key was used before."""

    response_id: str
    feedback_id: str
    applied: bool
    reinforced: int
    reward: float


def check_score(score: object) -> float:
    """A feedback score: a finite number in [0, 1] (True/False count as 1/0)."""
    if not isinstance(score, Real) or isinstance(score, complex):
        raise ConfigError(f"score must be a number in [0, 1] (1: good, 0: bad), got {score!r:.80}")
    value = float(score)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ConfigError(f"score must be a number in [0, 1] (1: good, 0: bad), got {value!r}")
    return value


def reinforce_recalls(
    store: MemoryStore | None, run: str, feedback_id: str, steps: Sequence[Step], reward: float
) -> int:
    """Reinforce every recall the steps made, each in the namespace it was made in (``namespace_of``),
    once per feedback id (a repeat updates nothing); returns how many memories moved.

    A recall's feedback key is ``memory.reinforcements``' (``<feedback id>/<recall id>``, shortened with a
    hash when a long idempotency key makes it longer than the store's feedback keys may be)."""
    if store is None:
        return 0
    recalls = [(s.recall_id, namespace_of(s, run)) for s in steps if s.recall_id is not None]
    entries = reinforcements(recalls, reward, feedback_id)
    return store.reinforce_many(entries) if entries else 0


def namespace_of(step: Step, run: str) -> str:
    """Where a served step recalled (rows recorded before steps kept it: its agent's namespace in ``run``)."""
    return step.recall_namespace or agent_namespace(run, step.agent)


__all__ = ["FeedbackReceipt", "check_score", "namespace_of", "reinforce_recalls"]
