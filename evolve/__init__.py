"""Evolve: agents that get better at their job while they work.

The public face: agents and teams, episodes, task environments, and the ``Evolver`` loop.
"""

from evolve.agent import Agent, MemoryView, Team, TeamAct, render_messages
from evolve.episode import Episode, Step
from evolve.evolver import Evolver, paraphrase_schedule, same_tasks
from evolve.records import RoundMetrics, list_runs
from evolve.tasks import Task, TaskEnv, load_tasks

__all__ = [
    "Agent",
    "Episode",
    "Evolver",
    "MemoryView",
    "RoundMetrics",
    "Step",
    "Task",
    "TaskEnv",
    "Team",
    "TeamAct",
    "list_runs",
    "load_tasks",
    "paraphrase_schedule",
    "render_messages",
    "same_tasks",
]
