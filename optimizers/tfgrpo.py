"""Training-Free GRPO: a group-relative semantic advantage distilled into an experience library.

One ``step`` (after Training-Free GRPO, arXiv 2510.08191; docs/design/decisions.md, "Training-Free GRPO"):

1. roll out G samples per training task of a batch, with HEAD's experience library in context
   (``evaluate(candidate, ids, samples=G, temperature=0.7)``);
2. keep the groups whose rewards differ — a group where every rollout earned the same reward has no
   advantage to explain;
3. summarise each rollout of a kept group (one call each);
4. one call per group extracts the semantic advantage: "When …, do …" lessons the better rollouts
   followed and the worse ones did not;
5. one call per group turns those lessons into ``ADD`` / ``UPDATE`` / ``DELETE`` / ``KEEP`` operations
   against the library;
6. the batch's operations are merged (``library.merge_operations``) into one new library text;
7. the library is a component of the candidate, so the proposal is gated like any prompt: strict
   improvement on the batch (same G and temperature), then a paired test on validation.

Example:
    >>> from connectors import ChatClient, ScriptedChat
    >>> grpo = TrainingFreeGRPO(critic=ChatClient(ScriptedChat(["NONE"])), group_size=3)
    >>> v = Version("v0", {"solver.system": "Answer.", "solver.library": ""}, {})
    >>> ok = lambda c, ids, **kw: [Trace(i, (), "fine", 1.0, "correct") for i in ids for _ in range(kw["samples"])]
    >>> grpo.step([v], "v0", ok, ["a", "b"], []).reason
    'nothing to learn: every rollout succeeded'
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

import optimizers.prompts as P
from connectors import ChatClient, ConfigError
from optimizers.acceptance import judge, mean_score, step_result
from optimizers.budget import Budget, BudgetExhausted, Spend, as_budget
from optimizers.critic import Critic, CriticFailed
from optimizers.library import merge_operations, parse_library, show_library
from optimizers.parsing import Operation, parse_lessons, parse_operations, parse_summary
from optimizers.selection import sample_ids
from optimizers.types import Candidate, Critique, Evaluate, StepResult, Trace, Version

log = logging.getLogger(__name__)


class TrainingFreeGRPO:
    """Learns an experience library from groups of rollouts whose rewards differ.

    Args:
        critic: the model that summarises, extracts lessons and edits the library (required).
        library_component: the candidate component holding the library, e.g. ``"solver.library"``.
        group_size: G, rollouts per task.
        temperature: the rollouts' sampling temperature.
        batch_size: tasks per step.
        max_entries: the library's maximum number of entries.
        budget: a preset name or a ``Budget``; caps the critic's spend per step.
        success: a reward at or above this counts as a success.
        minibatch_gate: False skips the batch re-run and goes straight to validation.
        alpha: the validation test's significance level.
        critic_params: sampling parameters for every critic call.
        untagged: when the operations answer cannot be parsed, add the group's lessons as new
            entries instead (small critics cannot write the JSON); the gates still decide.
        seed: seeds batch sampling and the validation test.

    Example:
        >>> from connectors import ChatClient, ScriptedChat
        >>> TrainingFreeGRPO(critic=ChatClient(ScriptedChat(["NONE"]))).group_size
        5
    """

    def __init__(
        self,
        *,
        critic: ChatClient,
        library_component: str = "solver.library",
        group_size: int = 5,
        temperature: float = 0.7,
        batch_size: int = 4,
        max_entries: int = 30,
        budget: str | Budget = "light",
        success: float = 1.0,
        minibatch_gate: bool = True,
        alpha: float = 0.05,
        critic_params: Mapping[str, Any] | None = None,
        untagged: bool = False,
        seed: int = 0,
    ) -> None:
        if critic is None:
            raise ConfigError("TrainingFreeGRPO needs critic=<ChatClient>; there is no default model")
        for name, value in (("group_size", group_size), ("batch_size", batch_size), ("max_entries", max_entries)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        if group_size < 2:
            raise ConfigError(f"group_size must be >= 2 (a group needs rewards to compare), got {group_size}")
        self.critic = critic
        self.library_component = library_component
        self.group_size = group_size
        self.temperature = temperature
        self.batch_size = batch_size
        self.max_entries = max_entries
        self.budget = as_budget(budget)
        self.success = success
        self.minibatch_gate = minibatch_gate
        self.alpha = alpha
        self.critic_params = dict(critic_params or {})
        self.untagged = untagged
        self.seed = seed
        self._rng = random.Random(seed)

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
    ) -> StepResult:
        """Roll out, learn lessons from groups with mixed rewards, propose a new library and gate it.

        ``extra`` is accepted and left unused: a semantic advantage compares a group of rollouts of one
        query, and a rated served answer is a single rollout.
        """
        by_id = {v.id: v for v in versions}
        if head not in by_id:
            raise ConfigError(f"head {head!r} is not among the versions given ({sorted(by_id)[:10]})")
        if not train_ids:
            raise ConfigError("step needs at least one training example id, got none")
        parent = by_id[head]
        batch = sample_ids(self._rng, train_ids, self.batch_size)
        spend = Spend(self.budget)
        rollout: dict[str, Any] = {"samples": self.group_size, "temperature": self.temperature}
        traces = evaluate(parent.candidate, batch, **rollout)
        groups = group_by_example(traces)
        kept = {e: g for e, g in groups.items() if rewards_differ(g)}
        if not kept:
            return step_result(parent, spend, nothing_to_learn(traces, self.success))
        library = parse_library(parent.candidate.get(self.library_component, ""))
        critic = Critic(self.critic, spend, params=self.critic_params)
        try:
            critiques, operations, budget_hit = self._learn(kept, library, critic)
        except CriticFailed as e:
            return step_result(parent, spend, str(e))
        update = merge_operations(library, operations, max_entries=self.max_entries)
        log.info("TF-GRPO on %s: %d groups kept of %d; library %s", parent.id, len(kept), len(groups), update.summary())
        if not update.changed:
            return step_result(parent, spend, _no_change_reason(budget_hit, critic, operations), critiques=critiques)
        proposal = {**parent.candidate, self.library_component: update.text}
        changed = (self.library_component,)
        if any(r.get(self.library_component) == update.text for r in rejected):
            return step_result(
                parent, spend, "proposal repeats a recently rejected library", proposal, changed, critiques
            )
        verdict = judge(
            evaluate=evaluate,
            parent=parent,
            proposal=proposal,
            minibatch_ids=batch,
            parent_minibatch=mean_score(traces),
            val_ids=val_ids,
            alpha=self.alpha,
            seed=self.seed,
            minibatch_gate=self.minibatch_gate,
            minibatch_kwargs=rollout,
        )
        return step_result(
            parent,
            spend,
            verdict.reason,
            proposal,
            changed,
            critiques,
            accepted=verdict.accepted,
            minibatch=verdict.minibatch,
            val_scores=verdict.val_scores,
            parent_scores=verdict.parent_scores,
        )

    def _learn(
        self, kept: Mapping[str, Sequence[Trace]], library: Sequence[str], critic: Critic
    ) -> tuple[list[Critique], list[Operation], bool]:
        """Lessons and operations from every kept group the budget allows; True when the budget cut it short."""
        critiques: list[Critique] = []
        operations: list[Operation] = []
        for example_id, group in kept.items():
            left = critic.spend.calls_left()
            if left is not None and left < len(group) + 2:  # a group costs G summaries + advantage + operations
                log.info("TF-GRPO: %d critic calls left, not enough for group %s", left, example_id)
                return critiques, operations, True
            try:
                learned = self._learn_from_group(example_id, group, library, critic)
            except BudgetExhausted as e:
                log.info("TF-GRPO stopped at group %s: %s", example_id, e)
                return critiques, operations, True
            if learned is not None:
                critiques.append(learned[0])
                operations += learned[1]
        return critiques, operations, False

    def _learn_from_group(
        self, example_id: str, group: Sequence[Trace], library: Sequence[str], critic: Critic
    ) -> tuple[Critique, list[Operation]] | None:
        """Summaries, the semantic advantage and the operations for one group (None when it taught nothing)."""
        component = self.library_component
        shown_library = show_library(library)
        summaries: list[tuple[Trace, str]] = []
        for trace in group:
            prompt = P.SUMMARY_PROMPT.format(
                example_id=example_id,
                library=shown_library,
                calls=P.render_calls(trace.calls),
                output=P.shown(trace.output),
                score=f"{trace.score:.2f}",
                feedback=P.feedback_block(trace.feedback),
            )
            summary = critic.ask(prompt, component=component, parse=parse_summary)
            if summary is not None:
                summaries.append((trace, summary))
        if not rewards_differ([t for t, _ in summaries]):
            return None
        ranked = sorted(summaries, key=lambda ts: -ts[0].score)
        attempts = P.render_blocks(
            P.ATTEMPT_BLOCK.format(index=i, score=f"{t.score:.2f}", summary=s) for i, (t, s) in enumerate(ranked, 1)
        )
        lessons = critic.ask(
            P.ADVANTAGE_PROMPT.format(example_id=example_id, library=shown_library, attempts=attempts),
            component=component,
            parse=parse_lessons,
        )
        if lessons is None:
            return None
        operations = critic.ask(
            P.OPERATIONS_PROMPT.format(max_entries=self.max_entries, library=shown_library, lessons=lessons),
            component=component,
            parse=parse_operations,
        )
        if operations is None and self.untagged:
            operations = lessons_as_additions(lessons)
        return Critique(component, lessons, (example_id,)), list(operations or [])


def lessons_as_additions(lessons: str, *, limit: int = 2) -> list[Operation]:
    """ADD operations for the first distinct lesson lines (at least three words each): the fallback
    when a small critic cannot write the operations JSON. The gates still decide."""
    lines = [re.sub(r"^\s*(?:[-*]|\d+[.)]|\[\d+\])\s*", "", line).strip() for line in lessons.splitlines()]
    kept = [line for line in dict.fromkeys(lines) if len(line.split()) >= 3]
    return [Operation(op="ADD", id=None, text=line) for line in kept[:limit]]


def group_by_example(traces: Sequence[Trace]) -> dict[str, list[Trace]]:
    """Rollouts grouped by example, in first-seen order."""
    groups: dict[str, list[Trace]] = {}
    for t in traces:
        groups.setdefault(t.example_id, []).append(t)
    return groups


def rewards_differ(group: Sequence[Trace], tol: float = 1e-9) -> bool:
    """True when the group's rewards are not all equal (a group of one never differs)."""
    scores = [float(t.score) for t in group]
    return bool(scores) and max(scores) - min(scores) > tol


def nothing_to_learn(traces: Sequence[Trace], success: float) -> str:
    """Why no group had mixed rewards, in one line."""
    scores = [float(t.score) for t in traces]
    if not scores:
        return "nothing to learn: evaluate returned no rollouts"
    if min(scores) >= success:
        return "nothing to learn: every rollout succeeded"
    if max(scores) < success and max(scores) - min(scores) <= 1e-9:
        return "nothing to learn: every rollout failed"
    return "nothing to learn: rewards were equal within every group"


def _no_change_reason(budget_hit: bool, critic: Critic, operations: Sequence[Operation]) -> str:
    if budget_hit and not operations:
        return "budget exhausted"
    if critic.skipped and not operations:
        return "critic answer unparseable twice: skipped"
    return "critic proposed no change to the library"
