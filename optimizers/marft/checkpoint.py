"""MARFT checkpoints: adapters, value head, optimizer states and random states, written atomically.

A checkpoint is a folder ``step-<n>`` under the run's checkpoint folder holding the policy's weights
(``weights/``, written by ``AgentPolicies.save``) and ``state.pt`` (the iteration count, the settings,
Python's and torch's random states, every Adam state and the history so far). It is written into a
temporary sibling and renamed into place, so a run killed mid-write leaves the previous checkpoint
intact; the newest ``KEEP`` checkpoints are kept.

Example:
    >>> latest("/nonexistent") is None
    True
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors import ConfigError

if TYPE_CHECKING:
    from optimizers.marft.trainer import Trainer

log = logging.getLogger(__name__)

KEEP = 3
PREFIX = "step-"


def latest(root: str | Path) -> Path | None:
    """The newest complete checkpoint folder under ``root``, or None."""
    folder = Path(root)
    if not folder.is_dir():
        return None
    done = sorted(p for p in folder.glob(f"{PREFIX}*") if (p / "state.pt").is_file())
    return done[-1] if done else None


def save(trainer: Trainer, root: str | Path) -> Path:
    """Write the trainer's checkpoint for its current iteration; returns the folder."""
    import torch

    folder = Path(root)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{PREFIX}{trainer.step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=".partial-", dir=folder))
    try:
        trainer.policy.save(tmp / "weights")
        torch.save(trainer.state(), tmp / "state.pt")
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in sorted(p for p in folder.glob(f"{PREFIX}*") if p.is_dir())[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)
    log.info("MARFT checkpoint written: %s", final)
    return final


def restore(trainer: Trainer, root: str | Path) -> Path:
    """Load the newest checkpoint under ``root`` into ``trainer`` (weights and state).

    Raises:
        ConfigError: there is no checkpoint, or it was written with other settings.
    """
    import torch

    found = latest(root)
    if found is None:
        raise ConfigError(f"no MARFT checkpoint under {root}")
    state: dict[str, Any] = torch.load(found / "state.pt", weights_only=False)
    mine = _comparable(trainer.state()["args"])
    theirs = _comparable(state["args"])
    if mine != theirs:
        changed = sorted(k for k in mine if mine[k] != theirs.get(k))
        raise ConfigError(
            f"the checkpoint {found} was written with other settings ({', '.join(changed)} differ); "
            "resume with the same Args or start in a new folder"
        )
    trainer.policy.load(found / "weights")
    trainer.load_state(state)
    return found


def _comparable(args: dict[str, Any]) -> dict[str, Any]:
    """Settings that must match to resume: all but the checkpoint spacing (and the iteration count,
    unless the learning rate anneals over it)."""
    free = {"checkpoint_every"} | (set() if args.get("anneal_lr") else {"steps"})
    return {k: v for k, v in args.items() if k not in free}
