"""Learning algorithms over an agent team's prompts and weights: textual gradients, Training-Free GRPO, MARFT.

May import ``memory`` and ``connectors``; imported by ``evolve``.
"""

import warnings
from typing import Any

from connectors.deprecation import moved
from optimizers.budget import PRESETS, Budget, BudgetExhausted
from optimizers.textgrad import TextualGradientOptimizer
from optimizers.tfgrpo import TrainingFreeGRPO
from optimizers.types import Candidate, Critique, Evaluate, NodeCall, PromptOptimizer, StepResult, Trace, Version

__all__ = [
    "PRESETS",
    "Budget",
    "BudgetExhausted",
    "Candidate",
    "Critique",
    "Evaluate",
    "NodeCall",
    "PromptOptimizer",
    "StepResult",
    "TextualGradientOptimizer",
    "Trace",
    "TrainingFreeGRPO",
    "Version",
]

# Exported before 0.2.0: each algorithm's parts (acceptance, gate, library, parsing, selection, the critic
# wrapper). Importable from here, with a DeprecationWarning naming the module, until
# connectors.deprecation's REMOVED_IN.
_MOVED = {
    "Verdict": "optimizers.acceptance",
    "judge": "optimizers.acceptance",
    "scores_by_example": "optimizers.acceptance",
    "Spend": "optimizers.budget",
    "Critic": "optimizers.critic",
    "CriticFailed": "optimizers.critic",
    "GateDecision": "optimizers.gate",
    "paired_test": "optimizers.gate",
    "LibraryUpdate": "optimizers.library",
    "merge_operations": "optimizers.library",
    "parse_library": "optimizers.library",
    "render_library": "optimizers.library",
    "Operation": "optimizers.parsing",
    "parse_critique": "optimizers.parsing",
    "parse_operations": "optimizers.parsing",
    "parse_rewrite": "optimizers.parsing",
    "pareto_front": "optimizers.selection",
    "select_parent": "optimizers.selection",
}


def __getattr__(name: str) -> Any:
    # `Gradient` was the name of `Critique` before 0.2.0 (a critique, not `Feedback`, which `Trace.feedback`,
    # the environment's text, already means: docs/design/decisions.md, "Vocabulary"); importable, with a
    # warning, until 0.3.0.
    if name == "Gradient":
        warnings.warn("optimizers.Gradient is now optimizers.Critique", DeprecationWarning, stacklevel=2)
        return Critique
    return moved("optimizers", name, _MOVED)
