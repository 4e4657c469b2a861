"""Evolve: agents that get better at their job while they work.

The public face: agents and teams, episodes, task environments, the ``Evolver`` loop, the versioned
prompts and adapters it learns, serving a team to tenants (``Deployment``) and scheduled jobs (``run_job``).
"""

from evolve.adapter_versions import AdapterRegistry, AdapterVersion
from evolve.agent import Agent, MemoryView, Team, TeamAct, render_messages
from evolve.champ_env import champ_tasks
from evolve.episode import Episode, Step
from evolve.evolver import Evolver, paraphrase_schedule, same_tasks
from evolve.executors import Executor, InProcess, Rollout
from evolve.humaneval_env import humaneval_tasks
from evolve.jobs import JobResult, job_history, run_job
from evolve.prompt_graph import PromptGraph
from evolve.prompt_loop import PromptEvolution, make_evaluate, split_tasks
from evolve.prompt_versions import PromptVersion
from evolve.ray_executor import RayExecutor
from evolve.records import RoundMetrics, list_runs
from evolve.serving import Answer, Deployment, FeedbackReceipt
from evolve.tasks import Task, TaskEnv, load_tasks
from evolve.textworld_env import TextWorldEnv, textworld_tasks
from evolve.weights import WeightsReport, WeightUpdates

__all__ = [
    "AdapterRegistry",
    "AdapterVersion",
    "Agent",
    "Answer",
    "Deployment",
    "Episode",
    "Evolver",
    "Executor",
    "FeedbackReceipt",
    "InProcess",
    "JobResult",
    "MemoryView",
    "PromptEvolution",
    "PromptGraph",
    "PromptVersion",
    "RayExecutor",
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
    "champ_tasks",
    "humaneval_tasks",
    "job_history",
    "list_runs",
    "make_evaluate",
    "load_tasks",
    "paraphrase_schedule",
    "render_messages",
    "run_job",
    "same_tasks",
    "split_tasks",
    "textworld_tasks",
]
