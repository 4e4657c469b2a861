"""Evolve: agents that get better at their job while they work.

The public face: agents and teams, episodes, task environments, the ``Evolver`` loop, and the versioned
prompts and adapters it learns.
"""

from evolve.adapter_versions import AdapterRegistry, AdapterVersion
from evolve.agent import Agent, MemoryView, Team, TeamAct, render_messages
from evolve.episode import Episode, Step
from evolve.evolver import Evolver, paraphrase_schedule, same_tasks
from evolve.prompt_graph import PromptGraph
from evolve.prompt_loop import PromptEvolution, make_evaluate, split_tasks
from evolve.prompt_versions import PromptVersion
from evolve.records import RoundMetrics, list_runs
from evolve.tasks import Task, TaskEnv, load_tasks
from evolve.weights import WeightsReport, WeightUpdates

__all__ = [
    "AdapterRegistry",
    "AdapterVersion",
    "Agent",
    "Episode",
    "Evolver",
    "MemoryView",
    "PromptEvolution",
    "PromptGraph",
    "PromptVersion",
    "RoundMetrics",
    "Step",
    "Task",
    "TaskEnv",
    "Team",
    "TeamAct",
    "WeightUpdates",
    "WeightsReport",
    "list_runs",
    "make_evaluate",
    "load_tasks",
    "paraphrase_schedule",
    "render_messages",
    "same_tasks",
    "split_tasks",
]
