"""Strategy memory vs episodic memory vs both (issue 24): the same tasks, seeds and phrasings for each.

Three conditions, all Q-memory with the paper's α and λ (``bench.learning_conditions.memory_for``):

- ``episodic``: today's memory: recall draws episodes only, nothing is consolidated;
- ``strategies``: after every round the agent's namespace is consolidated exactly as ``evolve job`` does
  it (``evolve.jobs.maintenance.memory_upkeep`` after ``Evolver.run_round``; by rule, or by ``--critic``), and
  recall draws strategies only;
- ``both``: the same consolidation; recall draws episodes and strategies, ranked together.

Protocols: on the bundled families, the MemRL one (E epochs over the same tasks, each asked in one of its
paraphrases per round as ``bench.learning`` does; *last* = success in the final epoch, *cum* = solved at
least once); on BFCL categories, ``bench.bfcl_learning``'s (E epochs over train tasks, then unseen test
tasks once with memory frozen: *transfer*). Over seeds: means with 95% intervals, and paired differences
against ``episodic`` (``evolve.intervals``). Besides success, each cell records what recall drew (episodes or
strategies, per round), what consolidation wrote, and the memory's size at the end.

``--min-size`` (default 2): episodes an intent group (one task) needs before it is consolidated. Each round
adds one episode per task, so with 3 epochs a group has 2 episodes after round 2: at 2 the last epoch
recalls strategies distilled from the first two; at 3 (``evolve job``'s default) the first strategy would
appear after the last epoch and no epoch of a 3-epoch run would ever recall one.

``--strategy-start`` (default ``q_init``): the Q a task's first strategy starts with
(``MemoryConfig.strategy_start``: ``q_init``, or ``sources``, the Q its source episodes earned); a refined
strategy takes over its predecessor's either way. ``--memory`` (default ``q``): one Q per memory, the MemRL
paper's rule, under which a strategy's stored Q ranks it; ``q_context``: Q in context with the neutral start
(``RetrievalConfig``'s default), under which a task's recalls never read a strategy's stored Q.

``--model rule``: no model; the reader answers with what the best recalled memory shows (``bench.strategy_reader``:
``bench.noise.rule_reply`` for an episode, the answer or calls a rule-written strategy's Do line names), so
a figure measures what memory hands the model, not the model's reading of it.

Run: python -m bench.strategy_memory [--families ...] [--bfcl] [--seeds N] [--epochs E] [--model local/smollm2]
     [--critic MODEL] [--min-size 2] [--bfcl-train 12] [--bfcl-test 12] [--bfcl-seeds 3]
     [--strategy-start q_init|sources] [--memory q|q_context]
Writes bench/results/strategy_memory.{json,md} and the strategy_* keys of bench/results/summary.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.bfcl_learning import category_env
from bench.bfcl_splits import split
from bench.common import machine, merge_summary
from bench.learning import load_model
from bench.learning_conditions import (
    ENVS,
    Condition,
    EnvSpec,
    MemoryKind,
    OptimizerSettings,
    build_evolver,
    pick,
    seed_order,
)
from bench.learning_report import cell_metrics, seed_cell
from bench.strategy_memory_report import markdown, summarise_family, summary_keys
from bench.strategy_reader import rule_reader
from connectors import ChatClient, ConfigError, Embedder, load_chat, load_embedder
from evolve import Episode, Evolver, Task
from evolve.jobs.maintenance import memory_upkeep
from evolve.run_log import episode_from_row
from memory import MemoryStore
from memory.config import STRATEGY_STARTS, StrategyStart
from memory.upkeep.strategies import Consolidation

log = logging.getLogger(__name__)
RESULTS = Path(__file__).resolve().parent / "results"
FAMILIES = ("facility_codes", "lookalikes", "changing_facts", "procedures", "format_rules")
BFCL_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple")  # single-turn ones
MIN_SIZE = 2
MEMORIES = ("q", "q_context")  # bench.learning_conditions.memory_for's kinds with a learned Q
PROTOCOL = ("model", "embedder", "epochs", "min_size", "consolidation", "paraphrases", "strategy_start", "memory")
"""Settings every family of one report shares (``--add`` refuses a report that ran others)."""
BEFORE_FLAGS = {"strategy_start": "q_init", "memory": "q"}
"""What a report written before these settings were recorded ran."""


def conditions(
    min_size: int = MIN_SIZE, by: str = "rule", *, start: StrategyStart = "q_init", memory: MemoryKind = "q"
) -> tuple[Condition, ...]:
    """The three conditions; the consolidating ones distil intent groups of at least ``min_size`` episodes
    (``by`` rule or by a critic model, named), a task's first strategy starting at ``start``; ``memory``:
    ``"q"`` (one Q per memory) or ``"q_context"`` (Q in context, neutral start)."""
    kind = "Q-memory" if memory == "q" else "Q-in-context memory"
    upkeep = f"consolidated by {by} after every round (memory_upkeep, min_size {min_size}, start {start})"
    return (
        Condition("episodic", f"{kind} recalling episodes only, never consolidated (today)", memory=memory,
                  draw_from="episodes"),
        Condition("strategies", f"{kind} {upkeep}; recall draws strategies only", memory=memory,
                  draw_from="strategies", consolidate=True, consolidate_min=min_size, strategy_start=start),
        Condition("both", f"{kind} {upkeep}; recall draws episodes and strategies", memory=memory,
                  draw_from="both", consolidate=True, consolidate_min=min_size, strategy_start=start),
    )  # fmt: skip


def settings_conditions(s: Settings) -> tuple[Condition, ...]:
    """The conditions a run's settings ask for."""
    return conditions(s.min_size, s.critic or "rule", start=s.strategy_start, memory=s.memory)


@dataclass(frozen=True, kw_only=True)
class Settings:
    """One run's settings (what the report prints)."""

    families: tuple[str, ...] = FAMILIES
    bfcl: tuple[str, ...] = ()
    epochs: int = 3
    seeds: int = 5
    bfcl_seeds: int = 3
    bfcl_train: int = 12
    bfcl_test: int = 12
    min_size: int = MIN_SIZE
    paraphrases: bool = True
    batch_size: int = 40
    bfcl_batch_size: int = 16
    critic: str | None = None
    """A model that writes strategies (``--critic``); None: consolidation by rule."""
    strategy_start: StrategyStart = "q_init"
    """The Q a task's first strategy starts with (``MemoryConfig.strategy_start``)."""
    memory: MemoryKind = "q"
    """``"q"``: one Q per memory; ``"q_context"``: Q in context with the neutral start (the store's default)."""


@dataclass(frozen=True)
class Family:
    """One family as this bench runs it: its environment, per seed its train (and test) tasks."""

    env: EnvSpec
    seeds: list[int]
    tasks: Callable[[int], tuple[list[Task], list[Task]]]
    paraphrases: bool
    batch_size: int
    protocol: str  # "memrl" or "transfer"


# ---------------------------------------------------------------- measuring what recall drew
def recall_counts(store: MemoryStore, episodes: Sequence[Episode], namespace: str) -> dict[str, int]:
    """What the recalls of ``episodes`` drew (``MemoryStore.explain``): how many recalls, how many selected
    nothing, and how many episodes and strategies they selected."""
    kinds = {it.id: it.kind for it in store.items(namespace, include_superseded=True)}
    out = {"recalls": 0, "empty": 0, "episodes": 0, "strategies": 0}
    for step in (s for e in episodes for s in e.steps if s.recall_id is not None):
        picked = store.explain(step.recall_id or "", namespace=step.recall_namespace or namespace)["selected"]
        out["recalls"] += 1
        out["empty"] += not picked
        for memory in picked:
            out["strategies" if kinds.get(memory) == "strategy" else "episodes"] += 1
    return out


def memory_sizes(store: MemoryStore, namespaces: Sequence[str]) -> dict[str, int]:
    """What the namespaces hold: valid episodes and strategies, and the strategies superseded by newer ones."""
    items = [it for ns in namespaces for it in store.items(ns, include_superseded=True)]
    strategies = [it for it in items if it.kind == "strategy"]
    return {
        "episodes": sum(it.kind != "strategy" and it.valid for it in items),
        "strategies": sum(it.valid for it in strategies),
        "superseded_strategies": sum(not it.valid for it in strategies),
        "valid": sum(it.valid for it in items),
    }


def consolidated(reports: Sequence[Consolidation]) -> dict[str, int]:
    """One upkeep's consolidations in numbers: intent groups big enough, strategies written (those replacing
    older ones among them), groups unchanged since their strategy, groups that yielded none."""
    return {
        "groups": sum(c.groups for c in reports),
        "written": sum(len(c.written) for c in reports),
        "replacing": sum(len(c.replaced) for c in reports),
        "unchanged": sum(c.unchanged for c in reports),
        "skipped": sum(c.skipped for c in reports),
    }


def namespaces_of(evolver: Evolver) -> list[str]:
    """The agents' memory namespaces, as ``evolve job``'s upkeep finds them (``apps.jobs.upkeep``)."""
    views = [a.memory for a in evolver.team.agents.values() if a.memory is not None]
    return list(dict.fromkeys(v.namespace for v in views))


# ---------------------------------------------------------------- one cell, one seed
def run_seed(
    fam: Family,
    cond: Condition,
    seed: int,
    *,
    epochs: int,
    chat: ChatClient,
    embedder: Embedder,
    critic: ChatClient | None,
    folder: Path,
) -> dict[str, Any]:
    """``epochs`` rounds over the seed's train tasks, consolidating after each round when the condition says
    so; then, under the transfer protocol, the test tasks once with memory frozen."""
    train, test = fam.tasks(seed)
    evolver, store = build_evolver(
        fam.env, cond, train, chat=chat, embedder=embedder, folder=folder, optimizer=OptimizerSettings(),
        batch_size=min(fam.batch_size, len(train)), seed=seed, paraphrases=fam.paraphrases,
    )  # fmt: skip
    if store is None:
        raise ConfigError(f"condition {cond.name} has no memory; this bench compares memories")
    spaces = namespaces_of(evolver)
    tokens0, started = chat.usage.total_tokens, time.perf_counter()
    rewards, rounds, drawn, notes = [], [], [], []
    try:
        for epoch in range(1, epochs + 1):
            rounds.append(evolver.run_round(epoch))
            rows = evolver.log.round_rows(epoch)
            by_task = {row["task_id"]: float(row["reward"]) for row in rows}
            rewards.append([by_task.get(t.id, 0.0) for t in train])
            drawn.append(recall_counts(store, [episode_from_row(row) for row in rows], spaces[0]))
            if cond.consolidate:  # between rounds, as evolve job's after_round does
                done = memory_upkeep(store, spaces, consolidate=True, min_size=cond.consolidate_min, llm=critic)
                notes.append(consolidated(done.consolidated))
        out: dict[str, Any] = {}
        if test:
            episodes = [e for i in range(0, len(test), fam.batch_size)
                        for e in evolver.run_batch(test[i : i + fam.batch_size], epochs + 1)]  # fmt: skip
            out["transfer"] = round(float(np.mean([e.reward >= 1.0 for e in episodes])), 4)
            out["transfer_rewards"] = [e.reward for e in episodes]
            out["transfer_recalled"] = recall_counts(store, episodes, spaces[0])
            out["test_ids"] = [t.id for t in test]
        sizes = memory_sizes(store, spaces)  # after the test tasks too: a frozen memory holds what it held
    finally:
        store.close()
    return {
        "status": "ok",
        **cell_metrics(rewards),
        **out,
        "tokens": chat.usage.total_tokens - tokens0,
        "episode_tokens": sum(m.tokens for m in rounds),
        "optimizer_tokens": 0,
        "prompt_updates": 0,
        "memory_size": sizes["valid"],
        "sizes": sizes,
        "recalled": drawn,
        "upkeep": notes,
        "errors": sum(m.errors for m in rounds),
        "seconds": round(time.perf_counter() - started, 1),
        "rewards": rewards,
        "train_ids": [t.id for t in train],
    }


def run_family(
    name: str, fam: Family, s: Settings, *, chat: ChatClient, embedder: Embedder, critic: ChatClient | None,
    folder: Path,
) -> dict[str, Any]:  # fmt: skip
    """Every condition on one family over its seeds; the cells, the paired differences and the verdicts."""
    cells: dict[str, Any] = {}
    for cond in settings_conditions(s):
        per_seed = []
        for seed in fam.seeds:
            here = folder / name / f"seed-{seed}"
            here.mkdir(parents=True, exist_ok=True)
            per_seed.append(
                run_seed(fam, cond, seed, epochs=s.epochs, chat=chat, embedder=embedder, critic=critic, folder=here)
            )
            done = per_seed[-1]
            print(f"{name} / {cond.name} / seed {seed}: per epoch {done['per_epoch']}, "
                  f"transfer {done.get('transfer', '-')}, {done['seconds']} s", flush=True)  # fmt: skip
        cells[cond.name] = seed_cell(per_seed, fam.seeds)
    train, test = fam.tasks(fam.seeds[0])
    block = {"tasks": len(train), "test_tasks": len(test), "seeds": fam.seeds, "protocol": fam.protocol,
             "paraphrases": fam.paraphrases, "note": fam.env.note}  # fmt: skip
    return {**block, **summarise_family(cells, fam.protocol)}


def bundled(name: str, s: Settings) -> Family:
    """A bundled family under the MemRL protocol: every task, in seed order, paraphrased per round."""
    env = ENVS[name]()
    tasks = env.tasks(None)
    return Family(env, list(range(s.seeds)), lambda seed: (seed_order(tasks, seed), []), s.paraphrases,
                  s.batch_size, "memrl")  # fmt: skip


def bfcl(category: str, s: Settings) -> Family:
    """A BFCL category under ``bench.bfcl_learning``'s protocol: per seed, disjoint train and unseen test tasks."""
    from evolve.envs.bfcl.single import bfcl_tasks

    everything = bfcl_tasks(category)
    env = category_env(category, everything)
    return Family(env, list(range(s.bfcl_seeds)), lambda seed: split(everything, s.bfcl_train, s.bfcl_test, seed),
                  False, s.bfcl_batch_size, "transfer")  # fmt: skip


# ---------------------------------------------------------------- the whole run
def run(
    s: Settings,
    *,
    chat: ChatClient,
    embedder: Embedder,
    critic: ChatClient | None = None,
    out: Path = RESULTS,
    model: str | None = None,
    families: Mapping[str, Callable[[], Family]] | None = None,
    add: bool = False,
) -> dict[str, Any]:
    """Run every family (``families``: name → builder; default the settings' bundled families and BFCL
    categories); writes ``strategy_memory.{json,md}`` and the summary keys after each. ``add`` keeps the other
    families of the report already at ``out`` (run with the same protocol: ``PROTOCOL``)."""
    started = time.perf_counter()
    if families is None:
        families = {n: functools.partial(bundled, n, s) for n in s.families} | {
            f"bfcl_{c}": functools.partial(bfcl, c, s) for c in s.bfcl
        }
    result: dict[str, Any] = {
        "settings": {
            **vars(s),
            "model": model or chat.name,
            "embedder": embedder.name,
            "consolidation": s.critic or "rule",
        },  # fmt: skip
        "machine": machine(),
        "conditions": {c.name: c.about for c in settings_conditions(s)},
        "families": {},
    }
    if add:
        result["families"] = earlier_report(out / "strategy_memory.json", result["settings"])["families"]
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="evolve-bench-strategy-") as tmp:
        for name, build in families.items():
            t0 = time.perf_counter()
            block = run_family(name, build(), s, chat=chat, embedder=embedder, critic=critic, folder=Path(tmp))
            result["families"][name] = {**block, "seconds": round(time.perf_counter() - t0, 1)}
            write_report(result, started, out)  # a family's figures survive a run stopped after it
            merge_summary(out / "summary.json", summary_keys(result))
    return result


def earlier_report(path: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The report at ``path`` that ``--add`` adds to; ConfigError when it is missing or ran another protocol."""
    if not path.exists():
        raise ConfigError(f"--add: there is no earlier report at {path} to add to")
    found: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    ran = {k: found["settings"].get(k, BEFORE_FLAGS.get(k)) for k in PROTOCOL}
    differ = {k: v for k, v in ran.items() if v != settings[k]}
    if differ:
        raise ConfigError(f"--add: the report at {path} ran {differ}; this run { ({k: settings[k] for k in differ}) }")
    return found


def write_report(result: dict[str, Any], started: float, out: Path) -> None:
    result["seconds"] = round(time.perf_counter() - started, 1)
    (out / "strategy_memory.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (out / "strategy_memory.md").write_text(markdown(result), encoding="utf-8")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.strategy_memory", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--families", nargs="*", metavar="F", help=f"bundled families, some of {list(FAMILIES)} "
                   "(default: all; none with --families and no name)")  # fmt: skip
    p.add_argument("--bfcl", nargs="*", metavar="C", help=f"BFCL categories too, some of {list(BFCL_CATEGORIES)} "
                   "(alone: simple_python)")  # fmt: skip
    p.add_argument("--seeds", type=int, default=5, help="seeds per bundled family (task order, paraphrases)")
    p.add_argument("--bfcl-seeds", type=int, default=3, help="seeds per BFCL category (train/test split, order)")
    p.add_argument("--bfcl-train", type=int, default=12, help="BFCL train tasks per seed (the epochs run over them)")
    p.add_argument("--bfcl-test", type=int, default=12, help="BFCL unseen test tasks per seed (transfer)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--min-size", type=int, default=MIN_SIZE, help="episodes a task needs before it is consolidated")
    p.add_argument("--model", default="local/smollm2", help="local/smollm2, openai/<name>, ..., or rule (no model: "
                   "answers with what the best recalled memory shows)")  # fmt: skip
    p.add_argument("--base-url", help="an OpenAI-compatible server for --model openai/<name>")
    p.add_argument("--critic", help="a model that writes the strategies (default: consolidation by rule)")
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--no-paraphrases", action="store_true", help="ask the bundled tasks as written")
    p.add_argument("--strategy-start", choices=STRATEGY_STARTS, default="q_init",
                   help="the Q a task's first strategy starts with: q_init, or its source episodes' (sources)")  # fmt: skip
    p.add_argument("--memory", choices=MEMORIES, default="q",
                   help="q: one Q per memory; q_context: Q in context with the neutral start")  # fmt: skip
    p.add_argument("--add", action="store_true", help="keep the other families of the report at --out")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    for flag in ("seeds", "bfcl_seeds", "bfcl_train", "bfcl_test", "epochs", "min_size"):
        if getattr(args, flag) < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    families = FAMILIES if args.families is None else pick(args.families, FAMILIES, "families")
    categories = () if args.bfcl is None else pick(args.bfcl or ["simple_python"], BFCL_CATEGORIES, "BFCL categories")
    return Settings(
        families=tuple(families), bfcl=tuple(categories), epochs=args.epochs, seeds=args.seeds,
        bfcl_seeds=args.bfcl_seeds, bfcl_train=args.bfcl_train, bfcl_test=args.bfcl_test, min_size=args.min_size,
        paraphrases=not args.no_paraphrases, critic=args.critic, strategy_start=args.strategy_start,
        memory=args.memory,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    logging.basicConfig(level=logging.WARNING)
    args = parse_args(argv)
    s = settings_from(args)
    if args.model == "rule":
        chat = load_chat("fake/scripted", replies=rule_reader)
    else:
        chat = load_model(args.model, args.base_url, max(s.batch_size, s.bfcl_batch_size))
    critic = None if s.critic is None else chat if s.critic == args.model else load_model(s.critic, None, 1)
    embedder = load_embedder(args.embedder)
    result = run(s, chat=chat, embedder=embedder, critic=critic, out=args.out, model=args.model, add=args.add)
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
