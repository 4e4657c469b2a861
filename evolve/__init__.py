"""Evolve: agents that get better at their job while they work.

The public face: agents and teams, episodes, task environments, the ``Evolver`` loop, the versioned
prompts and adapters it learns, serving a team to tenants (``Deployment``) and scheduled jobs (``run_job``).

Names load on first use (PEP 562), so ``import evolve`` is cheap and pulls in no optional package;
``evolve.__all__`` lists every name and a test imports each one. The map below is also the index of
where things live: the loop at the root, environments in ``envs/``, prompts in ``prompts/``, adapters
and the training switch in ``weights/``, parallel teams and K* in ``teams/``, serving and its protocols in
``serve/``, jobs in ``jobs/``, backups in ``backup/`` (see ARCHITECTURE.md).

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
    "Episode": "evolve.episode",
    "Evolver": "evolve.evolver",
    "paraphrase_schedule": "evolve.evolver",
    "same_tasks": "evolve.evolver",
    "Executor": "evolve.executors",
    "InProcess": "evolve.executors",
    "RayExecutor": "evolve.ray_executor",
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
    "PromptEvolution": "evolve.prompts.evolution",
    "make_evaluate": "evolve.prompts.evolution",
    "split_tasks": "evolve.prompts.evolution",
    "ParallelTeam": "evolve.teams.parallel",
    "OrderedTeam": "evolve.teams.ordered",
    "diagnose": "evolve.teams.diagnose",
    "compose": "evolve.teams.compose",
    "AdapterRegistry": "evolve.weights.registry",
    "WeightUpdates": "evolve.weights.switch",
    "Deployment": "evolve.serve.deployment",
    "run_job": "evolve.jobs.job",
}

__all__ = [
    "AdapterRegistry",
    "Agent",
    "BfclEnv",
    "BfclMultiTurnEnv",
    "Deployment",
    "Episode",
    "Evolver",
    "Executor",
    "InProcess",
    "MemoryView",
    "OrderedTeam",
    "ParallelTeam",
    "PromptEvolution",
    "PromptGraph",
    "RayExecutor",
    "RoundMetrics",
    "Task",
    "TaskEnv",
    "Team",
    "TextWorldEnv",
    "WeightUpdates",
    "bfcl_tasks",
    "champ_tasks",
    "compose",
    "diagnose",
    "humaneval_tasks",
    "list_runs",
    "load_tasks",
    "make_evaluate",
    "multi_turn_tasks",
    "paraphrase_schedule",
    "run_job",
    "same_tasks",
    "split_tasks",
    "textworld_tasks",
]

# Names this face exported before 0.2.0: the maths of figures and K*, the types a call returns, the loop's
# internals. Each still imports from here, with a DeprecationWarning naming its module, until
# connectors.deprecation's REMOVED_IN.
_MOVED = {
    "AdapterVersion": "evolve.weights.registry",
    "Answer": "evolve.serve.answers",
    "Diagnosis": "evolve.teams.diagnose",
    "FeedbackReceipt": "evolve.serve.feedback",
    "Interval": "evolve.intervals",
    "JobResult": "evolve.jobs.job",
    "PromptVersion": "evolve.prompts.versions",
    "Recompose": "evolve.teams.compose",
    "Rollout": "evolve.executors",
    "Step": "evolve.episode",
    "TeamAct": "evolve.agent",
    "WeightsReport": "evolve.weights.switch",
    "job_history": "evolve.jobs.job",
    "kstar": "evolve.teams.diversity",
    "paired_interval": "evolve.intervals",
    "render_messages": "evolve.agent",
    "seed_interval": "evolve.intervals",
}


def __getattr__(name: str) -> Any:
    """Import the module that defines ``name`` the first time it is asked for (PEP 562); a name that left
    the face comes from its module with a DeprecationWarning."""
    where = _WHERE.get(name)
    if where is None:
        from connectors.deprecation import moved  # here, not at the top: `import evolve` stays cheap

        return moved("evolve", name, _MOVED)
    value = getattr(import_module(where), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from evolve.agent import Agent, MemoryView, Team
    from evolve.envs.bfcl.multi_turn import BfclMultiTurnEnv, multi_turn_tasks
    from evolve.envs.bfcl.single import BfclEnv, bfcl_tasks
    from evolve.envs.champ import champ_tasks
    from evolve.envs.humaneval import humaneval_tasks
    from evolve.envs.tasks import Task, TaskEnv, load_tasks
    from evolve.envs.textworld import TextWorldEnv, textworld_tasks
    from evolve.episode import Episode
    from evolve.evolver import Evolver, paraphrase_schedule, same_tasks
    from evolve.executors import Executor, InProcess
    from evolve.jobs.job import run_job
    from evolve.prompts.evolution import PromptEvolution, make_evaluate, split_tasks
    from evolve.prompts.graph import PromptGraph
    from evolve.ray_executor import RayExecutor
    from evolve.run_log import RoundMetrics, list_runs
    from evolve.serve.deployment import Deployment
    from evolve.teams.compose import compose
    from evolve.teams.diagnose import diagnose
    from evolve.teams.ordered import OrderedTeam
    from evolve.teams.parallel import ParallelTeam
    from evolve.weights.registry import AdapterRegistry
    from evolve.weights.switch import WeightUpdates
