"""Facts that change: success per round on the changing-facts family, with and without supersession.

Half of the 24 staff of ``data/changing_facts.jsonl`` move desks before round 5: from then on their
extension is a new number, and every memory that showed the old one is stale. ``without`` is the store
as it was (``MemoryConfig.supersede=False``): stale memories keep competing with the new one by
similarity and Q until their Q has fallen. ``with`` supersedes them as soon as a memory states the new
number (the failure whose feedback reveals it; ``memory.upkeep.supersession``). Both use the family's spec settings
(k1 = 10, k2 = 1, δ = 0.5, λ = 0.5, α = 0.3, centred rewards, failure memories keeping the feedback) and
the ``oracle`` reader of ``bench.ablations`` (it answers with what the best recalled memory shows, so the
figures measure recall, not a model's reading), over seeds (task order, paraphrase choice).

Reported per round: success on all tasks, on the movers and on the others (mean and 95% interval over
seeds), the paired difference with − without, and how many rounds after the change the movers' success
is back at its level of the round before the change.

Run: python -m bench.changing_facts [--seeds 10] [--rounds 12] [--embedder minilm]
Writes bench/results/changing_facts.{json,md} and the changing_facts_* keys of bench/results/summary.json.
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

from bench.ablations import CachedEmbedder, oracle_reply
from bench.common import machine, merge_summary
from bench.learning_conditions import ENVS, EnvSpec, seed_order
from connectors import ChatClient, Embedder, ScriptedChat, load_embedder
from evolve import Agent, Evolver, MemoryView, Task, Team, paraphrase_schedule
from evolve.evolver import centred
from evolve.intervals import Interval, paired_interval, seed_interval
from memory import MemoryConfig, MemoryStore

RESULTS = Path(__file__).resolve().parent / "results"
CONDITIONS = {"without": False, "with": True}
"""Condition name → ``MemoryConfig.supersede``."""


def run_seed(
    env: EnvSpec, tasks: Sequence[Task], *, supersede: bool, seed: int, rounds: int, embedder: Embedder, folder: Path
) -> np.ndarray:
    """One run of ``rounds`` rounds: the rewards, rounds × tasks (in ``tasks``' order)."""
    config = MemoryConfig(retrieval=env.retrieval, alpha=0.3, supersede=supersede)
    url = f"sqlite:///{folder / f'{supersede}-{seed}.db'}"
    with MemoryStore(url, embedder=embedder, config=config, seed=seed) as store:
        params = {"max_tokens": env.max_tokens, "temperature": 0.0, "seed": seed}
        chat = ChatClient(ScriptedChat(oracle_reply))
        agent = Agent("solver", chat, system=env.system, memory=MemoryView(store), params=params)
        ordered = seed_order(tasks, seed)
        evolver = Evolver(
            Team([agent]),
            ordered,
            memory=store,
            run="changing-facts",
            batch_size=len(ordered),
            schedule=paraphrase_schedule(seed),
            memory_reward=centred,
            progress=False,
        )
        out = np.zeros((rounds, len(tasks)))
        for r in range(1, rounds + 1):
            evolver.run_round(r)
            by_task = {row["task_id"]: float(row["reward"]) for row in evolver.log.round_rows(r)}
            out[r - 1] = [by_task.get(t.id, 0.0) for t in tasks]
    return out


def recovery(rewards: np.ndarray, movers: np.ndarray, change: int) -> int | None:
    """Rounds after the change round until the movers' success is back at its level before the change: its
    mean over rounds 2 to change − 1 (round 1 has no memory yet); 0: it never dropped; None when it is not
    back by the last round."""
    success = (rewards[:, movers] >= 1.0).mean(axis=1)
    bar = success[1 : change - 1].mean()
    for r in range(change, len(rewards) + 1):
        if success[r - 1] >= bar:
            return r - change
    return None


def iv(values: np.ndarray) -> dict[str, Any]:
    """Per-seed figures as ``{"mean", "ci"}`` (95% over seeds)."""
    return interval_dict(seed_interval(values.tolist()))


def summarise(runs: dict[str, list[np.ndarray]], movers: np.ndarray, change: int) -> dict[str, Any]:
    """Per condition and round: success on all tasks, movers and the others; paired differences; recovery."""
    parts = {"all": np.ones_like(movers), "movers": movers, "others": ~movers}
    out: dict[str, Any] = {"conditions": {}, "difference": {}}
    per_seed: dict[str, dict[str, np.ndarray]] = {}
    for name, seeds in runs.items():
        curves = {p: np.array([(r[:, m] >= 1.0).mean(axis=1) for r in seeds]) for p, m in parts.items()}
        per_seed[name] = curves
        after = curves["all"][:, change - 1 :].mean(axis=1)
        rec = [recovery(r, movers, change) for r in seeds]
        out["conditions"][name] = {
            **{p: [iv(c[:, j]) for j in range(c.shape[1])] for p, c in curves.items()},
            "after_change": iv(after),
            "recovery_rounds": rec,
            "recovered_seeds": sum(x is not None for x in rec),
            "per_seed": {p: c.round(4).tolist() for p, c in curves.items()},
        }
    for p in parts:
        base, treat = per_seed["without"][p], per_seed["with"][p]
        out["difference"][p] = [
            interval_dict(paired_interval(baseline=base[:, j].tolist(), treatment=treat[:, j].tolist()))
            for j in range(base.shape[1])
        ]
    for p, key in (("all", "after_change"), ("others", "others_after_change")):
        base_after = per_seed["without"][p][:, change - 1 :].mean(axis=1)
        treat_after = per_seed["with"][p][:, change - 1 :].mean(axis=1)
        gain = paired_interval(baseline=base_after.tolist(), treatment=treat_after.tolist())
        out["difference"][key] = interval_dict(gain)
    return out


def interval_dict(i: Interval) -> dict[str, Any]:
    return {"mean": round(i.mean, 4), "ci": [round(i.low, 4), round(i.high, 4)]}


def cell(x: dict[str, Any]) -> str:
    return f"{x['mean']:.3f} [{x['ci'][0]:.3f}, {x['ci'][1]:.3f}]"


def recovery_text(rec: Sequence[int | None]) -> str:
    done = [r for r in rec if r is not None]
    mean = f"{np.mean(done):.1f}" if done else "–"
    return f"{mean} rounds (per seed: {', '.join('–' if r is None else str(r) for r in rec)}; recovered in {len(done)}/{len(rec)} seeds)"


def markdown(result: dict[str, Any]) -> str:
    s, change = result["summary"], result["change_round"]
    w, wo, d = s["conditions"]["with"], s["conditions"]["without"], s["difference"]
    lines = [
        "# Facts that change: supersession on the changing-facts family",
        "",
        f"{result['tasks']} tasks, {result['movers']} of them change their answer at round {change}; "
        f"{len(result['seeds'])} seeds, {result['rounds']} rounds, reader `{result['reader']}`, embedder "
        f"`{result['embedder']}`. Success per round: mean [95% interval over seeds]; difference = with − without, "
        "paired by seed.",
        "",
        "| round | without: all | with: all | difference | without: movers | with: movers | difference (movers) |",
        "|---|---|---|---|---|---|---|",
    ]
    for j in range(result["rounds"]):
        mark = " (change)" if j + 1 == change else ""
        lines.append(
            f"| {j + 1}{mark} | {cell(wo['all'][j])} | {cell(w['all'][j])} | {cell(d['all'][j])} | "
            f"{cell(wo['movers'][j])} | {cell(w['movers'][j])} | {cell(d['movers'][j])} |"
        )
    lines += [
        "",
        f"Mean success from round {change} on: without {cell(wo['after_change'])}, with {cell(w['after_change'])}, "
        f"difference {cell(d['after_change'])}.",
        "",
        f"Mean success of the other tasks from round {change} on, difference: {cell(d['others_after_change'])}.",
        "",
        f"Rounds after the change until the movers' success is back at its level before it (its mean over rounds "
        f"2–{change - 1}): "
        f"without {recovery_text(wo['recovery_rounds'])}; with {recovery_text(w['recovery_rounds'])}.",
        "",
    ]
    return "\n".join(lines)


def summary_keys(result: dict[str, Any]) -> dict[str, Any]:
    """``changing_facts_{with,without}_supersede_{last,after_change}_{mean,ci_low,ci_high}``, their recovery, and
    the paired gain after the change."""
    s, rounds = result["summary"], result["rounds"]
    out: dict[str, Any] = {"changing_facts_seeds": len(result["seeds"])}

    def put(key: str, x: dict[str, Any]) -> None:
        out[f"{key}_mean"], out[f"{key}_ci_low"], out[f"{key}_ci_high"] = x["mean"], x["ci"][0], x["ci"][1]

    for name, c in s["conditions"].items():
        key = f"changing_facts_{name}_supersede"
        put(f"{key}_last", c["all"][rounds - 1])
        put(f"{key}_after_change", c["after_change"])
        done = [r for r in c["recovery_rounds"] if r is not None]
        out[f"{key}_recovery_rounds_mean"] = round(float(np.mean(done)), 2) if done else None
        out[f"{key}_recovered_seeds"] = c["recovered_seeds"]
    put("changing_facts_supersede_gain_after_change", s["difference"]["after_change"])
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(prog="python -m bench.changing_facts", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    env = ENVS["changing_facts"]()
    tasks = env.tasks(None)
    movers = np.array(["changes" in t.meta for t in tasks])
    change = min(c["round"] for t in tasks for c in t.meta.get("changes", []))
    if args.seeds < 2 or args.rounds <= change:
        p.error(f"--seeds must be >= 2 and --rounds > {change} (the change round)")
    embedder, started = CachedEmbedder(load_embedder(args.embedder)), time.perf_counter()
    runs: dict[str, list[np.ndarray]] = {name: [] for name in CONDITIONS}
    with tempfile.TemporaryDirectory(prefix="evolve-changing-facts-") as tmp:
        for seed in range(args.seeds):
            for name, supersede in CONDITIONS.items():
                runs[name].append(
                    run_seed(
                        env,
                        tasks,
                        supersede=supersede,
                        seed=seed,
                        rounds=args.rounds,
                        embedder=embedder,
                        folder=Path(tmp),
                    )
                )
    result = {
        "machine": machine(),
        "reader": "oracle",
        "embedder": args.embedder,
        "tasks": len(tasks),
        "movers": int(movers.sum()),
        "change_round": change,
        "rounds": args.rounds,
        "seeds": list(range(args.seeds)),
        "settings": {"retrieval": vars(env.retrieval), "alpha": 0.3, "reward": "centred"},
        "summary": summarise(runs, movers, change),
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "changing_facts.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (args.out / "changing_facts.md").write_text(markdown(result), encoding="utf-8")
    merge_summary(args.out / "summary.json", summary_keys(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
