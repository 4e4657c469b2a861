"""Learning algorithms over an agent team's prompts and weights: textual gradients, Training-Free GRPO, MARFT.

May import ``memory`` and ``connectors``; imported by ``evolve``.
"""

import warnings
from typing import Any

from optimizers.acceptance import Verdict, judge, scores_by_example
from optimizers.budget import PRESETS, Budget, BudgetExhausted, Spend
from optimizers.critic import Critic, CriticFailed
from optimizers.gate import GateDecision, paired_test
from optimizers.library import LibraryUpdate, merge_operations, parse_library, render_library
from optimizers.parsing import Operation, parse_critique, parse_operations, parse_rewrite
from optimizers.selection import pareto_front, select_parent
from optimizers.textgrad import TextualGradientOptimizer
from optimizers.tfgrpo import TrainingFreeGRPO
from optimizers.types import Candidate, Critique, Evaluate, NodeCall, PromptOptimizer, StepResult, Trace, Version

__all__ = [
    "PRESETS",
    "Budget",
    "BudgetExhausted",
    "Candidate",
    "Critic",
    "CriticFailed",
    "Critique",
    "Evaluate",
    "GateDecision",
    "LibraryUpdate",
    "NodeCall",
    "Operation",
    "PromptOptimizer",
    "Spend",
    "StepResult",
    "TextualGradientOptimizer",
    "Trace",
    "TrainingFreeGRPO",
    "Verdict",
    "Version",
    "judge",
    "merge_operations",
    "paired_test",
    "pareto_front",
    "parse_critique",
    "parse_library",
    "parse_operations",
    "parse_rewrite",
    "render_library",
    "scores_by_example",
    "select_parent",
]


def __getattr__(name: str) -> Any:
    # `Gradient` was the name of `Critique` before 0.2.0 (DESIGN §2's "a critique"; not `Feedback`, which
    # `Trace.feedback`, the environment's text, already means); importable, with a warning, until 0.3.0.
    if name == "Gradient":
        warnings.warn("optimizers.Gradient is now optimizers.Critique", DeprecationWarning, stacklevel=2)
        return Critique
    raise AttributeError(f"module 'optimizers' has no attribute {name!r}")
