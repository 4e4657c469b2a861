"""Teams that learn their order: the price desk of ``data/team_order.jsonl``, fixed orders against a learned one.

Three agents (``rounder``, ``vat``, ``labeller``; see ``data/make_team_order.py``) answer 32 tasks of two
kinds whose right order differs: shelf tags round first, dinner bills add VAT first, and the labeller goes
last in both. The agents are rule readers (each applies its one operation to the amount it is handed; no
model), so the figures measure the order, not a model's reading. Conditions, chosen before any run:

- ``spec``: the chain in the order the spec lists the agents (rounder > vat > labeller);
- ``best_fixed``: each of the six fixed orders run, the one with the best last round kept (in hindsight);
- ``learned``: ``OrderedTeam`` (``[team] order = "learned"``): orders drawn from Plackett–Luce over priorities
  per task group (MiniLM, ``group_threshold`` 0.6), learned from each episode's reward.

Each seed shuffles the tasks' order every round and seeds the draws; ``ROUNDS`` rounds of batches of 8.
``last`` is the last round's success (the learned team still draws orders there); ``served`` is one more
pass over every task in the greedy order (as ``evolve serve`` acts). Agreement: the share of the learned
policy's groups whose greedy order is the right order of the kind of task most of its tasks are.

Run: python -m bench.team_order [--seeds 5] [--rounds 8]
Writes bench/results/team_order.{json,md} and the team_order_* keys of bench/results/summary.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine

from bench.ablations import CachedEmbedder
from bench.common import machine, merge_summary
from connectors import Message, load_chat, load_embedder
from evolve.agent import Agent, Team
from evolve.envs.bundled import bundled_root
from evolve.envs.tasks import Task, load_tasks
from evolve.evolver import Evolver
from evolve.executors import InProcess, Rollout
from evolve.intervals import paired_interval, seed_interval
from evolve.teams.ordered import OrderedTeam
from optimizers.order_policy import GROUP_THRESHOLD

RESULTS = Path(__file__).resolve().parent / "results"
AGENTS = ("rounder", "vat", "labeller")
ROUNDS, BATCH, LR, TEMPERATURE = 8, 8, 0.5, 1.0
_BLOCK = re.compile(r"<output of [^>]*>\n?(.*?)\n?</output of", re.S)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_TASK_AMOUNT = re.compile(r"(\d+\.\d{2}) EUR")


def amount_seen(messages: Sequence[Message]) -> Decimal | None:
    """The amount an agent is handed: the last number of the agent before it, else the task's amount."""
    user = messages[-1].content
    block = _BLOCK.search(user)
    found = _NUMBER.findall(block.group(1)) if block else _TASK_AMOUNT.findall(user)
    return Decimal(found[-1]) if found else None


def rule(agent: str) -> Callable[[Sequence[Message]], str]:
    """``agent``'s rule reader: its one operation on the amount it is handed."""

    def reply(messages: Sequence[Message]) -> str:
        x = amount_seen(messages)
        if x is None:
            return "no amount"
        if agent == "rounder":
            return str(x.quantize(Decimal("1"), ROUND_HALF_UP))
        if agent == "vat":
            return str((x * Decimal("1.2")).quantize(Decimal("0.01"), ROUND_HALF_UP))
        return f"EUR {x.quantize(Decimal('0.01'), ROUND_HALF_UP)}"

    return reply


def agents() -> list[Agent]:
    return [Agent(a, load_chat("fake/scripted", replies=rule(a)), system=f"You are the {a}.") for a in AGENTS]


def shuffled(seed: int) -> Callable[[Sequence[Task], int], list[Task]]:
    def schedule(tasks: Sequence[Task], round_: int) -> list[Task]:
        out = list(tasks)
        random.Random(seed * 1000 + round_).shuffle(out)
        return out

    return schedule


def run_team(team: Team, tasks: list[Task], seed: int, rounds: int, folder: Path) -> dict[str, Any]:
    """The team over ``rounds`` rounds (learning its order if it can), then one greedy pass."""
    engine = create_engine(f"sqlite:///{folder / f'run-{seed}-{time.monotonic_ns()}.db'}")
    ev = Evolver(team, tasks, engine=engine, batch_size=BATCH, schedule=shuffled(seed), progress=False)
    curve = [m.success_rate for m in ev.run(rounds)]
    served = ev.team
    if isinstance(served, OrderedTeam):
        served = OrderedTeam(agents(), policy=served.policy, serving=True)
    final = InProcess().run(Rollout(served, ev.env_factory, run="served", round=rounds + 1), tasks)
    out: dict[str, Any] = {"curve": curve, "last": curve[-1], "served": sum(e.success for e in final) / len(final)}
    if isinstance(ev.team, OrderedTeam):
        out["groups"] = ev.team.policy.table()
        out["orders_last_round"] = ev.log.completed()[rounds].orders
    engine.dispose()
    return out


def agreement(groups: list[dict[str, Any]], tasks: list[Task]) -> float:
    """Share of groups whose greedy order is the right one for the kind most of its example tasks are."""
    right = {t.prompt[:200]: list(t.meta["order"]) for t in tasks}
    known = [g for g in groups if g["example"] in right]
    return sum(g["order"] == right[g["example"]] for g in known) / len(known) if known else float("nan")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.seeds < 1 or args.rounds < 1:
        p.error("--seeds and --rounds must be >= 1")
    tasks = load_tasks(bundled_root() / "team_order.jsonl")
    embedder = CachedEmbedder(load_embedder("minilm"))
    folder = Path(tempfile.mkdtemp(prefix="team-order-"))
    started = time.time()
    per_seed: dict[str, list[dict[str, Any]]] = {"spec": [], "best_fixed": [], "learned": []}
    fixed_orders: dict[str, list[float]] = {}
    for seed in range(args.seeds):
        by_order = {}
        for order in itertools.permutations(AGENTS):
            a = {x.name: x for x in agents()}
            by_order[" > ".join(order)] = run_team(Team([a[n] for n in order]), tasks, seed, args.rounds, folder)
            fixed_orders.setdefault(" > ".join(order), []).append(by_order[" > ".join(order)]["last"])
        per_seed["spec"].append(by_order[" > ".join(AGENTS)])
        best = max(by_order, key=lambda o: (by_order[o]["last"], o == " > ".join(AGENTS)))
        per_seed["best_fixed"].append({**by_order[best], "order": best})
        team = OrderedTeam(
            agents(), lr=LR, temperature=TEMPERATURE, group_threshold=GROUP_THRESHOLD, embed=embedder.embed, seed=seed
        )
        learned = run_team(team, tasks, seed, args.rounds, folder)
        learned["agreement"] = agreement(learned["groups"], tasks)
        per_seed["learned"].append(learned)
        print(f"seed {seed}: spec {by_order[' > '.join(AGENTS)]['last']:.3f}, best fixed {best} "
              f"{by_order[best]['last']:.3f}, learned last {learned['last']:.3f} served {learned['served']:.3f} "
              f"agreement {learned['agreement']:.2f}", flush=True)  # fmt: skip
    results = {"machine": machine(), "seeds": args.seeds, "rounds": args.rounds, "tasks": len(tasks),
               "settings": {"lr": LR, "temperature": TEMPERATURE, "group_threshold": GROUP_THRESHOLD, "batch": BATCH},
               "seconds": round(time.time() - started, 1), "per_seed": per_seed, "fixed_orders": fixed_orders}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "team_order.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    flat = headline(per_seed)
    (args.out / "team_order.md").write_text(markdown(results, flat), encoding="utf-8")
    merge_summary(args.out / "summary.json", flat)
    return results


def headline(per_seed: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    flat: dict[str, float] = {}
    for cond, runs in per_seed.items():
        for what in ("last", "served"):
            i = seed_interval([r[what] for r in runs])
            flat |= {f"team_order_{cond}_{what}_mean": round(i.mean, 4), f"team_order_{cond}_{what}_ci_low": round(i.low, 4),
                     f"team_order_{cond}_{what}_ci_high": round(i.high, 4)}  # fmt: skip
    for base in ("spec", "best_fixed"):
        name = "fixed" if base == "spec" else "best_fixed"
        for what in ("last", "served"):
            d = paired_interval(
                baseline=[r[what] for r in per_seed[base]], treatment=[r[what] for r in per_seed["learned"]]
            )
            flat |= {f"team_order_learned_minus_{name}_{what}_mean": round(d.mean, 4),
                     f"team_order_learned_minus_{name}_{what}_ci_low": round(d.low, 4),
                     f"team_order_learned_minus_{name}_{what}_ci_high": round(d.high, 4)}  # fmt: skip
    flat["team_order_learned_agreement_mean"] = round(
        seed_interval([r["agreement"] for r in per_seed["learned"]]).mean, 4
    )
    return flat


def markdown(results: dict[str, Any], flat: dict[str, float]) -> str:
    n, seeds = results["rounds"], results["seeds"]
    lines = [
        "# Teams that learn their order",
        "",
        f"`python -m bench.team_order` on the price desk (`data/team_order.jsonl`, {results['tasks']} tasks, two kinds "
        f"whose right order differs), rule-reader agents, {n} rounds, {seeds} seeds, {results['seconds']:.0f} s. "
        "Success as a share of tasks; intervals are 95% Student-t over seeds; differences are paired by seed.",
        "",
        "| condition | last round | served (greedy pass) |",
        "|---|--:|--:|",
    ]
    for cond in ("spec", "best_fixed", "learned"):
        cells = [f"{flat[f'team_order_{cond}_{w}_mean']:.3f} [{flat[f'team_order_{cond}_{w}_ci_low']:.3f}, "
                 f"{flat[f'team_order_{cond}_{w}_ci_high']:.3f}]" for w in ("last", "served")]  # fmt: skip
        lines.append(f"| {cond} | {cells[0]} | {cells[1]} |")
    lines += ["", "| paired difference | last round | served |", "|---|--:|--:|"]
    for name in ("fixed", "best_fixed"):
        cells = [f"{flat[f'team_order_learned_minus_{name}_{w}_mean']:+.3f} [{flat[f'team_order_learned_minus_{name}_{w}_ci_low']:+.3f}, "
                 f"{flat[f'team_order_learned_minus_{name}_{w}_ci_high']:+.3f}]" for w in ("last", "served")]  # fmt: skip
        lines.append(
            f"| learned − {'spec order' if name == 'fixed' else 'best fixed order'} | {cells[0]} | {cells[1]} |"
        )
    lines += ["", "Every fixed order, last round (mean over seeds):", ""]
    lines += [f"- {o}: {sum(v) / len(v):.3f}" for o, v in results["fixed_orders"].items()]
    learned = results["per_seed"]["learned"]
    lines += ["", f"Learned order's agreement with the right order per group: {flat['team_order_learned_agreement_mean']:.2f} "
              "(mean over seeds). Seed 0's groups:", "", "| group | episodes | greedy order | example task |", "|--:|--:|---|---|"]  # fmt: skip
    for g in learned[0]["groups"]:
        lines.append(f"| {g['group']} | {g['episodes']} | {' > '.join(g['order'])} | {g['example'][:70]}… |")
    lines += [
        "",
        "Learning curves (success per round, seed 0): "
        + ", ".join(
            f"{c} {' '.join(f'{x:.2f}' for x in results['per_seed'][c][0]['curve'])}"
            for c in ("spec", "best_fixed", "learned")
        ),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
