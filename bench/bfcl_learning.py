"""Learning on BFCL (the Berkeley Function Calling Leaderboard v4): a benchmark Evolve did not write.

Every (category, condition, seed) cell runs both protocols on one store:

- **MemRL's**: E epochs over the same train tasks, memory learning after every batch; *last* is the
  success rate of the final epoch, *cum* the share of train tasks solved in at least one epoch;
- **transfer**: then memory is frozen (no reward, no write) and the team answers unseen test tasks once;
  *transfer* is their success rate.

Each seed draws its own train and test tasks from the category (disjoint) and its own order. The agent
is given each question's functions as tools that are only described (BFCL checks calls, it does not run
them): its answer is its calls, checked by BFCL's rules (``evolve.envs.bfcl``). A failure's feedback
shows a correct call, as the bundled families reveal their answers.

A local model writes its required calls under a grammar of the tools' calls (``connectors.constrained``);
``--calls prompted`` asks for them by prompt only and parses what comes back, as before; ``--calls constrained``
names the default. Either flag writes its own report, ``bfcl_learning_calls_<mode>``, and keys ending in
``_calls_<mode>``, so the two can be compared seed by seed (``bench.structured_output`` does).

Run: python -m bench.bfcl_learning [--profile quick|full] [--categories ...] [--conditions ...]
     [--epochs E] [--train N] [--test N] [--seeds S] [--model local/smollm2 | openai/<name> [--base-url URL]]
     [--calls constrained|prompted]
Writes bench/results/bfcl_learning.{json,md}, bench/results/bfcl_learning_<category>.png and the
learning_bfcl_<category>_<condition>_{last,cum,transfer} keys (with _mean, _ci_low, _ci_high) of
bench/results/summary.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from bench.bfcl_splits import SPLITS, TEST_TASKS, split
from bench.common import machine, merge_summary
from bench.learning import load_model
from bench.learning_conditions import BY_NAME, Condition, EnvSpec, OptimizerSettings, build_evolver, pick
from bench.learning_report import cell_metrics, plot_env, seed_cell
from connectors import ChatClient, ConfigError, Embedder, Environment, load_chat, load_embedder
from connectors.prompted_tools import call_text
from evolve import Task
from evolve.envs.bfcl.multi_turn import BfclMultiTurnEnv, multi_turn_tasks
from evolve.envs.bfcl.single import BfclEnv, bfcl_tasks
from evolve.intervals import paired_interval, seed_interval
from memory import RetrievalConfig

log = logging.getLogger(__name__)
RESULTS = Path(__file__).resolve().parent / "results"
SYSTEM = "You turn a request into function calls. Reply with the calls only."
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "multi_turn_base")
CONDITIONS = ("no_memory", "similarity", "q_memory", "q_memory_textgrad")


@dataclass(frozen=True, kw_only=True)
class Profile:
    """What a profile runs: categories, conditions, epochs, the train and test split sizes, seeds."""

    categories: tuple[str, ...]
    conditions: tuple[str, ...]
    epochs: int
    train: int
    test: int
    seeds: int
    split: str = "unseen"
    calls: str | None = None  # "constrained" or "prompted" when asked for by name (--calls)


PROFILES = {
    # make bench: two categories, the three memory conditions, one seed (15 minutes on 2 cores: 899 s measured)
    "quick": Profile(
        categories=("simple_python", "multiple"),
        conditions=("no_memory", "similarity", "q_memory"),
        epochs=3,
        train=8,
        test=8,
        seeds=1,
    ),
    "full": Profile(categories=CATEGORIES, conditions=CONDITIONS, epochs=3, train=32, test=32, seeds=3),
}
MULTI_TURN_SYSTEM = (
    "You operate the user's systems through function calls. Call the functions a request needs; "
    "when it is done, say so in one line."
)
MULTI_TURN_TOKENS = 96


def category_env(category: str, everything: Sequence[Task]) -> EnvSpec:
    """One BFCL category as the learning benchmark's environment: a call is required (the answer is
    started with ``[``), answers are cut at a blank line (prose after the calls is not read), and recall
    shows the two nearest memories. ``multi_turn_base`` runs its APIs for real: the agent calls them
    (tool loop, ``tool_choice="auto"``) and ends each user turn in text."""
    known = list(everything)
    if category == "multi_turn_base":
        return EnvSpec(
            name="bfcl_multi_turn_base",
            tasks=lambda limit: known[:limit],
            system=MULTI_TURN_SYSTEM,
            max_tokens=MULTI_TURN_TOKENS,
            max_turns=max(len(t.meta["turns"]) for t in known),
            retrieval=RetrievalConfig(k1=10, k2=2, delta=0.3),
            env_factory=lambda _tasks: BfclMultiTurnEnv,
            agent_params={"tool_choice": "auto"},
            note="BFCL v4 `multi_turn_base` (bfcl-eval): stateful APIs run for real; success = BFCL's multi-turn "
            "checker (state and responses after every turn match the ground truth's execution).",
        )

    def factory(_tasks: Sequence[Task]) -> Callable[[], Environment]:
        return lambda: BfclEnv(known)  # train and test tasks alike: the transfer protocol asks the test ones

    return EnvSpec(
        name=f"bfcl_{category}",
        tasks=lambda limit: known[:limit],
        system=SYSTEM,
        max_tokens=96 if "parallel" in category else 64,
        retrieval=RetrievalConfig(k1=10, k2=2, delta=0.3),
        env_factory=factory,
        agent_params={"tool_choice": "required", "stop": ["\n\n"]},
        tool_rounds=2,  # a call that cannot be read is told to the model once, then the answer stands
        note=f"BFCL v4 `{category}` (bfcl-eval); success = the calls pass BFCL's AST check.",
    )


def run_seed(
    env: EnvSpec,
    cond: Condition,
    train: Sequence[Task],
    test: Sequence[Task],
    seed: int,
    *,
    epochs: int,
    chat: ChatClient,
    embedder: Embedder,
    folder: Path,
    batch_size: int,
) -> dict[str, Any]:
    """Both protocols for one cell and seed: E epochs over ``train``, then ``test`` with memory frozen."""
    evolver, store = build_evolver(
        env, cond, train, chat=chat, embedder=embedder, folder=folder,
        optimizer=OptimizerSettings(small_critic=chat.name.startswith("local/")), batch_size=batch_size, seed=seed,
    )  # fmt: skip
    tokens0, started = chat.usage.total_tokens, time.perf_counter()
    rewards, rounds = [], []
    try:
        for epoch in tqdm(range(1, epochs + 1), desc=f"{env.name} / {cond.name} / seed {seed}", unit="epoch"):
            rounds.append(evolver.run_round(epoch))
            by_task = {row["task_id"]: float(row["reward"]) for row in evolver.log.round_rows(epoch)}
            rewards.append([by_task.get(t.id, 0.0) for t in train])
        train_seconds = time.perf_counter() - started
        episodes = [
            e for i in range(0, len(test), batch_size) for e in evolver.run_batch(test[i : i + batch_size], epochs + 1)
        ]
        transfer = [e.reward for e in episodes]
        stored_after_test = len(store.items()) if store is not None else 0  # frozen: the test tasks add nothing
    finally:
        if store is not None:
            store.close()
    samples = [  # transcripts for the report: what the agent called and said, and what BFCL answered
        {
            "task_id": e.task_id,
            "prompt": e.prompt,
            "reward": e.reward,
            "feedback": e.feedback,
            "turns": [
                {"calls": [f"{call_text(r.call)} -> {r.result[:120]}" for r in st.calls], "said": st.output}
                for st in e.steps
            ],
        }  # fmt: skip
        for e in episodes[:3]
    ]
    return {
        "status": "ok",
        **cell_metrics(rewards),
        "transfer": round(float(np.mean([r >= 1.0 for r in transfer])), 4),
        "transfer_rewards": transfer,
        "tokens": chat.usage.total_tokens - tokens0,
        "optimizer_tokens": sum(m.optimizer_tokens for m in rounds),
        "episode_tokens": sum(m.tokens for m in rounds),
        "prompt_updates": sum(m.prompt_updates for m in rounds),
        "memory_size": rounds[-1].memory_size,
        "memory_after_test": stored_after_test,
        "errors": sum(m.errors for m in rounds),
        "prompt_notes": [m.prompt_note for m in rounds if m.prompt_note],
        "train_seconds": round(train_seconds, 1),
        "seconds": round(time.perf_counter() - started, 1),
        "rewards": rewards,
        "train_ids": [t.id for t in train],
        "test_ids": [t.id for t in test],
        "test_samples": samples,
    }


def run_category(
    category: str, profile: Profile, *, chat: ChatClient, embedder: Embedder, folder: Path, batch_size: int
) -> dict[str, Any]:
    """Every condition of the profile on one category, over its seeds (the same splits for every condition)."""
    everything = multi_turn_tasks() if category == "multi_turn_base" else bfcl_tasks(category)
    env = category_env(category, everything)
    seeds = list(range(profile.seeds))
    splits = {seed: split(everything, profile.train, profile.test, seed, profile.split) for seed in seeds}
    cells: dict[str, Any] = {}
    for name in profile.conditions:
        per_seed = []
        for seed in seeds:
            here = folder / category / f"seed-{seed}"
            here.mkdir(parents=True, exist_ok=True)
            train, test = splits[seed]
            per_seed.append(
                run_seed(
                    env,
                    BY_NAME[name],
                    train,
                    test,
                    seed,
                    epochs=profile.epochs,
                    chat=chat,
                    embedder=embedder,
                    folder=here,
                    batch_size=batch_size,
                )  # fmt: skip
            )
        cell = seed_cell(per_seed, seeds)
        iv = seed_interval([c["transfer"] for c in per_seed])
        cell["transfer"], cell["transfer_ci"], cell["transfer_per_seed"] = (
            round(iv.mean, 4), [round(iv.low, 4), round(iv.high, 4)], list(iv.values)
        )  # fmt: skip
        cells[name] = cell
    return {"tasks_in_category": len(everything), "note": env.note, "conditions": cells}


def summary_keys(result: dict[str, Any]) -> dict[str, float]:
    """``learning_bfcl_<category>_<condition>_{last,cum,transfer}`` and their ``_mean``/``_ci_low``/``_ci_high``;
    under the ``same_tools`` split only ``..._transfer_same_tools`` (its epochs repeat the other split's)."""
    same_tools = result["settings"].get("split") == "same_tools"
    calls = result["settings"].get("calls")
    flat: dict[str, float] = {}
    for category, block in result["categories"].items():
        for cond, cell in block["conditions"].items():
            for key in ("transfer",) if same_tools else ("last", "cum", "transfer"):
                name = f"learning_bfcl_{category}_{cond}_{key}" + ("_same_tools" if same_tools else "")
                name += f"_calls_{calls}" if calls else ""
                iv = seed_interval(cell[f"{key}_per_seed"])
                flat[name] = cell[key]
                flat[f"{name}_mean"], flat[f"{name}_ci_low"], flat[f"{name}_ci_high"] = (
                    round(iv.mean, 4), round(iv.low, 4), round(iv.high, 4)
                )  # fmt: skip
    return flat


COMPARED = (("q_memory", "no_memory"), ("q_memory", "similarity"), ("q_memory_textgrad", "q_memory"))


def markdown(result: dict[str, Any]) -> str:
    """The report: per category a table of the three figures with intervals, then paired verdicts."""
    s = result["settings"]
    lines = [
        "# Learning on BFCL",
        "",
        f"Model `{s['model']}`, embedder `{s['embedder']}`; {s['epochs']} epochs over {s['train']} train tasks "
        f"(MemRL: last, cum), then {s['test']} {TEST_TASKS[s.get('split', 'unseen')]} with memory frozen (transfer); "
        f"seeds {s['seeds']} "
        f"(95% intervals over seeds; paired differences). Profile `{s['profile']}`, {result['seconds']:.0f} s."
        + (f" Calls: {s['calls']}." if s.get("calls") else ""),
    ]
    for category, block in result["categories"].items():
        lines += ["", f"## {category}", "", block["note"], "",
                  "| condition | last | cum | transfer | tokens | seconds |", "|---|---|---|---|---|---|"]  # fmt: skip
        cells = block["conditions"]
        for cond, c in cells.items():
            figs = [seed_interval(c[f"{k}_per_seed"]).text() for k in ("last", "cum", "transfer")]
            lines.append(f"| {cond} | {' | '.join(figs)} | {c['tokens']:,} | {c['seconds']:.0f} |")
        lines.append("")
        for treatment, baseline in COMPARED:
            if treatment in cells and baseline in cells:
                parts = []
                for key in ("last", "cum", "transfer"):
                    d = paired_interval(
                        baseline=cells[baseline][f"{key}_per_seed"], treatment=cells[treatment][f"{key}_per_seed"]
                    )
                    parts.append(f"{key} {d.text()}")
                lines.append(f"- {treatment} − {baseline}: " + "; ".join(parts))
        sample = next(iter(cells.values()))["per_seed"][0]["test_samples"][:1]
        for x in sample:
            said = " / ".join(t["said"][:120] for t in x["turns"])
            lines += ["", f"Sample test answer ({x['task_id']}): `{said}` → {x['feedback'][:200]}"]
    return "\n".join(lines) + "\n"


def run(
    profile: Profile,
    *,
    name: str,
    chat: ChatClient,
    embedder: Embedder,
    model: str,
    out: Path,
    batch_size: int,
    add: bool = False,
) -> dict[str, Any]:
    """Every category of ``profile``; writes the report, plots and summary keys after each category.
    ``add`` keeps the other conditions of an earlier report of the same settings at ``out``."""
    started = time.perf_counter()
    settings = {
        "profile": name,
        "model": model,
        "embedder": embedder.name,
        "epochs": profile.epochs,
        "train": profile.train,
        "test": profile.test,
        "seeds": list(range(profile.seeds)),
        "split": profile.split,
        **({"calls": profile.calls} if profile.calls else {}),
    }
    stem = "bfcl_learning" if profile.split == "unseen" else f"bfcl_learning_{profile.split}"
    stem += f"_calls_{profile.calls}" if profile.calls else ""
    result: dict[str, Any] = {
        "settings": settings,
        "conditions": {c: BY_NAME[c].about for c in profile.conditions},
        "machine": machine(),
        "categories": {},
    }
    earlier = earlier_report(out / f"{stem}.json", settings) if add else None
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="evolve-bench-bfcl-") as tmp:
        for category in profile.categories:
            block = run_category(
                category, profile, chat=chat, embedder=embedder, folder=Path(tmp), batch_size=batch_size
            )
            if earlier is not None:
                result["conditions"] = {**earlier["conditions"], **result["conditions"]}
                before = earlier["categories"].get(category, {}).get("conditions", {})
                block["conditions"] = {**before, **block["conditions"]}
            result["categories"][category] = block
            result["seconds"] = round(time.perf_counter() - started, 1)
            if earlier is not None:
                result["categories"] = {**earlier["categories"], **result["categories"]}
                result["seconds"] += earlier.get("seconds", 0.0)
            (out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
            (out / f"{stem}.md").write_text(markdown(result), encoding="utf-8")
            plot_env(f"bfcl_{category}", block["conditions"], out / f"{stem}_{category}.png")
            merge_summary(out / "summary.json", summary_keys(result))
    return result


def earlier_report(path: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The report at ``path`` that ``--add`` adds to; ConfigError when it is missing or ran other settings."""
    if not path.exists():
        raise ConfigError(f"--add: there is no earlier report at {path} to add to")
    earlier: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    differ = [k for k in settings if k != "profile" and earlier["settings"].get(k, "unseen") != settings[k]]
    if differ:
        raise ConfigError(
            f"--add: the report at {path} ran other settings ({', '.join(differ)}: "
            f"{', '.join(repr(earlier['settings'].get(k)) for k in differ)}); run with the same ones or without --add"
        )
    return earlier


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    logging.basicConfig(level=logging.WARNING)
    p = argparse.ArgumentParser(
        prog="python -m bench.bfcl_learning", description=__doc__.splitlines()[0] if __doc__ else None
    )
    p.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    p.add_argument("--categories", nargs="+", metavar="C", help=f"some of {list(CATEGORIES)}")
    p.add_argument("--conditions", nargs="+", metavar="C", help=f"some of {list(CONDITIONS)}")
    p.add_argument("--epochs", type=int)
    p.add_argument("--train", type=int, help="train tasks per seed (MemRL epochs run over them)")
    p.add_argument("--test", type=int, help="unseen test tasks per seed (transfer)")
    p.add_argument("--seeds", type=int, help="seeds per cell (3+ for claims)")
    p.add_argument("--split", choices=SPLITS, default="unseen", help="test tasks: unseen ones, or new questions "
                   "to the functions seen in training (same_tools)")  # fmt: skip
    p.add_argument("--add", action="store_true", help="keep the other conditions of the earlier report (same settings)")
    p.add_argument("--model", default="local/smollm2", help="local/smollm2, openai/<name>, vllm/<path>, ...")
    p.add_argument("--base-url", help="an OpenAI-compatible server for --model openai/<name>")
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--batch-size", type=int, default=16, help="episodes generated together")
    p.add_argument("--calls", choices=("constrained", "prompted"), help="a local model's required calls: under a "
                   "grammar (the default) or prompted only; named, the report and keys are this mode's own")  # fmt: skip
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    base = PROFILES[args.profile]
    for flag in ("epochs", "train", "test", "seeds"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise ConfigError(f"--{flag} must be >= 1, got {value}")
    profile = Profile(
        categories=tuple(pick(args.categories or base.categories, CATEGORIES, "categories")),
        conditions=tuple(pick(args.conditions or base.conditions, CONDITIONS, "conditions")),
        epochs=args.epochs or base.epochs,
        train=args.train or base.train,
        test=args.test or base.test,
        seeds=args.seeds or base.seeds,
        split=args.split,
        calls=args.calls,
    )
    if args.calls and not args.model.startswith("local/"):
        raise ConfigError(f"--calls chooses how a local model writes its calls; {args.model} is not local/...")
    if args.calls:  # LocalChat's switch: under a grammar, or prompted only
        constrained = args.calls == "constrained"
        chat = load_chat(args.model, batch_size=args.batch_size, threads=os.cpu_count(), constrained=constrained)
    else:
        chat = load_model(args.model, args.base_url, args.batch_size)
    embedder = load_embedder(args.embedder)
    result = run(
        profile,
        name=args.profile,
        chat=chat,
        embedder=embedder,
        model=args.model,
        out=args.out,
        batch_size=args.batch_size,
        add=args.add,
    )
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
