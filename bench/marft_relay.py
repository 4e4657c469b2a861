"""MARFT learns the two-agent relay on CPU: success from chance to (the target) at least 0.9.

Agent 1 sees a secret word; agent 2 sees only what agent 1 said and must say the secret. Both agents
are LoRA adapters on one tiny Llama-style model built from a config in code (random base weights, an
in-memory word tokenizer: nothing is downloaded), trained together with multi-agent PPO, chained GAE and
per-agent advantage normalisation. The learning curve is the success rate of each iteration's sampled
rollouts; before and after, the team is also evaluated on fresh episodes.

Run: python -m bench.marft_relay [--steps 150] [--seed 0]
Writes bench/results/marft_relay.{json,md,png} and ``marft_relay_*`` keys of bench/results/summary.json.
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
EVAL_EPISODES = 512


def run(args: Any, steps: int, seed: int) -> dict[str, Any]:
    import torch

    from optimizers.marft import AgentPolicies, Trainer, evaluate
    from optimizers.marft.tiny import tiny_llama, word_tokenizer
    from optimizers.marft.toys import RelayTask

    torch.manual_seed(seed)
    task = RelayTask()
    tokenizer = word_tokenizer(task.vocabulary)
    base = tiny_llama(len(tokenizer), seed=seed)
    policy = AgentPolicies(base, tokenizer, task.agents, seed=seed)
    before = evaluate(policy, task, episodes=EVAL_EPISODES, seed=10_000 + seed)
    trainer = Trainer(policy, task, args)
    started = time.perf_counter()
    with tqdm(total=args.steps, desc="MARFT relay") as bar, tempfile.TemporaryDirectory() as ckpt:

        def tick(entry: Any) -> None:
            bar.set_postfix(success=f"{entry.success:.2f}")
            bar.update(1)

        history = trainer.run(checkpoint_dir=ckpt, on_step=tick)
    seconds = time.perf_counter() - started
    after = evaluate(policy, task, episodes=EVAL_EPISODES, seed=20_000 + seed)
    greedy = evaluate(policy, task, episodes=EVAL_EPISODES, seed=30_000 + seed, temperature=1e-4)
    tail = [h.success for h in history[-5:]]
    return {
        "machine": machine(),
        "task": {"agents": list(task.agents), "secrets": list(task.secrets), "chance": task.chance},
        "model": {
            "parameters": sum(p.numel() for p in base.parameters()),
            "trainable": {a: sum(p.numel() for p in policy.parameters_of(a)) for a in (*task.agents, "critic")},
        },
        "args": asdict(args),
        "success_before": before,
        "success_after": after,
        "success_after_greedy": greedy,
        "final_success": round(sum(tail) / len(tail), 4),
        "curve": [{"step": h.step, "success": h.success, "value_loss": h.value_loss} for h in history],
        "seconds": round(seconds, 1),
    }


def markdown(result: dict[str, Any]) -> str:
    t, a = result["task"], result["args"]
    lines = [
        "# MARFT on the two-agent relay (CPU, tiny Llama + one LoRA adapter per agent)",
        "",
        f"Machine: {result['machine']['cpu_count']} CPUs ({result['machine']['cpu']}). "
        f"Base model: {result['model']['parameters']:,} parameters (random init, frozen); trainable per agent: "
        + ", ".join(f"{k} {v:,}" for k, v in result["model"]["trainable"].items())
        + ".",
        f"Secrets: {', '.join(t['secrets'])}; chance success {t['chance']:.3f}. "
        f"{a['steps']} iterations × {a['batch_size']} episodes, advantage {a['advantage']} ({a['level']} level), "
        f"normalise {a['normalise']}, ratio {a['ratio']}, schedule {a['schedule']}, seed {a['seed']}; "
        f"{result['seconds']} s.",
        "",
        "| | success |",
        "|---|---|",
        f"| before training (sampled, {EVAL_EPISODES} episodes) | {result['success_before']:.3f} |",
        f"| after training (sampled) | {result['success_after']:.3f} |",
        f"| after training (greedy) | {result['success_after_greedy']:.3f} |",
        f"| final (mean of the last 5 iterations' rollouts) | {result['final_success']:.3f} |",
        "",
        "Learning curve (success of each iteration's rollouts):",
        "",
        "| iteration | success |",
        "|---|---|",
    ]
    curve = result["curve"]
    shown = [c for c in curve if c["step"] % max(1, len(curve) // 15) == 0 or c["step"] in (1, len(curve))]
    lines += [f"| {c['step']} | {c['success']:.3f} |" for c in shown]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    steps = [c["step"] for c in result["curve"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, [c["success"] for c in result["curve"]], label="relay success (rollouts)")
    ax.axhline(result["task"]["chance"], color="grey", linestyle=":", label="chance")
    ax.axhline(0.9, color="green", linestyle="--", linewidth=0.8, label="target 0.9")
    ax.set_xlabel("MARFT iteration")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from optimizers.marft import Args

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a tiny model is fastest on one)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    opts = parser.parse_args(argv)
    import torch

    torch.set_num_threads(opts.threads)
    args = Args(
        steps=opts.steps, batch_size=opts.batch_size, lr=opts.lr, critic_lr=opts.lr, seed=opts.seed, checkpoint_every=0
    )
    result = run(args, opts.steps, opts.seed)
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "marft_relay.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (opts.out / "marft_relay.md").write_text(markdown(result), encoding="utf-8")
    plot(result, opts.out / "marft_relay.png")
    merge_summary(
        opts.out / "summary.json",
        {
            "marft_relay_final_success": result["final_success"],
            "marft_relay_success_before": result["success_before"],
            "marft_relay_success_after": result["success_after"],
        },
    )
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
