"""Wrong ratings, on purpose: an environment whose verdicts reach memory through a rater that errs.

Deployments rate answers by hand, and people rate by mistake. ``NoisyRatings`` wraps any environment's
factory: each finished episode's verdict is flipped with probability ρ before the loop (and so memory) sees
it (a success rated bad, a failure rated good), while the true verdict is kept in ``truth``. A flipped
failure says "Correct." and is stored as a success with its wrong answer; a flipped success says "Wrong."
and reveals nothing, as a careless "bad" rating does. One uniform number is drawn per (seed, task, n-th
rating of that task), so runs that differ only in memory see the same wrong ratings, and the flips at a
smaller ρ are among those at a larger one.

Example:
    >>> from evolve.envs.tasks import Task, TaskEnv
    >>> tasks = [Task(id="t1", prompt="2 + 2?", answer=4, checker="numeric")]
    >>> rated = NoisyRatings(lambda: TaskEnv(tasks), rho=1.0, seed=0)
    >>> env = rated()
    >>> _ = env.reset("t1")
    >>> obs = env.step("4")
    >>> obs.reward, obs.text, rated.truth["t1"]
    (0.0, 'Wrong.', [1.0])
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from connectors.environment import Environment, Observation
from connectors.errors import ConfigError

SAID_CORRECT = "Correct."
"""What a wrong "good" rating of a failure says."""
SAID_WRONG = "Wrong."
"""What a wrong "bad" rating of a success says: nothing about the right answer."""


def check_probability(name: str, value: object) -> float:
    """A probability (or a share) in [0, 1] as a float; ConfigError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ConfigError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def flipped(rho: float, seed: int, task_id: str, n: int) -> bool:
    """Whether the ``n``-th rating (from 0) of ``task_id`` is wrong: one uniform draw per (seed, task, n)."""
    u = np.random.default_rng([seed, zlib.crc32(task_id.encode("utf-8")), n]).random()
    return bool(u < rho)


class NoisyRatings:
    """A factory of environments whose verdicts are wrong with probability ``rho`` (see the module).

    Args:
        factory: builds the real environment, one per episode (``Evolver``'s ``env_factory``).
        rho: the share of wrong ratings, in [0, 1].
        seed: which wrong ratings (the same seed, the same flips).

    Attributes:
        truth: task id → the true reward of each of its episodes, in the order they finished.
        flips: how many verdicts were flipped.
    """

    def __init__(self, factory: Callable[[], Environment], *, rho: float, seed: int = 0) -> None:
        if not callable(factory):
            raise ConfigError(f"NoisyRatings needs an environment factory (a callable), got {factory!r:.80}")
        self.factory, self.rho, self.seed = factory, check_probability("rho", rho), int(seed)
        self.truth: dict[str, list[float]] = {}
        self.flips = 0
        self._lock = threading.Lock()  # the loop may run episodes on threads

    def __call__(self) -> NoisyEnv:
        return NoisyEnv(self.factory(), self)

    def rate(self, task_id: str, obs: Observation) -> Observation:
        """Keep the true verdict of a finished episode; return the one the rater gives."""
        with self._lock:
            seen = self.truth.setdefault(task_id, [])
            seen.append(float(obs.reward))
            if not flipped(self.rho, self.seed, task_id, len(seen) - 1):
                return obs
            self.flips += 1
        good = obs.reward >= 1.0
        return Observation(SAID_WRONG if good else SAID_CORRECT, 0.0 if good else 1.0, True, dict(obs.info))

    def true_rewards(self, task_ids: list[str], n: int) -> list[float]:
        """The true reward of each task's ``n``-th episode (0 where it had none)."""
        return [self.truth[t][n] if len(self.truth.get(t, [])) > n else 0.0 for t in task_ids]


class NoisyEnv:
    """One episode's environment under ``NoisyRatings``: the real one, its last verdict rated."""

    def __init__(self, inner: Environment, rater: NoisyRatings) -> None:
        self.inner, self.rater, self.task_id = inner, rater, ""

    def reset(self, task: Any) -> str:
        self.task_id = task if isinstance(task, str) else str(getattr(task, "id", None) or task["id"])
        return self.inner.reset(task)

    def tools(self) -> list[Any]:
        """The real environment's tools for this episode (BFCL's functions), if it gives any."""
        tools = getattr(self.inner, "tools", None)
        return list(tools()) if callable(tools) else []

    def step(self, action: str) -> Observation:
        obs = self.inner.step(action)
        return self.rater.rate(self.task_id, obs) if obs.done else obs


__all__ = ["NoisyEnv", "NoisyRatings", "check_probability", "flipped"]
