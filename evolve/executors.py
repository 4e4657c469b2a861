"""Where a batch's episodes run: the seam between the loop and its compute.

The loop hands an executor a ``Rollout`` (the team, the environment factory, the round: a picklable
function from tasks to episodes) and the batch's tasks; the executor returns one ``Episode`` per task,
in task order. ``InProcess`` calls the rollout here, on the whole batch at once. ``RayExecutor``
(``evolve.ray_executor``) splits the batch into one chunk per worker and runs the chunks as Ray tasks;
the workers recall from the shared memory store, and learning (reinforce, write) stays in the loop's
process either way, so checkpoints and resumption do not depend on where episodes ran.

Example:
    >>> from connectors import load_chat
    >>> from evolve.agent import Agent, Team
    >>> from evolve.evolver import task_envs
    >>> tasks = [Task(id="t1", prompt="What is 2 + 2?", answer="4")]
    >>> rollout = Rollout(Team([Agent("solver", load_chat("fake/scripted", replies=["4"]))]), task_envs(tasks))
    >>> [e.reward for e in InProcess().run(rollout, tasks)]
    [1.0]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from connectors import ConfigError, Environment, EvolveError, Tool
from evolve.agent import Team, TeamAct
from evolve.envs.tasks import Task
from evolve.episode import Episode, Step
from evolve.run_log import MAX_EPISODE_ID
from memory.write.checks import fit_id


@runtime_checkable
class Executor(Protocol):
    """Runs a rollout over tasks and returns one episode per task, in task order.

    An executor that ships the rollout to other processes may also offer ``check(rollout)``, which the
    ``Evolver`` calls once at construction so that what cannot be shipped fails at once.
    """

    def run(self, rollout: Rollout, tasks: Sequence[Task]) -> list[Episode]: ...


@dataclass
class _Attempt:
    """One episode while it runs: its environment, the steps so far and what the last turn left."""

    env: Environment
    observation: str
    steps: list[Step] = field(default_factory=list)
    answer: str = ""
    reward: float = 0.0
    feedback: str = ""
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def take(self, act: TeamAct) -> bool:
        """Record the team's act and step the environment; True when the episode goes on."""
        self.steps.extend(act.steps)
        self.answer = act.answer
        if act.error is not None:
            self.error, self.feedback = act.error, f"error: {act.error}"
            return False
        try:
            o = self.env.step(act.answer)
        except EvolveError as e:
            self.error, self.feedback = f"environment: {e}", f"error: {e}"
            return False
        self.reward, self.feedback, self.info = float(o.reward), o.text, dict(o.info)
        if o.done:
            return False
        self.observation = o.text
        return True


def play(
    team: Team,
    tasks: Sequence[Task],
    env_factory: Callable[[], Environment],
    max_turns: int,
    *,
    queries: Sequence[str] | None = None,
    sample_index: int = 0,
    params: Mapping[str, Any] | None = None,
) -> list[_Attempt]:
    """One attempt per task, the team acting on all of them together, turn by turn, until each is done,
    failed or out of turns. ``queries`` (one per task; default: the observations) drive recall."""
    attempts = []
    for t in tasks:
        env = env_factory()
        attempts.append(_Attempt(env, env.reset(t)))
    tools = [env_tools(a.env) for a in attempts]
    active = list(range(len(tasks)))
    for turn in range(max_turns):
        if not active:
            break
        acts = team.act(
            [attempts[i].observation for i in active],
            queries=None if queries is None else [queries[i] for i in active],
            turn=turn,
            sample_index=sample_index,
            params=params,
            contexts=[tasks[i].id for i in active],  # each recall is for its task (RetrievalConfig.context_q)
            tools=[tools[i] for i in active] if any(tools) else None,
        )
        active = [i for i, act in zip(active, acts, strict=True) if attempts[i].take(act)]
    return attempts


def env_tools(env: Environment) -> list[Tool]:
    """The tools an environment gives the episode it just started (its optional ``tools()``), or none."""
    tools = getattr(env, "tools", None)
    if not callable(tools):
        return []
    out = list(tools())
    if not all(isinstance(t, Tool) for t in out):
        raise ConfigError(f"{type(env).__name__}.tools() must return connectors.Tool objects, got {out!r:.120}")
    return out


@dataclass(frozen=True)
class Rollout:
    """One episode per task, the team acting on all of them together, turn by turn.

    A picklable function object (when its team and environment factory are): an executor calls it
    in this process or ships it to workers. Episode ids are ``<run>:<round>:<task id>``, shortened with a
    hash (``memory.write.checks.fit_id``) when longer than the run log's 300-character id column.

    Args:
        team: the agents.
        env_factory: builds one environment per episode.
        run: the run's name (the first part of episode ids).
        round: the round the episodes belong to.
        max_turns: turns per episode for multi-step environments.

    Example:
        >>> from connectors import load_chat
        >>> from evolve.agent import Agent
        >>> from evolve.envs.tasks import TaskEnv
        >>> tasks = [Task(id="t1", prompt="2 + 2?", answer="4")]
        >>> team = Team([Agent("a", load_chat("fake/scripted", replies=["4"]))])
        >>> Rollout(team, lambda: TaskEnv(tasks), run="r", round=1)(tasks)[0].id
        'r:1:t1'
    """

    team: Team
    env_factory: Callable[[], Environment]
    run: str = "default"
    round: int = 0
    max_turns: int = 1

    def __call__(self, tasks: Sequence[Task]) -> list[Episode]:
        attempts = play(self.team, tasks, self.env_factory, self.max_turns, queries=[t.prompt for t in tasks])
        return [self._episode(t, a) for t, a in zip(tasks, attempts, strict=True)]

    def _credited(self, task: Task, a: _Attempt) -> tuple[Step, ...]:
        """The attempt's steps; a team that credits steps (``Team.credits_steps``) gets, in a one-turn episode,
        each step's output scored as if it were the answer."""
        if self.team.credits_steps and self.max_turns == 1 and a.error is None:
            return scored_steps(a.steps, task, self.env_factory)
        return tuple(a.steps)

    def _episode(self, task: Task, a: _Attempt) -> Episode:
        return Episode(
            id=fit_id(f"{self.run}:{self.round}:{task.id}", MAX_EPISODE_ID),
            task_id=task.id,
            prompt=task.prompt,
            steps=self._credited(task, a),
            answer=a.answer,
            reward=a.reward,
            feedback=a.feedback,
            round=self.round,
            error=a.error,
            info=a.info,
        )


def scored_steps(steps: Sequence[Step], task: Task, env_factory: Callable[[], Environment]) -> tuple[Step, ...]:
    """A one-turn episode's steps, each before the last with ``score``: the reward a fresh environment gives
    its output as the answer to ``task`` (None where the environment fails on it)."""

    def score(output: str) -> float | None:
        env = env_factory()
        try:
            env.reset(task)
            return float(env.step(output).reward)
        except EvolveError:
            return None

    return tuple(replace(s, score=score(s.output)) if k < len(steps) - 1 else s for k, s in enumerate(steps))


class InProcess:
    """Runs the rollout here, on the whole batch at once (local models batch it, API models thread it).

    Example:
        >>> from connectors import load_chat
        >>> from evolve.agent import Agent
        >>> from evolve.envs.tasks import TaskEnv
        >>> tasks = [Task(id="t1", prompt="2 + 2?", answer="4")]
        >>> rollout = Rollout(Team([Agent("a", load_chat("fake/scripted", replies=["5"]))]), lambda: TaskEnv(tasks))
        >>> InProcess().run(rollout, tasks)[0].success
        False
    """

    def run(self, rollout: Rollout, tasks: Sequence[Task]) -> list[Episode]:
        return rollout(list(tasks))

    def __repr__(self) -> str:
        return "InProcess()"


def split(tasks: Sequence[Task], parts: int) -> list[list[Task]]:
    """``tasks`` in at most ``parts`` contiguous chunks whose sizes differ by at most one, in order.

    Example:
        >>> [len(c) for c in split([Task(id=str(i), prompt="p", answer="a") for i in range(5)], 2)]
        [3, 2]
    """
    if parts < 1:
        raise ConfigError(f"split needs parts >= 1, got {parts}")
    size, extra = divmod(len(tasks), parts)
    out, start = [], 0
    for i in range(min(parts, len(tasks))):
        end = start + size + (1 if i < extra else 0)
        out.append(list(tasks[start:end]))
        start = end
    return out


__all__ = ["Executor", "InProcess", "Rollout", "split"]
