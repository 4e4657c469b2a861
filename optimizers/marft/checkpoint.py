"""MARFT checkpoints: adapters, value head, optimizer states and random states, written atomically.

A checkpoint is a folder ``step-<n>`` under the run's checkpoint folder holding the policy's weights
(``weights/``, written by ``AgentPolicies.save``) and ``state.pt`` (the trainer's state: the iteration
count, the settings, Python's and torch's random states, every Adam state and the history so far). It
is written into a temporary sibling and renamed into place, so a run killed mid-write leaves the
previous checkpoint intact; the newest ``KEEP`` checkpoints are kept. The trainer hands over its
policy and state (``Trainer.state``) and takes its state back: this module never sees the trainer.

Example:
    >>> latest("/nonexistent") is None
    True
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors import ConfigError

if TYPE_CHECKING:
    from optimizers.marft.policy import AgentPolicies

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


def save(root: str | Path, step: int, policy: AgentPolicies, state: Mapping[str, Any]) -> Path:
    """Write the checkpoint of iteration ``step``: ``policy``'s weights and the trainer's ``state``;
    returns the folder."""
    import torch

    folder = Path(root)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{PREFIX}{step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=".partial-", dir=folder))
    try:
        policy.save(tmp / "weights")
        torch.save(dict(state), tmp / "state.pt")
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


def restore(root: str | Path, policy: AgentPolicies, args: Mapping[str, Any]) -> dict[str, Any]:
    """Load the newest checkpoint's weights under ``root`` into ``policy``; returns the trainer state
    saved with them, once its settings match ``args`` (the run's ``Args`` as a dict).

    Raises:
        ConfigError: there is no checkpoint, or it was written with other settings.
    """
    import torch

    found = latest(root)
    if found is None:
        raise ConfigError(f"no MARFT checkpoint under {root}")
    state: dict[str, Any] = torch.load(found / "state.pt", weights_only=False)
    mine = _comparable(dict(args))
    theirs = _comparable(state["args"])
    if mine != theirs:
        changed = sorted(k for k in mine if mine[k] != theirs.get(k))
        raise ConfigError(
            f"the checkpoint {found} was written with other settings ({', '.join(changed)} differ); "
            "resume with the same Args or start in a new folder"
        )
    policy.load(found / "weights")
    return state


def _comparable(args: dict[str, Any]) -> dict[str, Any]:
    """Settings that must match to resume: all but the checkpoint spacing (and the iteration count,
    unless the learning rate anneals over it)."""
    free = {"checkpoint_every"} | (set() if args.get("anneal_lr") else {"steps"})
    return {k: v for k, v in args.items() if k not in free}
