"""Learning algorithms over an agent team's prompts and weights: textual gradients, Training-Free GRPO, MARFT.

May import ``memory`` and ``connectors``; imported by ``evolve``.
"""

from optimizers.acceptance import Verdict, judge, scores_by_example
from optimizers.budget import PRESETS, Budget, BudgetExhausted, Spend
from optimizers.critic import Critic, CriticFailed
from optimizers.gate import GateDecision, paired_test
from optimizers.library import LibraryUpdate, merge_operations, parse_library, render_library
from optimizers.parsing import Operation, parse_critique, parse_operations, parse_rewrite
from optimizers.selection import pareto_front, select_parent
from optimizers.textgrad import TextualGradientOptimizer
from optimizers.tfgrpo import TrainingFreeGRPO
from optimizers.types import Candidate, Evaluate, Gradient, NodeCall, StepResult, Trace, Version

__all__ = [
    "PRESETS",
    "Budget",
    "BudgetExhausted",
    "Candidate",
    "Critic",
    "CriticFailed",
    "Evaluate",
    "GateDecision",
    "Gradient",
    "LibraryUpdate",
    "NodeCall",
    "Operation",
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
