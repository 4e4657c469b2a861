"""Evolve: agents that get better at their job while they work.

The public face: agents and teams, episodes, task environments, the ``Evolver`` loop, the versioned
prompts and adapters it learns, serving a team to tenants (``Deployment``) and scheduled jobs (``run_job``).

Names load on first use (PEP 562), so ``import evolve`` is cheap and pulls in no optional package;
``evolve.__all__`` lists every name and a test imports each one. The map below is also the index of
where things live: the loop at the root, environments in ``envs/``, prompts in ``prompts/``, adapters
and the training switch in ``weights/``, parallel teams and K* in ``teams/``, serving and jobs in ``deploy/``
(see ARCHITECTURE.md).

Example:
    >>> import evolve
    >>> evolve.Task(id="t1", prompt="What is 2 + 2?", answer="4").answer
    '4'
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_WHERE = {
    "Agent": "evolve.agent",
    "MemoryView": "evolve.agent",
    "Team": "evolve.agent",
    "TeamAct": "evolve.agent",
    "render_messages": "evolve.agent",
    "Episode": "evolve.episode",
    "Step": "evolve.episode",
    "Evolver": "evolve.evolver",
    "paraphrase_schedule": "evolve.evolver",
    "same_tasks": "evolve.evolver",
    "Executor": "evolve.executors",
    "InProcess": "evolve.executors",
    "Rollout": "evolve.executors",
    "RayExecutor": "evolve.ray_executor",
    "Interval": "evolve.figures",
    "paired_interval": "evolve.figures",
    "seed_interval": "evolve.figures",
    "RoundMetrics": "evolve.run_log",
    "list_runs": "evolve.run_log",
    "Task": "evolve.envs.tasks",
    "TaskEnv": "evolve.envs.tasks",
    "load_tasks": "evolve.envs.tasks",
    "TextWorldEnv": "evolve.envs.textworld",
    "textworld_tasks": "evolve.envs.textworld",
    "humaneval_tasks": "evolve.envs.humaneval",
    "champ_tasks": "evolve.envs.champ",
    "BfclEnv": "evolve.envs.bfcl.single",
    "bfcl_tasks": "evolve.envs.bfcl.single",
    "BfclMultiTurnEnv": "evolve.envs.bfcl.multi_turn",
    "multi_turn_tasks": "evolve.envs.bfcl.multi_turn",
    "PromptGraph": "evolve.prompts.graph",
    "PromptVersion": "evolve.prompts.versions",
    "PromptEvolution": "evolve.prompts.evolution",
    "make_evaluate": "evolve.prompts.evolution",
    "split_tasks": "evolve.prompts.evolution",
    "ParallelTeam": "evolve.teams.parallel",
    "kstar": "evolve.teams.diversity",
    "Diagnosis": "evolve.teams.diagnose",
    "diagnose": "evolve.teams.diagnose",
    "Recompose": "evolve.teams.compose",
    "compose": "evolve.teams.compose",
    "AdapterRegistry": "evolve.weights.registry",
    "AdapterVersion": "evolve.weights.registry",
    "WeightUpdates": "evolve.weights.switch",
    "WeightsReport": "evolve.weights.switch",
    "Answer": "evolve.deploy.serving",
    "Deployment": "evolve.deploy.serving",
    "FeedbackReceipt": "evolve.deploy.serving",
    "JobResult": "evolve.deploy.jobs",
    "job_history": "evolve.deploy.jobs",
    "run_job": "evolve.deploy.jobs",
}

__all__ = [
    "AdapterRegistry",
    "AdapterVersion",
    "Agent",
    "BfclEnv",
    "BfclMultiTurnEnv",
    "Answer",
    "Deployment",
    "Diagnosis",
    "Episode",
    "Evolver",
    "Executor",
    "FeedbackReceipt",
    "InProcess",
    "Interval",
    "JobResult",
    "MemoryView",
    "ParallelTeam",
    "PromptEvolution",
    "PromptGraph",
    "PromptVersion",
    "RayExecutor",
    "Recompose",
    "Rollout",
    "RoundMetrics",
    "Step",
    "Task",
    "TaskEnv",
    "Team",
    "TeamAct",
    "TextWorldEnv",
    "WeightUpdates",
    "WeightsReport",
    "bfcl_tasks",
    "champ_tasks",
    "compose",
    "diagnose",
    "humaneval_tasks",
    "job_history",
    "kstar",
    "list_runs",
    "load_tasks",
    "make_evaluate",
    "multi_turn_tasks",
    "paired_interval",
    "paraphrase_schedule",
    "render_messages",
    "run_job",
    "same_tasks",
    "seed_interval",
    "split_tasks",
    "textworld_tasks",
]


def __getattr__(name: str) -> Any:
    """Import the module that defines ``name`` the first time it is asked for (PEP 562)."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'evolve' has no attribute {name!r}")
    value = getattr(import_module(where), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from evolve.agent import Agent, MemoryView, Team, TeamAct, render_messages
    from evolve.deploy.jobs import JobResult, job_history, run_job
    from evolve.deploy.serving import Answer, Deployment, FeedbackReceipt
    from evolve.envs.champ import champ_tasks
    from evolve.envs.humaneval import humaneval_tasks
    from evolve.envs.tasks import Task, TaskEnv, load_tasks
    from evolve.envs.textworld import TextWorldEnv, textworld_tasks
    from evolve.episode import Episode, Step
    from evolve.evolver import Evolver, paraphrase_schedule, same_tasks
    from evolve.executors import Executor, InProcess, Rollout
    from evolve.figures import Interval, paired_interval, seed_interval
    from evolve.prompts.evolution import PromptEvolution, make_evaluate, split_tasks
    from evolve.prompts.graph import PromptGraph
    from evolve.prompts.versions import PromptVersion
    from evolve.ray_executor import RayExecutor
    from evolve.run_log import RoundMetrics, list_runs
    from evolve.teams.compose import Recompose, compose
    from evolve.teams.diagnose import Diagnosis, diagnose
    from evolve.teams.diversity import kstar
    from evolve.teams.parallel import ParallelTeam
    from evolve.weights.registry import AdapterRegistry, AdapterVersion
    from evolve.weights.switch import WeightsReport, WeightUpdates
