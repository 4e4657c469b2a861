"""Memory size over many rounds: today's ever-growing memory against a capped and a consolidated one.

Twenty rounds of the facility-codes family (24 tasks, asked in a paraphrase chosen by seed and round) on
the local model, three conditions from the same seeds:

- ``today``: Q-memory as it is by default: one memory per attempt, kept forever.
- ``capped``: after every round, ``MemoryStore.prune`` evicts down to ``--capacity`` memories with the
  utility order of ``memory.upkeep.forgetting`` (superseded, then low Q after enough rewards, stale, proven, new),
  as ``evolve job`` does with ``[memory.forget] capacity``.
- ``consolidated``: after every round, ``MemoryStore.consolidate`` distils a strategy per task (by rule,
  from at least 3 episodes), then the same prune; recall draws from episodes and strategies.

Reported: stored memories after each round (every row the namespace holds: what is on disk), success
per round, the final size against today's, and success over the last five rounds with 95% intervals over
seeds and paired differences against today.

Run: python -m bench.memory_size [--seeds 3] [--rounds 20] [--capacity 160] [--model local/smollm2]
Writes bench/results/memory_size.{json,md} and the memory_size_* keys of bench/results/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from bench.ablations import CachedEmbedder
from bench.changing_facts import cell, interval_dict, iv
from bench.common import machine, merge_summary
from bench.learning_conditions import ENVS, EnvSpec, seed_order
from connectors import ChatClient, Embedder, load_chat, load_embedder
from evolve import Agent, Evolver, MemoryView, Task, Team, paraphrase_schedule
from evolve.intervals import paired_interval
from evolve.jobs.maintenance import memory_upkeep
from memory import MemoryConfig, MemoryStore
from memory.config import ForgetConfig

RESULTS = Path(__file__).resolve().parent / "results"
CONDITIONS = ("today", "capped", "consolidated")
LAST = 5  # success is compared over the last this many rounds
MIN_SIZE = 3  # episodes a task needs before consolidation gives it a strategy


def run_seed(
    env: EnvSpec, tasks: Sequence[Task], cond: str, *, seed: int, rounds: int, capacity: int, chat: ChatClient,
    embedder: Embedder, folder: Path,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """One run: success (rounds × tasks, in ``tasks``' order) and the stored memories after each round."""
    forget = ForgetConfig(capacity=capacity) if cond != "today" else ForgetConfig()
    config = MemoryConfig(retrieval=env.retrieval, forget=forget)
    with MemoryStore(f"sqlite:///{folder / f'{cond}-{seed}.db'}", embedder=embedder, config=config, seed=seed) as store:
        params = {"max_tokens": env.max_tokens, "temperature": 0.0, "seed": seed}
        agent = Agent("solver", chat, system=env.system, memory=MemoryView(store), params=params)
        ordered = seed_order(tasks, seed)
        evolver = Evolver(
            Team([agent]), ordered, memory=store, run=f"memory-size-{cond}", batch_size=len(ordered),
            schedule=paraphrase_schedule(seed), progress=False,
        )  # fmt: skip
        success, size = np.zeros((rounds, len(tasks))), np.zeros(rounds, dtype=np.int64)
        for r in range(1, rounds + 1):
            evolver.run_round(r)
            if cond != "today":  # what evolve job does after the round
                memory_upkeep(store, ["default"], consolidate=cond == "consolidated", min_size=MIN_SIZE, prune=True)
            by_task = {row["task_id"]: float(row["reward"]) >= 1.0 for row in evolver.log.round_rows(r)}
            success[r - 1] = [by_task.get(t.id, False) for t in tasks]
            size[r - 1] = len(store.items("default"))
    return success, size


def summarise(runs: dict[str, list[tuple[np.ndarray, np.ndarray]]]) -> dict[str, Any]:
    """Per condition: size and success per round, final size, success over the last rounds; differences
    against ``today`` (paired by seed)."""
    out: dict[str, Any] = {"conditions": {}, "difference": {}}
    late = {c: np.array([s[-LAST:].mean() for s, _ in runs[c]]) for c in runs}
    for c, seeds in runs.items():
        sizes = np.array([size for _, size in seeds])
        out["conditions"][c] = {
            "size_per_round": sizes.mean(axis=0).round(1).tolist(),
            "success_per_round": [iv(np.array([s[r].mean() for s, _ in seeds])) for r in range(len(sizes[0]))],
            "final_size": iv(sizes[:, -1].astype(float)),
            "late_success": iv(late[c]),
        }
    today = np.array([size[-1] for _, size in runs["today"]], dtype=float)
    for c in runs:
        if c == "today":
            continue
        ratio = np.array([size[-1] for _, size in runs[c]], dtype=float) / today
        out["difference"][c] = {
            "size_ratio": iv(ratio),
            "late_success": interval_dict(paired_interval(baseline=late["today"].tolist(), treatment=late[c].tolist())),
        }
    return out


def markdown(result: dict[str, Any]) -> str:
    s, rounds = result["summary"], result["rounds"]
    lines = [
        "# Memory size over many rounds",
        "",
        f"{rounds} rounds of `facility_codes` ({result['tasks']} tasks, paraphrased by seed and round), model "
        f"`{result['model']}`, embedder `{result['embedder']}`, seeds {result['seeds']}; capacity "
        f"{result['capacity']} memories for `capped` and `consolidated` (pruned after every round, as `evolve job` "
        f"does); `consolidated` also distils a strategy per task from >= {MIN_SIZE} episodes (by rule) before "
        f"pruning and recalls episodes and strategies. Success over the last {LAST} rounds: mean [95% interval over "
        f"seeds]; differences paired by seed. Machine: {result['machine']['cpu_count']} CPUs; {result['seconds']} s.",
        "",
        "| condition | memories at the end | vs today | success, last rounds | − today |",
        "|---|---|---|---|---|",
    ]
    for c in CONDITIONS:
        row, diff = s["conditions"][c], s["difference"].get(c)
        ratio = cell(diff["size_ratio"]) if diff else "1"
        gain = cell(diff["late_success"]) if diff else "—"
        lines.append(f"| {c} | {cell(row['final_size'])} | {ratio} | {cell(row['late_success'])} | {gain} |")
    lines += ["", "Stored memories after each round (mean over seeds):", ""]
    lines += [f"- {c}: {' '.join(str(int(v)) for v in s['conditions'][c]['size_per_round'])}" for c in CONDITIONS]
    lines += ["", "Success per round (mean over seeds):", ""]
    for c in CONDITIONS:
        per = " ".join(f"{x['mean']:.2f}" for x in s["conditions"][c]["success_per_round"])
        lines.append(f"- {c}: {per}")
    return "\n".join(lines) + "\n"


def summary_keys(result: dict[str, Any]) -> dict[str, Any]:
    s, out = result["summary"], {"memory_size_rounds": result["rounds"], "memory_size_seeds": len(result["seeds"])}
    out["memory_size_capacity"] = result["capacity"]
    for c in CONDITIONS:
        row = s["conditions"][c]
        out[f"memory_size_{c}_final"] = round(row["final_size"]["mean"], 1)
        out[f"memory_size_{c}_late_success"] = round(row["late_success"]["mean"], 3)
        if c in s["difference"]:
            d = s["difference"][c]
            out[f"memory_size_{c}_ratio"] = round(d["size_ratio"]["mean"], 3)
            gain = d["late_success"]
            out[f"memory_size_{c}_minus_today"] = round(gain["mean"], 3)
            out[f"memory_size_{c}_minus_today_lo"], out[f"memory_size_{c}_minus_today_hi"] = (
                round(gain["ci"][0], 3),
                round(gain["ci"][1], 3),
            )
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(prog="python -m bench.memory_size", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--capacity", type=int, default=160, help="memories kept by capped and consolidated")
    p.add_argument("--model", default="local/smollm2")
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.seeds < 2 or args.rounds <= LAST:
        p.error(f"--seeds must be >= 2 and --rounds > {LAST}")
    env = ENVS["facility_codes"]()
    tasks = env.tasks(None)
    chat, embedder = load_chat(args.model), CachedEmbedder(load_embedder(args.embedder))
    started = time.perf_counter()
    runs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {c: [] for c in CONDITIONS}
    cells = [(seed, c) for seed in range(args.seeds) for c in CONDITIONS]
    with tempfile.TemporaryDirectory(prefix="evolve-memory-size-") as tmp:
        for seed, c in tqdm(cells, desc="memory size", unit="run"):
            runs[c].append(
                run_seed(env, tasks, c, seed=seed, rounds=args.rounds, capacity=args.capacity, chat=chat,
                         embedder=embedder, folder=Path(tmp))
            )  # fmt: skip
    result = {
        "machine": machine(),
        "model": args.model,
        "embedder": args.embedder,
        "tasks": len(tasks),
        "rounds": args.rounds,
        "capacity": args.capacity,
        "seeds": list(range(args.seeds)),
        "summary": summarise(runs),
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory_size.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (args.out / "memory_size.md").write_text(markdown(result), encoding="utf-8")
    merge_summary(args.out / "summary.json", summary_keys(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
