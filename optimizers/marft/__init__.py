"""LoRA MARFT: multi-agent PPO over one base model with one LoRA adapter per agent
(docs/design/decisions.md, "LoRA MARFT").

Importing this package loads nothing heavy; torch, transformers and peft are imported by the modules
that need them (``pip install -e '.[local]'``).

Example:
    >>> from optimizers.marft import Args
    >>> Args(steps=10, batch_size=32).schedule
    'all'
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Args": "optimizers.marft.args",
    "Trainer": "optimizers.marft.trainer",
    "StepLog": "optimizers.marft.trainer",
    "evaluate": "optimizers.marft.trainer",
    "Batch": "optimizers.marft.rollout",
    "MarftTask": "optimizers.marft.rollout",
    "RolloutEngine": "optimizers.marft.rollout",
    "collect": "optimizers.marft.rollout",
    "AgentPolicies": "optimizers.marft.policy",
    "VLLMEngine": "optimizers.marft.vllm_engine",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'optimizers.marft' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
