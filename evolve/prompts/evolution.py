"""The bridge between a team and a prompt optimizer.

Optimizers (``optimizers/``) never see a team or an environment: they get an ``evaluate(candidate,
example_ids, *, samples, temperature)`` that runs the team with the candidate's prompts on some tasks and
returns one ``Trace`` per run. ``PromptEvolution`` runs one optimizer step a round against the versioned
``PromptGraph``: an accepted proposal becomes a new version and HEAD; a rejected one is recorded so the
next rewrite can avoid it.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connectors import ConfigError, Environment, Usage
from evolve.agent import Team
from evolve.envs.tasks import Task
from evolve.episode import to_trace
from evolve.executors import play
from evolve.prompts.graph import PromptGraph
from optimizers import Candidate, Evaluate, PromptOptimizer, Trace

log = logging.getLogger(__name__)


def make_evaluate(
    team: Team, tasks: Sequence[Task], env_factory: Callable[[], Environment], *, max_turns: int = 1
) -> Evaluate:
    """An ``evaluate`` that runs ``team`` with a candidate's prompts, memory detached, on tasks by id.

    Multi-step environments (a TextWorld game) play up to ``max_turns`` turns, as the ``Evolver`` does;
    a trace then holds every turn's calls, and its score and feedback are the last step's.
    """
    if max_turns < 1:
        raise ConfigError(f"max_turns must be >= 1, got {max_turns}")
    by_id = {t.id: t for t in tasks}

    def evaluate(
        candidate: Candidate, example_ids: Sequence[str], *, samples: int = 1, temperature: float | None = None
    ) -> list[Trace]:
        unknown = [i for i in example_ids if i not in by_id]
        if unknown:
            raise ConfigError(f"evaluate: unknown task ids {unknown[:5]}")
        trial = team.with_prompts(candidate, memory=False)
        params = {} if temperature is None else {"temperature": temperature}
        runs: dict[tuple[str, int], Trace] = {}
        for k in range(samples):
            chosen = [by_id[i] for i in example_ids]
            for task, trace in zip(chosen, _run(trial, chosen, env_factory, k, params, max_turns), strict=True):
                runs[(task.id, k)] = trace
        return [runs[(i, k)] for i in example_ids for k in range(samples)]

    return evaluate


def _run(
    team: Team,
    tasks: Sequence[Task],
    env_factory: Callable[[], Environment],
    sample: int,
    params: Mapping[str, Any],
    max_turns: int,
) -> list[Trace]:
    """One trace per task: what each agent was asked and said, and how the episode scored (0 on an error)."""
    attempts = play(team, tasks, env_factory, max_turns, sample_index=sample, params=params)
    return [
        to_trace(task.id, a.steps, a.answer, 0.0 if a.error is not None else a.reward, a.feedback)
        for task, a in zip(tasks, attempts, strict=True)
    ]


def split_tasks(tasks: Sequence[Task], *, val_fraction: float = 0.5, seed: int = 0) -> tuple[list[str], list[str]]:
    """A fixed, seeded split of task ids into (train, validation); both non-empty."""
    if len(tasks) < 2:
        raise ConfigError("prompt evolution needs at least 2 tasks (a training and a validation example)")
    if not 0.0 < val_fraction < 1.0:
        raise ConfigError(f"val_fraction must be in (0, 1), got {val_fraction}")
    ids = [t.id for t in tasks]
    random.Random(seed).shuffle(ids)
    n_val = min(len(ids) - 1, max(1, round(len(ids) * val_fraction)))
    return sorted(ids[n_val:]), sorted(ids[:n_val])


@dataclass(frozen=True)
class PromptUpdate:
    """One round's prompt step, as the loop reports it."""

    accepted: bool
    reason: str
    head: str
    usage: Usage


class PromptEvolution:
    """One optimizer step per call, recorded in the prompt graph.

    Args:
        graph: the versioned prompts (initialised from the team's prompts on first use).
        optimizer: any ``PromptOptimizer`` (``TextualGradientOptimizer``, ``TrainingFreeGRPO``, built with ``critic=``).
        train_ids: the minibatch pool (see ``split_tasks``).
        val_ids: the validation set the gate scores candidates on.
    """

    def __init__(
        self, graph: PromptGraph, optimizer: PromptOptimizer, *, train_ids: Sequence[str], val_ids: Sequence[str]
    ) -> None:
        if not train_ids or not val_ids:
            raise ConfigError("prompt evolution needs non-empty training and validation task ids")
        self.graph = graph
        self.optimizer = optimizer
        self.train_ids = list(train_ids)
        self.val_ids = list(val_ids)

    def start(self, team: Team) -> Team:
        """Initialise the graph from ``team`` (a no-op when it exists) and return the team at HEAD."""
        head = self.graph.init(team.prompts(), [(a, b, 1.0) for a, b in team.edges])
        return team.with_prompts(head.nodes)

    def step(self, team: Team, evaluate: Evaluate, *, extra: Sequence[Trace] = ()) -> PromptUpdate:
        """One optimizer step from HEAD; ``extra`` traces (rated served answers) go to optimizers that
        take them (``PromptOptimizer.step``'s ``extra``), and are left out of the call when empty."""
        head = self.graph.head()
        rejected = [nodes for nodes, _reason in self.graph.rejected(limit=3)]
        more: dict[str, Any] = {"extra": list(extra)} if extra else {}
        result = self.optimizer.step(
            self.graph.versions(), head.id, evaluate, self.train_ids, self.val_ids, rejected=rejected, **more
        )
        parent_scores = getattr(result, "parent_scores", None)
        if parent_scores:
            self.graph.set_scores(result.parent, parent_scores)
        if result.accepted and result.candidate is not None:
            new = self.graph.commit(
                result.candidate,
                parents=[result.parent],
                scores=result.val_scores,
                usage=result.usage,
                message=result.reason,
            )
            log.info("prompt update accepted: %s (%s)", new.id, result.reason)
            return PromptUpdate(True, result.reason, new.id, result.usage)
        if result.candidate is not None:
            self.graph.reject(
                result.candidate,
                parent=result.parent,
                reason=result.reason,
                scores=result.val_scores,
                usage=result.usage,
            )
        log.info("prompt update rejected: %s", result.reason)
        return PromptUpdate(False, result.reason, head.id, result.usage)
