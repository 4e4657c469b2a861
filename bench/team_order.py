"""Teams that learn their order: fixed orders against a learned one, on two bundled families and two readers.

Families (each designed and frozen with its seed before any run):

- ``price`` (``data/team_order.jsonl``, ``data/make_team_order.py``): a price desk of three agents (``rounder``,
  ``vat``, ``labeller``) and 32 tasks of two kinds whose right order differs: shelf tags round first, dinner
  bills add VAT first, the labeller last in both;
- ``registers`` (``data/team_order_registers.{jsonl,toml}``, ``data/make_team_order_registers.py``): a help desk
  of two clerks, each with a register in its instructions; the clerk whose register names the place must act
  last. It asks only for looking a number up, which SmolLM2-135M can do (the price desk's arithmetic it cannot).

Readers: ``rules`` (each agent applies its one rule to what it is handed: no model, so the figures measure the
order, not a model's reading) or ``local/smollm2`` (the agents' instructions and ``max_tokens`` as the family's
spec gives them, greedy). Conditions, chosen before any run:

- ``spec``: the chain in the order the spec lists the agents;
- ``best_fixed``: every fixed order run, the one with the best last round kept (in hindsight);
- ``learned``: ``OrderedTeam`` (``[team] order = "learned"``): orders drawn from Plackett–Luce over priorities
  per task group (MiniLM, ``group_threshold`` 0.6), learned from each episode's reward.

Each seed shuffles the tasks' order every round and seeds the draws; ``ROUNDS`` rounds of batches of 8.
``last`` is the last round's success (the learned team still draws orders there); ``served`` is one more
pass over every task in the greedy order (as ``evolve serve`` acts). Agreement: the share of the learned
policy's groups whose greedy order is the family's designed order for the kind of task its example is: what a
reader that does exactly what its instructions say needs (a model may do better in another order).

Run: python -m bench.team_order [--family price|registers] [--reader rules|local/smollm2] [--seeds 5]
[--rounds 8] [--resume]. Each (family, reader) writes bench/results/team_order[_registers][_smollm2].json after
every seed (``--resume`` runs only the seeds missing there), its keys into summary.json (``team_order_<condition>_...``
for the price desk with rules, ``team_order_registers[_smollm2]_<condition>_...`` for the others), and
bench/results/team_order.md is drawn again from every such file present.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import tempfile
import time
import tomllib
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
ROUNDS, BATCH, LR, TEMPERATURE = 8, 8, 0.5, 1.0
_BLOCK = re.compile(r"<output of [^>]*>\n?(.*?)\n?</output of", re.S)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_TASK_AMOUNT = re.compile(r"(\d+\.\d{2}) EUR")
_REGISTER_LINE = re.compile(r"^(.+): (\d+)$", re.M)
FAMILIES = {"price": "team_order", "registers": "team_order_registers"}  # family → its bundled files' stem
READERS = ("rules", "local/smollm2")


def amount_seen(messages: Sequence[Message]) -> Decimal | None:
    """The amount an agent is handed: the last number of the agent before it, else the task's amount."""
    user = messages[-1].content
    block = _BLOCK.search(user)
    found = _NUMBER.findall(block.group(1)) if block else _TASK_AMOUNT.findall(user)
    return Decimal(found[-1]) if found else None


def price_rule(agent: str) -> Callable[[Sequence[Message]], str]:
    """A price-desk agent's rule reader: its one operation on the amount it is handed."""

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


def register_rule(system: str) -> Callable[[Sequence[Message]], str]:
    """A clerk's rule reader: the number its register (the ``place: number`` lines of its instructions) gives
    the place the request names, else that the place is not in its register (what it was handed is ignored)."""
    register = dict(_REGISTER_LINE.findall(system))

    def reply(messages: Sequence[Message]) -> str:
        request = _BLOCK.sub("", messages[-1].content)
        found = [number for place, number in register.items() if place in request]
        return found[0] if found else "That place is not in my register."

    return reply


class Family:
    """A bundled team family: its tasks, its agents' names and instructions and its spec's ``max_tokens``."""

    def __init__(self, name: str) -> None:
        self.name, self.stem = name, FAMILIES[name]
        root = bundled_root()
        spec = tomllib.loads((root / f"{self.stem}.toml").read_text("utf-8"))
        self.tasks = load_tasks(root / f"{self.stem}.jsonl")
        self.systems = {a["name"]: a["system"] for a in spec["agents"]}
        self.names = tuple(self.systems)
        self.max_tokens = int(spec["model"]["max_tokens"])

    def agents(self, reader: str, chat: Any = None) -> list[Agent]:
        """The agents in the spec's order: rule readers, or ``chat`` (one model shared) with the spec's instructions."""
        if reader == "rules":
            rule = price_rule if self.name == "price" else lambda a: register_rule(self.systems[a])
            return [
                Agent(a, load_chat("fake/scripted", replies=rule(a)), system=f"You are the {a}.") for a in self.names
            ]
        params = {"max_tokens": self.max_tokens, "temperature": 0.0}
        return [Agent(a, chat, system=s, params=params) for a, s in self.systems.items()]


def shuffled(seed: int) -> Callable[[Sequence[Task], int], list[Task]]:
    def schedule(tasks: Sequence[Task], round_: int) -> list[Task]:
        out = list(tasks)
        random.Random(seed * 1000 + round_).shuffle(out)
        return out

    return schedule


def run_team(
    team: Team, remake: Callable[[], list[Agent]], tasks: list[Task], seed: int, rounds: int, folder: Path
) -> dict[str, Any]:
    """The team over ``rounds`` rounds (learning its order if it can), then one greedy pass."""
    engine = create_engine(f"sqlite:///{folder / f'run-{seed}-{time.monotonic_ns()}.db'}")
    ev = Evolver(team, tasks, engine=engine, batch_size=BATCH, schedule=shuffled(seed), progress=False)
    curve = [m.success_rate for m in ev.run(rounds)]
    served = ev.team
    if isinstance(served, OrderedTeam):
        served = OrderedTeam(remake(), policy=served.policy, serving=True)
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


def regime(family: str, reader: str) -> str:
    """The name of a (family, reader) run: its results file's stem and its summary keys' prefix."""
    return FAMILIES[family] + ("" if reader == "rules" else "_" + reader.split("/")[-1])


def one_seed(
    family: Family, reader: str, chat: Any, embedder: Any, seed: int, rounds: int, folder: Path
) -> dict[str, Any]:
    """Every fixed order and the learned one, for one seed."""
    by_order = {}
    for order in itertools.permutations(family.names):
        a = {x.name: x for x in family.agents(reader, chat)}
        by_order[" > ".join(order)] = run_team(
            Team([a[n] for n in order]), lambda: family.agents(reader, chat), family.tasks, seed, rounds, folder
        )
    spec = " > ".join(family.names)
    best = max(by_order, key=lambda o: (by_order[o]["last"], o == spec))
    team = OrderedTeam(
        family.agents(reader, chat), lr=LR, temperature=TEMPERATURE, group_threshold=GROUP_THRESHOLD,
        embed=embedder.embed, seed=seed,
    )  # fmt: skip
    learned = run_team(team, lambda: family.agents(reader, chat), family.tasks, seed, rounds, folder)
    learned["agreement"] = agreement(learned["groups"], family.tasks)
    print(f"seed {seed}: spec {by_order[spec]['last']:.3f}, best fixed {best} {by_order[best]['last']:.3f}, learned "
          f"last {learned['last']:.3f} served {learned['served']:.3f} agreement {learned['agreement']:.2f}", flush=True)  # fmt: skip
    return {"seed": seed, "fixed": by_order, "spec": spec, "best": best, "learned": learned}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", choices=sorted(FAMILIES), default="price")
    p.add_argument("--reader", choices=READERS, default="rules")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--resume", action="store_true", help="run only the seeds missing from this run's results file")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.seeds < 1 or args.rounds < 1:
        p.error("--seeds and --rounds must be >= 1")
    name = regime(args.family, args.reader)
    path = args.out / f"{name}.json"
    settings = {"family": args.family, "reader": args.reader, "rounds": args.rounds, "lr": LR,
                "temperature": TEMPERATURE, "group_threshold": GROUP_THRESHOLD, "batch": BATCH}  # fmt: skip
    seeds: list[dict[str, Any]] = []
    seconds = 0.0
    if args.resume and path.exists():
        kept = json.loads(path.read_text("utf-8"))
        if kept.get("settings") != settings:
            p.error(f"--resume: {path} was run with {kept.get('settings')}, not {settings}")
        seeds, seconds = kept["runs"], kept["seconds"]
    family = Family(args.family)
    chat = (
        None if args.reader == "rules" else load_chat(args.reader, max_new_tokens=family.max_tokens, batch_size=BATCH)
    )
    embedder = CachedEmbedder(load_embedder("minilm"))
    folder = Path(tempfile.mkdtemp(prefix="team-order-"))
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    done = {r["seed"] for r in seeds}
    for seed in [s for s in range(args.seeds) if s not in done]:  # a seed run elsewhere may fill a gap
        started = time.time()
        seeds.append(one_seed(family, args.reader, chat, embedder, seed, args.rounds, folder))
        seeds.sort(key=lambda r: r["seed"])
        seconds += time.time() - started
        results = {"machine": machine(), "regime": name, "settings": settings, "tasks": len(family.tasks),
                   "agents": list(family.names), "seconds": round(seconds, 1), "runs": seeds}  # fmt: skip
        path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    if not results:
        results = json.loads(path.read_text("utf-8"))
    merge_summary(args.out / "summary.json", headline(results))
    (args.out / "team_order.md").write_text(markdown(args.out), encoding="utf-8")
    return results


def headline(results: dict[str, Any]) -> dict[str, float]:
    """The run's summary keys: each condition's last and served success, the paired differences, the agreement."""
    runs, prefix = results["runs"], results["regime"]
    per = {"spec": [r["fixed"][r["spec"]] for r in runs], "best_fixed": [r["fixed"][r["best"]] for r in runs],
           "learned": [r["learned"] for r in runs]}  # fmt: skip
    flat: dict[str, float] = {}
    for cond, rows in per.items():
        for what in ("last", "served"):
            i = seed_interval([r[what] for r in rows])
            flat |= {f"{prefix}_{cond}_{what}_mean": round(i.mean, 4), f"{prefix}_{cond}_{what}_ci_low": round(i.low, 4),
                     f"{prefix}_{cond}_{what}_ci_high": round(i.high, 4)}  # fmt: skip
    for base, name in (("spec", "fixed"), ("best_fixed", "best_fixed")):
        for what in ("last", "served"):
            d = paired_interval(baseline=[r[what] for r in per[base]], treatment=[r[what] for r in per["learned"]])
            flat |= {f"{prefix}_learned_minus_{name}_{what}_mean": round(d.mean, 4),
                     f"{prefix}_learned_minus_{name}_{what}_ci_low": round(d.low, 4),
                     f"{prefix}_learned_minus_{name}_{what}_ci_high": round(d.high, 4)}  # fmt: skip
    flat[f"{prefix}_learned_agreement_mean"] = round(seed_interval([r["agreement"] for r in per["learned"]]).mean, 4)
    return flat


def markdown(folder: Path) -> str:
    """bench/results/team_order.md: one section per run whose results file is in ``folder``."""
    lines = [
        "# Teams that learn their order",
        "",
        "`python -m bench.team_order` (see its docstring): each bundled family, each reader, conditions chosen "
        "before any run. Success as a share of tasks; intervals are 95% Student-t over seeds; differences are "
        "paired by seed.",
    ]
    for stem in sorted({regime(f, r) for f in FAMILIES for r in READERS}):
        if (folder / f"{stem}.json").exists():
            lines += ["", *section(json.loads((folder / f"{stem}.json").read_text("utf-8")))]
    return "\n".join(lines) + "\n"


def section(results: dict[str, Any]) -> list[str]:
    flat, s, runs = headline(results), results["settings"], results["runs"]
    prefix = results["regime"]

    def cell(key: str, sign: str = "") -> str:
        return (
            f"{flat[key + '_mean']:{sign}.3f} [{flat[key + '_ci_low']:{sign}.3f}, {flat[key + '_ci_high']:{sign}.3f}]"
        )

    lines = [
        f"## {s['family']} family, {s['reader']} reader",
        "",
        f"`python -m bench.team_order --family {s['family']} --reader {s['reader']}`: {results['tasks']} tasks, agents "
        f"{' > '.join(results['agents'])} (the spec's order), {s['rounds']} rounds, {len(runs)} seeds "
        f"({', '.join(str(r['seed']) for r in runs)}), "
        f"{results['seconds']:.0f} s. Keys `{prefix}_*`.",
        "",
        "| condition | last round | served (greedy pass) |",
        "|---|--:|--:|",
    ]
    for cond in ("spec", "best_fixed", "learned"):
        lines.append(f"| {cond} | {cell(f'{prefix}_{cond}_last')} | {cell(f'{prefix}_{cond}_served')} |")
    lines += ["", "| paired difference | last round | served |", "|---|--:|--:|"]
    for name, label in (("fixed", "spec order"), ("best_fixed", "best fixed order")):
        key = f"{prefix}_learned_minus_{name}"
        lines.append(f"| learned − {label} | {cell(key + '_last', '+')} | {cell(key + '_served', '+')} |")
    lines += ["", "Every fixed order, last round (mean over seeds):", ""]
    for order in runs[0]["fixed"]:
        values = [r["fixed"][order]["last"] for r in runs]
        lines.append(f"- {order}: {sum(values) / len(values):.3f}")
    lines += ["", f"Learned order's agreement with the family's designed order per group (the order a reader needs "
              f"that does exactly what its instructions say): {flat[f'{prefix}_learned_agreement_mean']:.2f} (mean over seeds). "
              "Seed 0's groups:", "", "| group | episodes | greedy order | example task |", "|--:|--:|---|---|"]  # fmt: skip
    for g in runs[0]["learned"]["groups"]:
        lines.append(f"| {g['group']} | {g['episodes']} | {' > '.join(g['order'])} | {g['example'][:70]}… |")
    first = runs[0]
    curves = {
        "spec": first["fixed"][first["spec"]],
        "best_fixed": first["fixed"][first["best"]],
        "learned": first["learned"],
    }
    lines += ["", "Learning curves (success per round, seed 0): "
              + ", ".join(f"{c} {' '.join(f'{x:.2f}' for x in r['curve'])}" for c, r in curves.items())]  # fmt: skip
    return lines


if __name__ == "__main__":
    main()
