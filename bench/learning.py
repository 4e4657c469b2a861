"""Learning, conditions side by side, over epochs of the same tasks (the MemRL protocol).

Six conditions in the quick profile (``bench.learning_conditions.CONDITIONS``): no memory; repeated
sampling without memory (pass@E over the same number of attempts); similarity-only memory (λ = 0,
α = 0); Q-memory with the paper's defaults; Q-memory plus textual gradients; Training-Free GRPO. Two
studies run when named or in the full profile: Q in context, and experiences written by the model. Each runs in its own SQLite
file with one shared loaded model. Per cell: last-epoch success, cumulative success, tokens and wall
time; per environment a PNG of the curves.

Run: python -m bench.learning [--profile quick|full] [--envs ...] [--conditions ...] [--epochs E]
     [--limit N] [--model local/smollm2 | openai/<name> [--base-url URL]]
     [--tasks SPEC.toml | TASKS.jsonl ... [--system TEXT]]   (your own families, named by file stem)
     [--seeds N] [--no-paraphrases]   (N seeds per cell: means with 95% intervals, per-seed values kept;
     tasks are asked in one of their paraphrases each round, as `make demo` and the specs do, unless told not to)
Writes bench/results/learning.{json,md}, bench/results/learning_<env>.png and the
learning_<env>_<condition>_{last,cum} keys of bench/results/summary.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from bench.common import machine, merge_summary
from bench.learning_conditions import (
    BY_NAME,
    CONDITIONS,
    ENVS,
    SAMPLING_TEMPERATURE,
    Condition,
    EnvSpec,
    OptimizerSettings,
    build_evolver,
    pick,
    seed_order,
    set_epoch_seed,
    user_envs,
)
from bench.learning_report import SKIPPED, cell_metrics, markdown, plot_env, seed_cell, summary_keys
from connectors import ChatClient, ConfigError, Embedder, EvolveError, load_chat, load_embedder
from evolve import Task

log = logging.getLogger(__name__)
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True, kw_only=True)
class Profile:
    """What a profile runs: environments, epochs, per-environment task limits, and whether the
    environments' ``quick_skip`` conditions are left to the full profile."""

    envs: tuple[str, ...]
    epochs: int
    limits: Mapping[str, int | None] = field(default_factory=dict)
    skip_slow: bool = True
    conditions: tuple[str, ...] = tuple(c.name for c in CONDITIONS)


PROFILES = {
    "quick": Profile(
        envs=("facility_codes", "format_rules", "textworld"),
        epochs=3,
        limits={"textworld": 3},
        skip_slow=True,
        conditions=("no_memory", "repeated_sampling", "similarity", "q_memory", "q_memory_textgrad", "tfgrpo"),
    ),
    "full": Profile(
        envs=("facility_codes", "format_rules", "textworld", "humaneval", "champ"),
        epochs=8,
        limits={"textworld": 12, "humaneval": 40, "champ": 40},
        skip_slow=False,
    ),
}


@dataclass(frozen=True, kw_only=True)
class Settings:
    """One benchmark run's settings (what the report prints)."""

    profile: str
    envs: tuple[str, ...]
    conditions: tuple[str, ...]
    epochs: int
    limit: int | None = None
    seed: int = 0
    seeds: int = 1
    """Seeds per cell: ``seed``, ``seed + 1``, … (task order, sampling, paraphrase choice)."""
    paraphrases: bool = True
    """Ask each task in one of its ``meta["paraphrases"]`` per round (the demo's and specs' protocol: one
    protocol behind every figure of a family); tasks without paraphrases are asked as written."""
    batch_size: int = 40
    optimizer: OptimizerSettings = field(default_factory=OptimizerSettings)
    progress: bool = True


def run_cell(
    env: EnvSpec,
    cond: Condition,
    tasks: Sequence[Task],
    s: Settings,
    *,
    chat: ChatClient,
    embedder: Embedder,
    folder: Path,
) -> dict[str, Any]:
    """One condition on one environment over ``s.seeds`` seeds (``seed_cell``: intervals, per-seed values)."""
    seeds = list(range(s.seed, s.seed + s.seeds))
    per_seed = []
    for seed in seeds:
        here = folder / f"seed-{seed}"
        here.mkdir(parents=True, exist_ok=True)
        per_seed.append(
            run_seed(env, cond, seed_order(tasks, seed), s, seed, chat=chat, embedder=embedder, folder=here)
        )
    return seed_cell(per_seed, seeds)


def run_seed(
    env: EnvSpec,
    cond: Condition,
    tasks: Sequence[Task],
    s: Settings,
    seed: int,
    *,
    chat: ChatClient,
    embedder: Embedder,
    folder: Path,
) -> dict[str, Any]:
    """Run ``s.epochs`` epochs of one condition on one environment with one seed; its metrics, tokens and
    wall time."""
    evolver, store = build_evolver(
        env,
        cond,
        tasks,
        chat=chat,
        embedder=embedder,
        folder=folder,
        optimizer=s.optimizer,
        batch_size=min(s.batch_size, len(tasks)),
        seed=seed,
        paraphrases=s.paraphrases,
    )
    tokens_before, started = chat.usage.total_tokens, time.perf_counter()
    rewards: list[list[float]] = []
    rounds = []
    bar = tqdm(total=s.epochs, desc=f"{env.name} / {cond.name} / seed {seed}", unit="epoch", disable=not s.progress)
    try:
        for epoch in range(1, s.epochs + 1):
            if cond.temperature > 0:
                set_epoch_seed(evolver, 1000 * seed + epoch)
            metrics = evolver.run_round(epoch)
            by_task = {row["task_id"]: float(row["reward"]) for row in evolver.log.round_rows(epoch)}
            rewards.append([by_task.get(t.id, 0.0) for t in tasks])
            rounds.append(metrics)
            bar.update(1)
            bar.set_postfix(success=f"{metrics.success_rate:.2f}")
    finally:
        bar.close()
        if store is not None:
            store.close()
    return {
        "status": "ok",
        **cell_metrics(rewards),
        "tokens": chat.usage.total_tokens - tokens_before,
        "episode_tokens": sum(m.tokens for m in rounds),
        "optimizer_tokens": sum(m.optimizer_tokens for m in rounds),
        "prompt_updates": sum(m.prompt_updates for m in rounds),
        "memory_size": rounds[-1].memory_size,
        "errors": sum(m.errors for m in rounds),
        "prompt_notes": [m.prompt_note for m in rounds if m.prompt_note],
        "seconds": round(time.perf_counter() - started, 1),
        "rewards": rewards,
    }


def run_env(
    name: str,
    s: Settings,
    limit: int | None,
    *,
    chat: ChatClient,
    embedder: Embedder,
    folder: Path,
    registry: Mapping[str, Callable[[], EnvSpec]] = ENVS,
) -> dict[str, Any]:
    """Every chosen condition on one environment; a condition left to the full profile gets no number,
    and an environment that cannot be built is reported as not run."""
    try:
        env = registry[name]()
        t0 = time.perf_counter()
        tasks = env.tasks(limit)
    except (ConfigError, EvolveError, ImportError) as e:
        log.warning("environment %s is not available: %s", name, e)
        reason = f"not run: {e}"
        return {"tasks": 0, "max_turns": 0, "note": reason, "conditions": {c: {"status": reason} for c in s.conditions}}
    out: dict[str, Any] = {
        "tasks": len(tasks),
        "task_ids": [t.id for t in tasks],
        "max_turns": env.max_turns,
        "note": env.note,
        "setup_seconds": round(time.perf_counter() - t0, 1),
        "conditions": {},
    }
    for cond_name in s.conditions:
        if s.profile == "quick" and cond_name in env.quick_skip:
            out["conditions"][cond_name] = {"status": SKIPPED}
            continue
        out["conditions"][cond_name] = run_cell(
            env, BY_NAME[cond_name], tasks, s, chat=chat, embedder=embedder, folder=folder
        )
    return out


def run(
    s: Settings,
    *,
    chat: ChatClient,
    embedder: Embedder,
    out: Path = RESULTS,
    summary: Path | None = None,
    model: str | None = None,
    registry: Mapping[str, Callable[[], EnvSpec]] = ENVS,
) -> dict[str, Any]:
    """Run the benchmark and write ``learning.{json,md}``, ``learning_<env>.png`` and the summary keys."""
    started = time.perf_counter()
    limits = PROFILES[s.profile].limits if s.profile in PROFILES else {}
    result: dict[str, Any] = {
        "settings": {
            "profile": s.profile,
            "model": model or chat.name,
            "embedder": embedder.name,
            "epochs": s.epochs,
            "seed": s.seed,
            "seeds": list(range(s.seed, s.seed + s.seeds)),
            "paraphrases": s.paraphrases,
            "sampling_temperature": SAMPLING_TEMPERATURE,
            "optimizer": vars(s.optimizer),
            "failure_keeps": {c.name: c.failure_keeps for c in CONDITIONS if c.name in s.conditions},
        },
        "machine": machine(),
        "conditions": {c.name: c.about for c in CONDITIONS if c.name in s.conditions},
        "envs": {},
    }
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="evolve-bench-learning-") as tmp:
        for name in s.envs:
            limit = s.limit if s.limit is not None else limits.get(name)
            result["envs"][name] = run_env(
                name, s, limit, chat=chat, embedder=embedder, folder=Path(tmp), registry=registry
            )
            write_report(result, started, out)  # an environment's figures survive a run stopped after it
    merge_summary(summary or out / "summary.json", summary_keys(result))
    return result


def write_report(result: dict[str, Any], started: float, out: Path) -> None:
    """``learning.{json,md}`` and the plots of the environments run so far."""
    result["seconds"] = round(time.perf_counter() - started, 1)
    (out / "learning.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (out / "learning.md").write_text(markdown(result), encoding="utf-8")
    for name, cells in result["envs"].items():
        if any(c.get("status") == "ok" for c in cells["conditions"].values()):
            plot_env(name, cells["conditions"], out / f"learning_{name}.png")


def load_model(spec: str, base_url: str | None, batch_size: int) -> ChatClient:
    """The chat model: local models generate a whole batch of episodes in one call."""
    if spec.startswith("local/"):
        return load_chat(spec, batch_size=batch_size, threads=os.cpu_count())
    return load_chat(spec, base_url=base_url) if base_url else load_chat(spec)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.learning", description=__doc__.splitlines()[0] if __doc__ else None
    )
    p.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    p.add_argument("--envs", nargs="+", metavar="ENV", help=f"some of {list(ENVS)} (default: the profile's)")
    p.add_argument(
        "--tasks",
        nargs="+",
        type=Path,
        default=[],
        metavar="FILE",
        help="your own families: a spec .toml (its tasks, system prompt and recall settings) or a task .jsonl; "
        "each is an environment named by its file stem (alone unless --envs names others too)",
    )
    p.add_argument("--system", help="the system prompt for --tasks .jsonl files (default: answer only)")
    p.add_argument("--conditions", nargs="+", metavar="C", help=f"some of {[c.name for c in CONDITIONS]}")
    p.add_argument("--epochs", type=int, help="epochs over the same tasks (default: the profile's)")
    p.add_argument("--limit", type=int, help="the first N tasks of each environment (default: the profile's)")
    p.add_argument("--model", default="local/smollm2", help="local/smollm2, openai/<name>, ...")
    p.add_argument("--base-url", help="an OpenAI-compatible server for --model openai/<name>")
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--seed", type=int, default=0, help="the first seed")
    p.add_argument(
        "--seeds", type=int, default=1, help="seeds per cell (task order, sampling, paraphrases); 5+ for claims"
    )
    p.add_argument(
        "--paraphrases",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ask each task in one of its paraphrases per round, as make demo and the specs do (default: on)",
    )
    p.add_argument("--batch-size", type=int, default=40, help="episodes generated together")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    logging.basicConfig(level=logging.WARNING)
    args = parse_args(argv)
    profile = PROFILES[args.profile]
    if args.epochs is not None and args.epochs < 1:
        raise ConfigError(f"--epochs must be >= 1, got {args.epochs}")
    if args.seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {args.seeds}")
    mine = user_envs(args.tasks, system=args.system)
    registry = {**ENVS, **mine}
    settings = Settings(
        profile=args.profile,
        envs=tuple(pick([*(args.envs or []), *mine] or profile.envs, list(registry), "environments")),
        conditions=tuple(pick(args.conditions or profile.conditions, [c.name for c in CONDITIONS], "conditions")),
        epochs=args.epochs or profile.epochs,
        limit=args.limit,
        seed=args.seed,
        seeds=args.seeds,
        paraphrases=args.paraphrases,
        batch_size=args.batch_size,
        optimizer=OptimizerSettings(small_critic=args.model.startswith("local/")),
        progress=not args.quiet,
    )
    chat = load_model(args.model, args.base_url, args.batch_size)
    embedder = load_embedder(args.embedder)
    result = run(settings, chat=chat, embedder=embedder, out=args.out, model=args.model, registry=registry)
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
