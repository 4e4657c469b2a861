"""The two gates every proposal passes before it may become HEAD.

1. **Minibatch**: the proposal must score strictly higher than its parent on the examples the step
   learned from — cheap, and most bad rewrites stop here, before any validation run.
2. **Validation**: the proposal and its parent are compared example by example on the validation set
   with a paired sign-flip test (``gate.paired_test``); a gain within noise is not an improvement.

The parent's validation scores come from its ``Version``; those it lacks are evaluated here (only
after the minibatch gate passed) and returned so the caller can store them.

Example:
    >>> from optimizers.types import Trace
    >>> scores_by_example([Trace("a", (), "x", 1.0, ""), Trace("a", (), "y", 0.0, ""), Trace("b", (), "z", 1.0, "")])
    {'a': 0.5, 'b': 1.0}
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connectors import ConfigError
from optimizers.budget import Spend
from optimizers.gate import paired_test
from optimizers.selection import scores_on
from optimizers.types import Candidate, Critique, Evaluate, StepResult, Trace, Version

log = logging.getLogger(__name__)


def scores_by_example(traces: Sequence[Trace]) -> dict[str, float]:
    """Mean score per example (several samples of one example are averaged), in first-seen order."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for t in traces:
        sums[t.example_id] = sums.get(t.example_id, 0.0) + float(t.score)
        counts[t.example_id] = counts.get(t.example_id, 0) + 1
    return {e: sums[e] / counts[e] for e in sums}


def mean_score(traces: Sequence[Trace]) -> float:
    """The mean score over all traces (0 for none)."""
    return sum(float(t.score) for t in traces) / len(traces) if traces else 0.0


@dataclass(frozen=True)
class Verdict:
    """What the gates decided about one proposal.

    ``minibatch`` is (parent mean, proposal mean) on the minibatch, when that gate ran;
    ``val_scores`` the proposal's validation scores, when that gate ran; ``parent_scores`` the
    parent's validation scores when some had to be evaluated.

    Example:
        >>> Verdict(accepted=False, reason="minibatch did not improve (0.25 → 0.25)").val_scores is None
        True
    """

    accepted: bool
    reason: str
    minibatch: tuple[float, float] | None = None
    val_scores: Mapping[str, float] | None = None
    parent_scores: Mapping[str, float] | None = None


def evaluate_scores(
    evaluate: Evaluate, candidate: Candidate, example_ids: Sequence[str], **kwargs: Any
) -> dict[str, float]:
    """Run ``evaluate`` and check it scored exactly the examples asked for."""
    scores = scores_by_example(evaluate(candidate, list(example_ids), **kwargs))
    if set(scores) != set(example_ids):
        missing = sorted(set(example_ids) - set(scores))[:5]
        extra = sorted(set(scores) - set(example_ids))[:5]
        raise ConfigError(
            f"evaluate must return traces for exactly the examples asked for; missing {missing}, extra {extra}"
        )
    return scores


def parent_validation(
    parent: Version, val_ids: Sequence[str], evaluate: Evaluate
) -> tuple[dict[str, float], dict[str, float] | None]:
    """The parent's validation scores, evaluating those its version lacks.

    Returns (scores on ``val_ids``, the same scores when some were evaluated here, else None).
    """
    known = scores_on(parent, val_ids)
    missing = [e for e in val_ids if e not in known]
    if not missing:
        return known, None
    log.info("evaluating parent %s on %d validation examples it has no score for", parent.id, len(missing))
    fresh = evaluate_scores(evaluate, parent.candidate, missing)
    merged = {e: known[e] if e in known else fresh[e] for e in val_ids}
    return merged, merged


def judge(
    *,
    evaluate: Evaluate,
    parent: Version,
    proposal: Candidate,
    minibatch_ids: Sequence[str],
    parent_minibatch: float,
    val_ids: Sequence[str],
    alpha: float = 0.05,
    seed: int = 0,
    minibatch_gate: bool = True,
    minibatch_kwargs: Mapping[str, Any] | None = None,
) -> Verdict:
    """Run the minibatch gate, then the validation gate.

    Args:
        evaluate: runs a candidate on examples and returns traces.
        parent: the version the proposal was built on.
        proposal: the full proposed candidate.
        minibatch_ids: the examples the step learned from.
        parent_minibatch: the parent's mean score on them (already measured by the step).
        val_ids: the validation examples; with none, the minibatch gate alone decides.
        alpha: the validation test's significance level.
        seed: seeds the validation test's Monte Carlo estimate.
        minibatch_gate: False skips the first gate.
        minibatch_kwargs: passed to ``evaluate`` for the minibatch run (``samples``, ``temperature``),
            so the proposal is measured the way the parent was.
    """
    minibatch = None
    if minibatch_gate:
        after = mean_score(evaluate(proposal, list(minibatch_ids), **dict(minibatch_kwargs or {})))
        minibatch = (parent_minibatch, after)
        if after <= parent_minibatch:
            return Verdict(False, f"minibatch did not improve ({parent_minibatch:.2f} → {after:.2f})", minibatch)
    if not val_ids:
        note = f"minibatch improved ({parent_minibatch:.2f} → {minibatch[1]:.2f})" if minibatch else "no gate ran"
        return Verdict(minibatch is not None, f"{note}; no validation examples to confirm it", minibatch)
    before, evaluated = parent_validation(parent, val_ids, evaluate)
    after_val = evaluate_scores(evaluate, proposal, val_ids)
    decision = paired_test(before, after_val, alpha=alpha, seed=seed)
    return Verdict(decision.accepted, decision.reason, minibatch, after_val, evaluated)


def step_result(
    parent: Version,
    spend: Spend,
    reason: str,
    candidate: Candidate | None = None,
    changed: tuple[str, ...] = (),
    critiques: Sequence[Critique] = (),
    **fields: Any,
) -> StepResult:
    """A ``StepResult`` carrying the step's critic spend (total and per component)."""
    return StepResult(
        parent=parent.id,
        candidate=candidate,
        accepted=fields.pop("accepted", False),
        reason=reason,
        changed=changed,
        critiques=tuple(critiques),
        usage=spend.total,
        usage_by_component=dict(spend.by_component),
        **fields,
    )
