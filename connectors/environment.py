"""The environment seam: ``reset(task) -> observation text``, ``step(action) -> Observation``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Observation:
    """What the environment says after an action: text, reward, whether the episode is over, extras.

    ``text`` is the feedback an agent (and its memory) learns from, e.g. "wrong: the code is 4471".
    """

    text: str
    reward: float
    done: bool
    info: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Environment(Protocol):
    """A task environment. ``task`` is whatever the environment's task set holds (usually a dict).

    An environment may also offer ``tools() -> list[Tool]``: the tools of the episode the last ``reset``
    started, which the loop gives the team's final agent. A tool without ``fn`` is only described: the
    agent's calls are its answer, written ``[name(arg=value), ...]`` for ``step`` to check (BFCL); one
    with ``fn`` runs in the agent's tool loop (BFCL's multi-turn APIs). The method stays optional: the
    protocol is ``reset`` and ``step``.
    """

    def reset(self, task: Any) -> str: ...

    def step(self, action: str) -> Observation: ...
