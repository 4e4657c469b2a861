"""A short MARFT run on SmolLM2-135M (CPU): two agents, one LoRA adapter each, on the format-rules tasks.

The drafter answers the question; the editor sees the question and the draft and gives the final
answer, which the environment's rules checker scores (right content, at most seven words, one
sentence). A few PPO iterations only: this shows the escalation running end to end on the real local
model and reports the reward before and after, on the same evaluation episodes (same tasks, same
sampling seed), whatever it is.

Run: python -m bench.marft_smollm2 [--steps 4] [--batch-size 8]
Writes bench/results/marft_smollm2.{json,md} and ``marft_smollm2_*`` keys of bench/results/summary.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.common import machine, merge_summary

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TASKS = ROOT / "data" / "format_rules.jsonl"
ROLES = (
    "You are a helpful assistant. Answer the question.",
    "You are an editor. Give the final answer to the task in one short sentence.",
)
EVAL_EPISODES = 40


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from evolve import load_tasks
    from evolve.weights.escalation import TeamTask
    from optimizers.marft import Args, Trainer, evaluate
    from optimizers.marft.policy import AgentPolicies

    opts = parse(argv)

    task = TeamTask(load_tasks(TASKS), ("drafter", "editor"), ROLES)
    args = Args(
        steps=opts.steps,
        batch_size=opts.batch_size,
        max_new_tokens=opts.max_new_tokens,
        temperature=0.7,
        lr=2e-4,
        critic_lr=2e-4,
        epochs=1,
        minibatches=2,
        seed=opts.seed,
        checkpoint_every=0,
    )
    started = time.perf_counter()
    policy = AgentPolicies.from_smollm2(task.agents, seed=opts.seed)
    load_seconds = time.perf_counter() - started

    def score() -> float:
        return evaluate(
            policy,
            task,
            episodes=EVAL_EPISODES,
            seed=1_000 + opts.seed,
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
        )

    before = score()
    trainer = Trainer(policy, task, args)
    with tqdm(total=args.steps, desc="MARFT SmolLM2") as bar, tempfile.TemporaryDirectory() as ckpt:
        history = trainer.run(checkpoint_dir=ckpt, on_step=lambda _: bar.update(1))
    after = score()
    result = {
        "machine": machine(),
        "model": "SmolLM2-135M-Instruct (local, float32, CPU) + one LoRA adapter per agent + a critic adapter",
        "agents": list(task.agents),
        "roles": list(ROLES),
        "tasks": len(task.tasks),
        "args": asdict(args),
        "eval_episodes": EVAL_EPISODES,
        "reward_before": round(before, 4),
        "reward_after": round(after, 4),
        "iterations": [
            {"step": h.step, "success": h.success, "value_loss": h.value_loss, "seconds": h.seconds} for h in history
        ],
        "load_seconds": round(load_seconds, 1),
        "seconds": round(time.perf_counter() - started, 1),
    }
    write(result, opts.out)
    print(markdown(result))
    return result


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def write(result: dict[str, Any], out: Path) -> None:
    """The JSON and markdown results, and the before/after rewards merged into summary.json."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "marft_smollm2.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "marft_smollm2.md").write_text(markdown(result), encoding="utf-8")
    merge_summary(
        out / "summary.json",
        {"marft_smollm2_reward_before": result["reward_before"], "marft_smollm2_reward_after": result["reward_after"]},
    )


def markdown(result: dict[str, Any]) -> str:
    a = result["args"]
    lines = [
        "# A short MARFT run on SmolLM2-135M (CPU)",
        "",
        f"{result['model']}. Agents {', '.join(result['agents'])} on the {result['tasks']} format-rules tasks; "
        f"{a['steps']} iterations × {a['batch_size']} episodes, {a['max_new_tokens']} new tokens, temperature "
        f"{a['temperature']}, lr {a['lr']}; {result['seconds']} s in all.",
        "",
        f"| | success over {result['eval_episodes']} episodes (same tasks and sampling seed) |",
        "|---|---|",
        f"| before | {result['reward_before']:.3f} |",
        f"| after | {result['reward_after']:.3f} |",
        "",
        "| iteration | rollout success | value loss | seconds |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {h['step']} | {h['success']:.3f} | {h['value_loss'] if h['value_loss'] is None else round(h['value_loss'], 4)} | {h['seconds']} |"
        for h in result["iterations"]
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
