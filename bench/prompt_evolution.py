"""Prompt evolution on the format-rules family with the local model, reported honestly.

The actor and the critic are both SmolLM2-135M-Instruct (local, CPU). The seed system prompt says
nothing about the output rules the environment checks; each optimizer gets a few gated steps, and the
validation score of the seed prompt is written next to the validation score of the HEAD it ends with.
A step whose proposal does not beat its parent on validation (paired test) leaves HEAD where it was,
so the evolved score can equal the seed's — that is the gate working, not a failure to report.

``textgrad-feedback`` is the textual-gradient step for critics too small to critique: the
environment's feedback is the gradient (``backward="feedback"``) and a step adds one instruction
(``edit="append"``).

Run: python -m bench.prompt_evolution [--steps 3] [--optimizers textgrad textgrad-feedback tfgrpo]
Writes bench/results/prompt_evolution.{json,md} and prompt_* keys of bench/results/summary.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.common import machine, merge_summary
from connectors import ChatClient, load_chat, make_engine
from evolve import Agent, PromptEvolution, PromptGraph, Team, load_tasks, make_evaluate, split_tasks
from evolve.envs.tasks import TaskEnv
from optimizers.types import Candidate, Evaluate, PromptOptimizer

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TASKS = ROOT / "data" / "format_rules.jsonl"
SEED_PROMPT = "You are a helpful assistant."
KINDS = ("textgrad", "textgrad-feedback", "tfgrpo")


def build_optimizer(kind: str, critic: ChatClient, seed: int) -> PromptOptimizer:
    from optimizers import TextualGradientOptimizer, TrainingFreeGRPO

    # A 135M critic cannot keep the <new_text> format nor write the operations JSON, so both optimizers
    # take untagged answers (the gates still decide); its answers are capped at 160 tokens because the
    # small model rambles past that.
    params = {"max_tokens": 160}
    if kind == "textgrad":
        return TextualGradientOptimizer(
            critic=critic, budget="light", minibatch_size=4, critic_params=params, untagged=True, seed=seed
        )
    if kind == "textgrad-feedback":
        # Nor can it critique: the environment's feedback is the gradient, and each step adds one
        # instruction instead of rewriting the whole prompt.
        return TextualGradientOptimizer(
            critic=critic,
            budget="light",
            minibatch_size=4,
            critic_params=params,
            untagged=True,
            backward="feedback",
            edit="append",
            seed=seed,
        )
    return TrainingFreeGRPO(
        critic=critic,
        library_component="solver.library",
        group_size=4,
        batch_size=3,
        budget="light",
        critic_params=params,
        untagged=True,
        seed=seed,
    )


def mean_score(evaluate: Evaluate, candidate: Candidate, ids: Sequence[str]) -> float:
    traces = evaluate(candidate, ids)
    return sum(t.score for t in traces) / len(traces)


def run_optimizer(
    kind: str,
    *,
    team: Team,
    chat: ChatClient,
    evaluate: Evaluate,
    train: list[str],
    val: list[str],
    steps: int,
    seed: int,
    db: str,
) -> dict[str, Any]:
    graph = PromptGraph(make_engine(db), kind)
    evolution = PromptEvolution(graph, build_optimizer(kind, chat, seed), train_ids=train, val_ids=val)
    evolution.start(team)
    seed_val = mean_score(evaluate, graph.head().nodes, val)
    started, log = time.perf_counter(), []
    for i in tqdm(range(steps), desc=f"{kind} steps"):
        update = evolution.step(team, evaluate)
        log.append(
            {
                "step": i + 1,
                "accepted": update.accepted,
                "reason": update.reason,
                "head": update.head,
                "critic_tokens": update.usage.total_tokens,
            }
        )
    head = graph.head()
    return {
        "seed_val": round(seed_val, 4),
        "evolved_val": round(mean_score(evaluate, head.nodes, val), 4),
        "accepted": sum(s["accepted"] for s in log),
        "steps": log,
        "seconds": round(time.perf_counter() - started, 1),
        "head": head.id,
        "head_prompt": dict(head.nodes),
        "rejected": [{"proposal": dict(nodes), "reason": reason} for nodes, reason in graph.rejected(limit=steps)],
    }


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        "# Prompt evolution on the format-rules family",
        "",
        f"Machine: {m['cpu_count']} CPUs ({m['cpu']}), Python {m['python']}. Actor and critic: {result['model']}; "
        f'{result["train"]} training and {result["val"]} validation tasks; seed prompt: "{SEED_PROMPT}".',
        "",
        "| optimizer | steps | accepted | seed prompt (val) | evolved HEAD (val) | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for kind, r in result["optimizers"].items():
        lines.append(
            f"| {kind} | {len(r['steps'])} | {r['accepted']} | {r['seed_val']:.3f} | {r['evolved_val']:.3f} | {r['seconds']} |"
        )
    lines += ["", "Each step's verdict:", ""]
    for kind, r in result["optimizers"].items():
        lines += [
            f"- {kind} step {s['step']}: {'accepted' if s['accepted'] else 'rejected'} — {s['reason']}"
            for s in r["steps"]
        ]
    lines += ["", "HEAD prompts at the end:", ""]
    for kind, r in result["optimizers"].items():
        for component, text in r["head_prompt"].items():
            if text:
                lines += [f"- {kind} `{component}`:", "", "  " + text.replace("\n", "\n  "), ""]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--optimizers", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    tasks = load_tasks(TASKS)
    chat = load_chat("local/smollm2", batch_size=32)
    team = Team([Agent("solver", chat, system=SEED_PROMPT, params={"max_tokens": 16, "temperature": 0.0})])
    train, val = split_tasks(tasks, val_fraction=0.5, seed=args.seed)
    evaluate = make_evaluate(team, tasks, lambda: TaskEnv(tasks))
    result: dict[str, Any] = {
        "machine": machine(),
        "model": chat.name,
        "train": len(train),
        "val": len(val),
        "optimizers": {},
    }
    with tempfile.TemporaryDirectory(prefix="evolve-bench-prompts-") as tmp:
        for kind in args.optimizers:
            result["optimizers"][kind] = run_optimizer(
                kind,
                team=team,
                chat=chat,
                evaluate=evaluate,
                train=train,
                val=val,
                steps=args.steps,
                seed=args.seed,
                db=f"sqlite:///{tmp}/prompts.db",
            )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "prompt_evolution.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (args.out / "prompt_evolution.md").write_text(markdown(result), encoding="utf-8")
    flat = {}
    for kind, r in result["optimizers"].items():
        key = kind.replace("-", "_")
        flat |= {
            f"prompt_{key}_seed_val": r["seed_val"],
            f"prompt_{key}_evolved_val": r["evolved_val"],
            f"prompt_{key}_accepted": r["accepted"],
        }
    merge_summary(args.out / "summary.json", flat)
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
