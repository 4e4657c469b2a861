"""Agents that call tools: running a model's calls (``runs``)."""

from evolve.tools.runs import RESULT_LIMIT, ToolRun, run_call, run_calls

__all__ = ["RESULT_LIMIT", "ToolRun", "run_call", "run_calls"]
