"""Textual gradients: critiques of failures flow back through the team and rewrite its prompts.

One ``step`` (docs/design/decisions.md, "Textual gradients"):

1. pick a parent version (the best so far, or a draw from the Pareto front of per-example scores);
2. forward: run a minibatch of training examples, keeping every call's input and output;
3. the loss: each failed example's score and the environment's feedback;
4. backward: a critique per (LLM call x trainable component), walking the calls from the output back
   so each critique sees how its call's output was judged downstream; a single-call trace gets one
   critique of the whole trace instead (or, with ``backward="feedback"``, the feedback is the critique);
5. update: one rewrite per chosen component (the most criticised first), from its role, its full
   current text, the critiques, the best past versions with their scores and the recently rejected
   proposals;
6. gate: strict improvement on the minibatch, then a paired test on per-example validation scores.

Example:
    >>> from connectors import ChatClient, ScriptedChat
    >>> opt = TextualGradientOptimizer(critic=ChatClient(ScriptedChat(["NO CHANGE"])), budget="light")
    >>> opt.minibatch_size
    4
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import optimizers.prompts as P
from connectors import ChatClient, ConfigError
from optimizers.acceptance import judge, mean_score, step_result
from optimizers.budget import Budget, BudgetExhausted, Spend, as_budget
from optimizers.critic import Critic, CriticFailed
from optimizers.parsing import parse_critique, parse_rewrite, parse_untagged_rewrite
from optimizers.selection import ParentSelection, sample_ids, select_parent
from optimizers.types import Candidate, Critique, Evaluate, StepResult, Trace, Version

log = logging.getLogger(__name__)

Backward = Literal["auto", "per_call", "whole", "feedback"]
Edit = Literal["rewrite", "append"]


class TextualGradientOptimizer:
    """Rewrites prompt components from critiques of failed examples, behind two gates.

    Args:
        critic: the model that critiques and rewrites (required: there is no default model).
        budget: a preset name (``light``, ``medium``, ``heavy``) or a ``Budget``; caps the critic's
            spend per step.
        minibatch_size: training examples per step (default: the budget's).
        parent_selection: ``best`` (highest mean validation score) or ``pareto``.
        components: the trainable component names (default: every component of the parent).
        backward: ``per_call`` critiques, one ``whole``-trace critique, ``auto`` (whole when the
            trace has a single call), or ``feedback``: the environment's feedback itself is the
            critique of every component the trace used, with no critic call — for environments whose
            feedback already says what is wrong, and for critics too small to critique (a 135M model
            cannot; it can still turn feedback into a rewrite).
        success: a score at or above this is a success and is not critiqued.
        edit: ``rewrite`` asks for the complete new text of each chosen component; ``append`` asks
            for one new instruction and adds it after the current text (a smaller edit that a small
            critic can make without destroying what already works).
        history: how many past versions and rejected proposals the rewrite prompt shows.
        alpha: the validation test's significance level.
        critic_params: sampling parameters for every critic call.
        untagged: accept a rewrite without ``<new_text>`` tags (its first paragraph), for small
            critics that cannot keep the format; the two gates still decide.
        seed: seeds minibatch sampling, Pareto draws and the validation test.

    Example:
        >>> from connectors import ChatClient, ScriptedChat
        >>> opt = TextualGradientOptimizer(critic=ChatClient(ScriptedChat(["NO CHANGE"])), minibatch_size=2)
        >>> v = Version("v0", {"solver.system": "Answer."}, {})
        >>> ok = lambda c, ids, **kw: [Trace(i, (), "fine", 1.0, "correct") for i in ids]
        >>> opt.step([v], "v0", ok, ["a", "b"], []).reason
        'nothing to learn: every minibatch example succeeded'
    """

    def __init__(
        self,
        *,
        critic: ChatClient,
        budget: str | Budget = "light",
        minibatch_size: int | None = None,
        parent_selection: ParentSelection = "best",
        components: Sequence[str] | None = None,
        backward: Backward = "auto",
        edit: Edit = "rewrite",
        success: float = 1.0,
        history: int = 3,
        alpha: float = 0.05,
        critic_params: Mapping[str, Any] | None = None,
        untagged: bool = False,
        seed: int = 0,
    ) -> None:
        if critic is None:
            raise ConfigError("TextualGradientOptimizer needs critic=<ChatClient>; there is no default model")
        if backward not in ("auto", "per_call", "whole", "feedback"):
            raise ConfigError(f"backward must be 'auto', 'per_call', 'whole' or 'feedback', got {backward!r}")
        if edit not in ("rewrite", "append"):
            raise ConfigError(f"edit must be 'rewrite' or 'append', got {edit!r}")
        if parent_selection not in ("best", "pareto"):
            raise ConfigError(f"parent_selection must be 'best' or 'pareto', got {parent_selection!r}")
        self.critic = critic
        self.budget = as_budget(budget)
        self.minibatch_size = self.budget.minibatch_size if minibatch_size is None else minibatch_size
        if self.minibatch_size < 1:
            raise ConfigError(f"minibatch_size must be >= 1, got {minibatch_size}")
        self.parent_selection: ParentSelection = parent_selection
        self.components = tuple(components) if components is not None else None
        self.backward: Backward = backward
        self.edit: Edit = edit
        self.success = success
        self.history = history
        self.alpha = alpha
        self.critic_params = dict(critic_params or {})
        self.parse_rewrite = parse_untagged_rewrite if untagged else parse_rewrite
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
        """Propose a rewrite of the parent's prompts and gate it; see the module docstring.

        ``extra`` traces that fell short (rated answers from serving) join the minibatch's failures in
        the backward pass; the gates judge on the minibatch and the validation set only.
        """
        if not train_ids:
            raise ConfigError("step needs at least one training example id, got none")
        parent = select_parent(versions, head, mode=self.parent_selection, example_ids=val_ids, rng=self._rng)
        trainable = self._trainable(parent.candidate)
        minibatch = sample_ids(self._rng, train_ids, self.minibatch_size)
        spend = Spend(self.budget)
        critic = Critic(self.critic, spend, params=self.critic_params)
        traces = evaluate(parent.candidate, minibatch)
        before = mean_score(traces)
        failures = [t for t in [*traces, *extra] if t.score < self.success]
        if not failures:
            return step_result(parent, spend, "nothing to learn: every minibatch example succeeded")
        try:
            critiques, budget_hit = self._backward(failures, parent.candidate, trainable, critic)
            if not critiques:
                return step_result(parent, spend, _no_critique_reason(budget_hit, critic))
            chosen = choose_components(critiques, self.budget.max_components)
            proposal = self._update(parent, chosen, critiques, versions, rejected, critic)
        except BudgetExhausted as e:
            log.info("textual-gradient step stopped: %s", e)
            return step_result(parent, spend, "budget exhausted")
        except CriticFailed as e:
            return step_result(parent, spend, str(e))
        changed = tuple(c for c in chosen if proposal.get(c) != parent.candidate.get(c))
        if not changed:
            reason = "critic answer unparseable twice: skipped" if critic.skipped else "critic proposed no change"
            return step_result(parent, spend, reason, critiques=critiques)
        if any(dict(proposal) == dict(r) for r in rejected):
            return step_result(
                parent, spend, "proposal repeats a recently rejected candidate", proposal, changed, critiques
            )
        verdict = judge(
            evaluate=evaluate,
            parent=parent,
            proposal=proposal,
            minibatch_ids=minibatch,
            parent_minibatch=before,
            val_ids=val_ids,
            alpha=self.alpha,
            seed=self.seed,
        )
        log.info("textual-gradient step on %s changed %s: %s", parent.id, ", ".join(changed), verdict.reason)
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

    def _trainable(self, candidate: Candidate) -> tuple[str, ...]:
        if self.components is None:
            return tuple(candidate)
        unknown = [c for c in self.components if c not in candidate]
        if unknown:
            raise ConfigError(f"trainable components {unknown} are not in the candidate ({sorted(candidate)})")
        return self.components

    def _backward(
        self, failures: Sequence[Trace], candidate: Candidate, trainable: Sequence[str], critic: Critic
    ) -> tuple[list[Critique], bool]:
        """Critiques for every failed trace; stops early (True) when only the rewrites' calls are left."""
        critiques: list[Critique] = []
        reserve = min(self.budget.max_components, len(trainable))
        for trace in failures:
            try:
                critiques += self._critique_trace(trace, candidate, trainable, critic, reserve)
            except BudgetExhausted as e:
                log.info("backward stopped after %d critiques: %s", len(critiques), e)
                return critiques, True
        return critiques, False

    def _critique_trace(
        self, trace: Trace, candidate: Candidate, trainable: Sequence[str], critic: Critic, reserve: int
    ) -> list[Critique]:
        used = [c for call in trace.calls for c in call.components if c in trainable]
        targets = list(dict.fromkeys(used)) or list(trainable)  # an opaque trace: critique everything
        if self.backward == "feedback":
            feedback = trace.feedback.strip()
            return [Critique(c, feedback, (trace.example_id,)) for c in targets] if feedback else []
        if self.backward == "whole" or (self.backward == "auto" and len(trace.calls) <= 1) or not used:
            prompt = P.TRACE_CRITIQUE_PROMPT.format(
                component_texts=P.render_blocks(P.render_component(c, candidate.get(c, "")) for c in targets),
                calls=P.render_calls(trace.calls),
                final=P.shown(trace.output),
                score=f"{trace.score:.2f}",
                feedback=P.feedback_block(trace.feedback),
            )
            text = critic.ask(prompt, component=",".join(targets), parse=parse_critique, reserve_calls=reserve)
            return [Critique(c, text, (trace.example_id,)) for c in targets] if text else []
        critiques: list[Critique] = []
        downstream: list[str] = []
        for step in range(len(trace.calls), 0, -1):  # from the output back
            call = trace.calls[step - 1]
            for component in (c for c in call.components if c in trainable):
                prompt = P.CRITIQUE_PROMPT.format(
                    component=component,
                    description=P.describe(component),
                    text=P.shown(candidate.get(component, "")),
                    step=step,
                    steps=len(trace.calls),
                    node=call.node,
                    prompt=P.shown(call.prompt),
                    output=P.shown(call.output),
                    final=P.shown(trace.output),
                    score=f"{trace.score:.2f}",
                    feedback=P.feedback_block(trace.feedback),
                    downstream=P.render_list(downstream),
                )
                text = critic.ask(prompt, component=component, parse=parse_critique, reserve_calls=reserve)
                if text:
                    critiques.append(Critique(component, text, (trace.example_id,)))
                    downstream.append(
                        P.DOWNSTREAM_ITEM.format(component=component, step=step, node=call.node, text=text)
                    )
        return critiques

    def _update(
        self,
        parent: Version,
        chosen: Sequence[str],
        critiques: Sequence[Critique],
        versions: Sequence[Version],
        rejected: Sequence[Candidate],
        critic: Critic,
    ) -> dict[str, str]:
        """One rewrite (or addition) per chosen component; a budget stop keeps the ones already made."""
        proposal = dict(parent.candidate)
        for done, component in enumerate(chosen):
            current = parent.candidate.get(component, "")
            fields = dict(
                component=component,
                description=P.describe(component),
                role_block=P.render_role(component, parent.candidate.get(P.system_component(component))),
                text=P.shown(current),
                critiques=P.render_list(
                    P.CRITIQUE_ITEM.format(index=i, examples=", ".join(q.example_ids) or "-", text=q.text)
                    for i, q in enumerate(merge_critiques(critiques, component), 1)
                ),
                rejected=P.render_blocks(rejected_items(component, current, rejected, self.history)),
            )
            if self.edit == "append":
                prompt = P.APPEND_PROMPT.format(**fields)
            else:
                history = P.render_blocks(history_items(component, versions, self.history))
                prompt = P.REWRITE_PROMPT.format(**fields, history=history)
            try:
                new_text = critic.ask(prompt, component=component, parse=self.parse_rewrite)
            except BudgetExhausted:
                if done == 0:
                    raise
                break
            if new_text is not None:
                proposal[component] = append_instruction(current, new_text) if self.edit == "append" else new_text
        return proposal


def append_instruction(text: str, instruction: str) -> str:
    """``text`` with ``instruction`` on a new line after it, unless ``text`` already says it.

    Example:
        >>> append_instruction("Answer briefly.", "State the units.")
        'Answer briefly.\\nState the units.'
        >>> append_instruction("Answer briefly.\\nState the units.", "state the units.")
        'Answer briefly.\\nState the units.'
    """
    if " ".join(instruction.lower().split()) in " ".join(text.lower().split()):
        return text
    return f"{text.rstrip()}\n{instruction}" if text.strip() else instruction


def choose_components(critiques: Sequence[Critique], limit: int) -> list[str]:
    """The components with the most critiques (first-criticised first on ties), at most ``limit``."""
    counts = Counter(q.component for q in critiques)
    order = list(dict.fromkeys(q.component for q in critiques))
    return sorted(order, key=lambda c: (-counts[c], order.index(c)))[:limit]


def merge_critiques(critiques: Sequence[Critique], component: str) -> list[Critique]:
    """The critiques of ``component``, identical texts merged into one listing all their examples."""
    merged: dict[str, list[str]] = {}
    for q in critiques:
        if q.component == component:
            ids = merged.setdefault(q.text, [])
            ids += [e for e in q.example_ids if e not in ids]
    return [Critique(component, text, tuple(ids)) for text, ids in merged.items()]


def history_items(component: str, versions: Sequence[Version], limit: int) -> list[str]:
    """The best-scoring past versions with distinct texts of ``component``, rendered, best first."""
    scored = sorted((v for v in versions if v.scores), key=lambda v: -v.mean)
    items, seen = [], set()
    for v in scored:
        text = v.candidate.get(component, "")
        if text in seen:
            continue
        seen.add(text)
        items.append(P.HISTORY_ITEM.format(id=v.id, mean=v.mean, n=len(v.scores), text=P.shown(text)))
        if len(items) >= limit:
            break
    return items


def rejected_items(component: str, current: str, rejected: Sequence[Candidate], limit: int) -> list[str]:
    """The most recent distinct rejected texts of ``component`` (other than the current one), rendered."""
    texts = list(dict.fromkeys(r[component] for r in rejected if r.get(component, current) != current))
    return [P.REJECTED_ITEM.format(index=i, text=t) for i, t in enumerate(texts[-limit:] if limit else [], 1)]


def _no_critique_reason(budget_hit: bool, critic: Critic) -> str:
    if budget_hit:
        return "budget exhausted"
    if critic.skipped:
        return "critic answer unparseable twice: skipped"
    return "critic found nothing to change"
