"""The loop: recall → act → reward → reinforce → write → checkpoint, round after round.

Each round runs every scheduled task once, in batches. A batch is recorded in the database before its
lessons are applied to memory, and marked learned after (in the transaction that records the next
batch), so a run killed anywhere resumes where it stopped: finished rounds are skipped, recorded
episodes are not re-run, and feedback and written memories carry idempotency keys, so a batch learned
from again after a kill applies no reward twice and writes no memory twice.

Example:
    >>> from connectors import load_chat, HashEmbedder, make_engine
    >>> from memory import MemoryStore
    >>> from evolve import Agent, Evolver, MemoryView, Task, TaskEnv, Team
    >>> store = MemoryStore("sqlite://", embedder=HashEmbedder())
    >>> agent = Agent("solver", load_chat("fake/scripted", replies=["4"]), memory=MemoryView(store))
    >>> tasks = [Task(id="t1", prompt="What is 2 + 2?", answer="4")]
    >>> ev = Evolver(Team([agent]), tasks, memory=store, progress=False)
    >>> [m.success_rate for m in ev.run(rounds=2)]
    [1.0, 1.0]
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from sqlalchemy import Engine
from tqdm.auto import tqdm

from connectors import ChatModel, ConfigError, Environment
from evolve.agent import Team
from evolve.envs.tasks import Task, TaskEnv
from evolve.episode import Episode, Step
from evolve.executors import Executor, Rollout
from evolve.prompts.evolution import PromptEvolution, PromptUpdate, make_evaluate
from evolve.ray_executor import make_executor
from evolve.run_log import RoundMetrics, RunLog, episode_from_row
from evolve.teams.compose import Recompose, TeamChange, check_recompose, resumed_team
from evolve.teams.ordered import OrderedTeam, learn_orders, order_counts
from evolve.teams.parallel import ParallelTeam
from evolve.weights.escalation import plateaued, weights_blocker
from evolve.weights.registry import AdapterRegistry
from evolve.weights.switch import (
    WeightsReport,
    WeightUpdates,
    adapter_registry,
    attach_adapters,
    base_folder,
    train_adapters,
    weights_switch,
)
from memory import MemoryStore, WriteEntry, reinforcements
from memory.write.checks import fit_id, writer_name
from optimizers.types import Trace

log = logging.getLogger(__name__)

Schedule = Callable[[Sequence[Task], int], list[Task]]


def centred(reward: float) -> float:
    """Map a task reward in [0, 1] to [-1, 1] before it updates Q.

    With Q_init = 0 this makes a memory that led to failure rank *below* one never tried, so fresh
    experiences get their chance to displace misleading ones; with raw 0/1 rewards a failing memory
    and an untried one would tie at 0 forever.
    """
    return 2.0 * reward - 1.0


def raw(reward: float) -> float:
    """Use the task reward as it is."""
    return reward


def task_envs(tasks: Sequence[Task]) -> Callable[[], TaskEnv]:
    """A factory of fresh ``TaskEnv``s over ``tasks`` that share one id index: the loop makes an
    environment per episode, and indexing every task each time would cost O(tasks) per episode."""
    template = TaskEnv(tasks)
    return lambda: copy.copy(template)  # a shallow copy: the task list and index are read-only


def same_tasks(tasks: Sequence[Task], round_: int) -> list[Task]:
    """Every task, every round, as written (with the answer in force that round: ``Task.in_round``)."""
    return [t.in_round(round_) for t in tasks]


def paraphrase_schedule(seed: int = 0) -> Schedule:
    """Every task every round, phrased by one of its ``meta["paraphrases"]`` chosen per round and seed,
    in a shuffled order: tasks recur with variations."""

    def schedule(tasks: Sequence[Task], round_: int) -> list[Task]:
        rng = np.random.default_rng([seed, round_])
        out = []
        for t in tasks:
            variants = [t.prompt, *t.meta.get("paraphrases", [])]
            out.append(replace(t.in_round(round_), prompt=variants[int(rng.integers(len(variants)))]))
        order = rng.permutation(len(out))
        return [out[i] for i in order]

    return schedule


class Evolver:
    """Runs a team on tasks round after round, learning into memory between batches.

    Args:
        team: the agents.
        tasks: the task set (``Task``s, e.g. from ``evolve.envs.tasks.load_tasks``).
        memory: the store the team's memory views point at; None for a memory-less baseline.
        env_factory: builds one environment per episode (default: ``TaskEnv`` over ``tasks``).
        engine: the database for the run log (default: the memory store's engine).
        run: the run's name; a second ``Evolver`` with the same name resumes it.
        batch_size: episodes generated together (local models batch them; API models thread them).
        max_turns: turns per episode for multi-step environments.
        learn: apply rewards to memory (reinforce) and write new experiences; False freezes memory.
        writer: a chat model that summarises attempts into experiences (None: cheap mode); one with
            ``complete_batch`` (a ``ChatClient``, a local model) writes a whole batch's lessons in one call.
        schedule: which tasks a round runs, and how they are phrased.
        memory_reward: maps a task reward to the reward that updates Q (default ``centred``).
        prompts: prompt evolution (a ``PromptEvolution``): one gated optimizer step per round, after
            the round's memory updates; the team then acts from the new HEAD.
        weights: the switch to weight updates: with a ``WeightUpdates`` (its settings), escalate to LoRA
            MARFT when the success curve plateaus (no gain over ``weights.patience`` rounds): one adapter
            per agent, kept only if it gains on evaluation, recorded in the ``AdapterRegistry`` and served
            from the next round. Needs every agent on one local model; with an API model this raises a
            ``ConfigError`` that says so. None (the default): no weight updates. A team on local models
            always serves the run's HEAD adapters, if it has any: each agent's ``params`` gets ``adapter=``.
        allow_weight_updates: deprecated (until 0.3.0, with a warning): True is ``weights=WeightUpdates()``.
        executor: where episodes run: ``"inprocess"`` (default: here, the whole batch at once), ``"ray"``
            (a ``RayExecutor``: chunks of each batch on a Ray cluster, memory shared through the store's
            database, which must then be a file or a server) or any ``Executor`` object. Learning
            (reinforce, write, prompts, weights) stays in this process either way.
        progress: show a progress bar.
        recompose: for a ``ParallelTeam``, re-choose its members from a pool between rounds
            (``evolve.teams.compose.Recompose``), kept only when the new team's vote validates better;
            a resumed run acts with the last team kept. Not with ``prompts``: both change the team.
    """

    def __init__(
        self,
        team: Team,
        tasks: Sequence[Task],
        *,
        memory: MemoryStore | None = None,
        env_factory: Callable[[], Environment] | None = None,
        engine: Engine | None = None,
        run: str = "default",
        batch_size: int = 16,
        max_turns: int = 1,
        learn: bool = True,
        writer: ChatModel | None = None,
        schedule: Schedule = same_tasks,
        memory_reward: Callable[[float], float] = centred,
        prompts: PromptEvolution | None = None,
        weights: WeightUpdates | None = None,
        allow_weight_updates: bool | None = None,
        executor: str | Executor = "inprocess",
        progress: bool = True,
        recompose: Recompose | None = None,
    ) -> None:
        if not tasks:
            raise ConfigError("Evolver needs at least one task")
        if batch_size < 1 or max_turns < 1:
            raise ConfigError(f"batch_size and max_turns must be >= 1, got {batch_size} and {max_turns}")
        if engine is None:
            if memory is None:
                raise ConfigError("Evolver needs engine= when it has no memory store to share a database with")
            engine = memory.engine
        self.team = team
        self.tasks = list(tasks)
        self.memory = memory
        self.env_factory = env_factory or task_envs(self.tasks)
        self.log = RunLog(engine, run)
        self.run_name = run
        self.batch_size = batch_size
        self.max_turns = max_turns
        self.learn = learn
        self.writer = writer
        self.schedule = schedule
        self.memory_reward = memory_reward
        self.prompts = prompts
        self.recompose = check_recompose(recompose, team, prompts)
        self._started = False
        self.progress = progress
        self.weights = weights_switch(allow_weight_updates, weights)
        self.adapters: AdapterRegistry | None = None
        self.executor = make_executor(executor)
        blocker = weights_blocker(team)
        if isinstance(team, ParallelTeam):  # MARFT's rollouts follow a chain; a vote or a judge is not trained
            blocker = "weight updates (LoRA MARFT) train a chain of agents; this is a parallel team"
        if isinstance(team, OrderedTeam) and self.weights is not None and self.weights.args().advantage != "group":
            blocker = ("a team that learns its order trains in drawn orders, which needs group advantages: "
                       'WeightUpdates(options={"advantage": "group", "group_size": 2}), in a spec '
                       '[marft] options = { advantage = "group", group_size = 2 }')  # fmt: skip
        if self.weights is not None and blocker is not None:
            raise ConfigError(f"weights: {blocker}")
        if blocker is None:
            if self.weights is not None:
                base_folder(team)  # one shared local base, or a clear error now rather than at the first plateau
            self.adapters = adapter_registry(engine, run, self.weights)
            attach_adapters(team, self.adapters)  # a resumed run, or a later one, serves its HEAD adapters
        check = getattr(self.executor, "check", None)
        if callable(check):
            check(self.rollout(0))  # what cannot be sent to workers fails now, not at the first batch

    def run(self, rounds: int) -> list[RoundMetrics]:
        """Run (or resume) rounds 1..rounds and return every round's metrics."""
        completed = self.log.completed()
        for r in range(1, rounds + 1):
            if r not in completed:
                completed[r] = self.run_round(r)
        return [completed[r] for r in range(1, rounds + 1)]

    def run_round(self, round_: int, *, extra_traces: Sequence[Trace] = ()) -> RoundMetrics:
        """One round: every scheduled task once, memory learning after each batch, then a prompt step.

        ``extra_traces`` (answers users rated through ``evolve serve``; see ``evolve.jobs.served``) are handed
        to the prompt optimizer as more examples to learn from; it still gates on the tasks alone.
        """
        start = time.perf_counter()
        if not self._started:
            if self.prompts is not None:
                self.team = self.prompts.start(self.team)  # act from HEAD: a resumed run keeps its evolved prompts
            self.team = resumed_team(self.team, self.recompose, self.log.completed())
            learn_orders(self.team, self.log.learned_episodes())  # a resumed run keeps the order it learned
            self._started = True
        self._finish_learning(round_)
        done = self.log.done_task_ids(round_)
        todo = [t for t in self.schedule(self.tasks, round_) if t.id not in done]
        bar = tqdm(total=len(todo), desc=f"{self.run_name} round {round_}", disable=not self.progress, leave=False)
        learned: list[str] = []
        for batch in _chunks(todo, self.batch_size):
            episodes = self.run_batch(batch, round_)
            self.log.record_episodes(episodes, learned=learned)  # ...and the previous batch is marked learned
            self.apply(episodes)
            learned = [e.id for e in episodes]
            bar.update(len(batch))
        self.log.mark_learned(learned)
        bar.close()
        update = self._evolve_prompts(extra_traces)
        change = self._recompose(round_)
        metrics = self._metrics(round_, time.perf_counter() - start)
        if change is not None:
            metrics = replace(
                metrics, team=list(change.team.members) if change.accepted else None, team_note=change.note
            )
        weights = self._maybe_escalate(metrics)
        if weights is not None:
            metrics = replace(metrics, weight_updates=int(weights.accepted), weights_note=weights.note)
        if update is not None:
            metrics = replace(
                metrics,
                prompt_updates=int(update.accepted),
                prompt_version=update.head,
                prompt_note=update.reason,
                optimizer_tokens=update.usage.total_tokens,
            )
        self.log.record_round(metrics)
        return metrics

    def _evolve_prompts(self, extra: Sequence[Trace]) -> PromptUpdate | None:
        """One gated optimizer step; the team switches to HEAD when a proposal is accepted."""
        if self.prompts is None:
            return None
        update = self.prompts.step(
            self.team, make_evaluate(self.team, self.tasks, self.env_factory, max_turns=self.max_turns), extra=extra
        )
        if update.accepted:
            self.team = self.team.with_prompts(self.prompts.graph.head().nodes)
        return update

    def _recompose(self, round_: int) -> TeamChange | None:
        """Re-choose the parallel team's members (``recompose``); the team acts with the kept one."""
        if self.recompose is None or not isinstance(self.team, ParallelTeam):
            return None
        change = self.recompose.step(self.team, round_, self.tasks, self.env_factory)
        if change is not None:
            self.team = change.team
        return change

    def escalate(self) -> WeightsReport:
        """Train the agents' adapters now (MARFT), keep them if they gain, and serve the HEAD adapters."""
        if self.weights is None or self.adapters is None:
            raise ConfigError("escalate() needs Evolver(..., weights=WeightUpdates(...)) and a team on local models")
        orders = self.team.task_order if isinstance(self.team, OrderedTeam) else None
        report = train_adapters(
            self.team, self.tasks, self.adapters, self.weights, progress=self.progress, orders=orders
        )
        attach_adapters(self.team, self.adapters)
        return report

    def _maybe_escalate(self, metrics: RoundMetrics) -> WeightsReport | None:
        """Escalate when success has not risen over ``patience`` rounds since the last escalation."""
        if self.weights is None or metrics.success_rate >= 1.0:
            return None
        history = self.log.completed()
        curve = [history[r].success_rate for r in sorted(history) if r < metrics.round] + [metrics.success_rate]
        since = max([r for r, m in history.items() if m.weights_note and r < metrics.round], default=1)
        if not plateaued(curve[since - 1 :], patience=self.weights.patience):
            return None
        log.info("round %d: success plateaued at %.2f; escalating to LoRA MARFT", metrics.round, metrics.success_rate)
        return self.escalate()

    def run_batch(self, tasks: Sequence[Task], round_: int) -> list[Episode]:
        """One episode per task, run by the executor: here on the whole batch, or in chunks on workers."""
        return self.executor.run(self.rollout(round_), tasks)

    def rollout(self, round_: int) -> Rollout:
        """What the executor runs for a batch of ``round_``: the current team and environment factory."""
        return Rollout(self.team, self.env_factory, run=self.run_name, round=round_, max_turns=self.max_turns)

    def apply(self, episodes: Iterable[Episode]) -> None:
        """Reinforce the memories each episode recalled with its reward, then write what it taught:
        one ``reinforce_many`` and one ``write_many`` for the whole batch (an ``OrderedTeam`` learns its orders).

        Feedback keys (``memory.reinforcements`` of the episode id) and memory ids (``<episode id>/<namespace>``)
        are built from the run's, tasks' and agents' names, so ``fit_id`` shortens a long one with a hash: the
        same key on every call, so a resumed run still applies no reward and writes no memory twice."""
        episodes = list(episodes)
        if self.learn:
            learn_orders(self.team, sorted(episodes, key=lambda e: e.task_id))  # as RunLog.learned_episodes
        if self.memory is None or not self.learn:
            return
        feedback = [
            entry
            for e in episodes
            if e.error is None
            for entry in reinforcements(
                [(s.recall_id, self._recall_namespace(s)) for s in e.steps if s.recall_id is not None],
                self.memory_reward(e.reward),
                e.id,
            )
        ]
        if feedback:
            self.memory.reinforce_many(feedback)
        who = writer_name("run", self.run_name)  # meta["writer"]: the trust policy decides by it (memory/defences/)
        entries = [
            WriteEntry(
                e.prompt,
                trajectory=e.trajectory(),
                feedback=e.feedback,
                success=e.success,
                namespace=namespace,
                provenance={"episode": e.id, "recalls": list(e.recall_ids), "reward": e.reward},
                id=fit_id(f"{e.id}/{namespace}"),
                task=e.task_id,  # one intent per task: look-alike tasks never share memories' group
                writer=who,
            )
            for e in episodes
            if e.error is None
            for namespace in self._namespaces(e)
        ]
        if entries:
            self.memory.write_many(entries, llm=self.writer)  # one embedding call and one transaction

    def _recall_namespace(self, step: Step) -> str | None:
        """Where the step's recall was made (episodes recorded before steps kept it: the agent's namespace)."""
        if step.recall_namespace is not None:
            return step.recall_namespace
        view = self.team.agents[step.agent].memory if step.agent in self.team.agents else None
        return view.namespace if view is not None else None

    def _namespaces(self, episode: Episode) -> list[str]:
        """The memory namespaces of the agents that acted in ``episode``, in the team's order."""
        acted = {s.agent for s in episode.steps}
        views = [self.team.agents[name].memory for name in self.team.order if name in acted]
        return list(dict.fromkeys(v.namespace for v in views if v is not None))

    def _finish_learning(self, round_: int) -> None:
        """A run killed between recording a batch and learning from it learns now (rewards are idempotent)."""
        pending = self.log.unlearned(round_)
        if pending:
            log.info("resuming: %d recorded episodes of round %d were not yet learned from", len(pending), round_)
            rows = {r["id"]: r for r in self.log.round_rows(round_)}
            eps = [episode_from_row(rows[i]) for i in pending]
            self.apply(eps)
            self.log.mark_learned(pending)

    def _metrics(self, round_: int, seconds: float) -> RoundMetrics:
        rows = self.log.round_scores(round_)
        rewards = np.array([r[0] for r in rows], dtype=float)
        size, q_mean, q_std = 0, 0.0, 0.0
        namespaces = {a.memory.namespace for a in self.team.agents.values() if a.memory is not None}
        if self.memory is not None and namespaces:
            size, q_mean, q_std = pooled_moments([_q_moments(self.memory.stats(ns)) for ns in sorted(namespaces)])
        return RoundMetrics(
            round=round_,
            episodes=len(rows),
            success_rate=float((rewards >= 1.0).mean()) if rows else 0.0,
            mean_reward=float(rewards.mean()) if rows else 0.0,
            errors=sum(1 for r in rows if r[1]),
            tokens=sum(r[2] for r in rows),
            cost=float(sum(r[3] for r in rows)),
            seconds=round(seconds, 3),
            memory_size=size,
            q_mean=q_mean,
            q_std=q_std,
            solved_share=self.log.solved_share(round_),
            orders=order_counts([episode_from_row(r) for r in self.log.round_rows(round_)], self.team.policy.agents)
            if isinstance(self.team, OrderedTeam)
            else None,
        )


def _q_moments(stats: dict[str, Any]) -> tuple[int, float, float]:
    """(count, mean, std) of Q from ``MemoryStore.stats``; an empty namespace has no mean."""
    q = stats["q"]
    return int(stats["count"]), float(q["mean"] or 0.0), float(q["std"] or 0.0)


def pooled_moments(parts: Sequence[tuple[int, float, float]]) -> tuple[int, float, float]:
    """Count, mean and (population) standard deviation of the union of groups given as
    ``(count, mean, std)``: E[x²] of each group is std² + mean²."""
    n = sum(c for c, _, _ in parts)
    if n == 0:
        return 0, 0.0, 0.0
    mean = sum(c * m for c, m, _ in parts) / n
    second = sum(c * (s * s + m * m) for c, m, s in parts) / n
    return n, mean, float(np.sqrt(max(second - mean * mean, 0.0)))


def _chunks(items: Sequence[Task], size: int) -> Iterable[Sequence[Task]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
