"""Learning under wrong ratings: a share ρ of the ratings is wrong, success is scored by the true checker.

Deployments do not have a clean checker: people rate answers by mistake or carelessly. Here every episode's
verdict is flipped with probability ρ before memory sees it (a success rated bad, a failure rated good), in
what is reinforced and in what is written: a flipped failure is stored as a success with its wrong answer,
a flipped success as a failure whose feedback reveals nothing ("Wrong."). Success is always the true
checker's. The flips are drawn per (seed, epoch, task) from one uniform number, so every condition sees the
same wrong ratings, and the flips at ρ = 0.1 are among those at ρ = 0.2 (``evolve.envs.ratings.NoisyRatings``).

Conditions (``bench.learning_conditions``): no memory, similarity-only, Q-memory, Q in context. Families: the
four bundled look-alike families (8 epochs of 24 tasks, paraphrases on) and BFCL ``simple_python`` and
``multiple`` (3 epochs over 32 tasks of the category, the ``bench.bfcl_learning`` full profile's; its
recall settings). The reader is the rule (``--reader rule``, default): it answers with what the best
recalled memory shows (``bench.ablations.oracle_reply``: a success's answer, a failure's revealed answer or
call), so a figure measures what memory hands the model, not the model's reading of it; ``--reader
local/smollm2`` puts the real model back (hours on 2 cores: run a family or a ρ at a time, the cells merge).

Per cell: success in the last epoch, at epochs 2 and 4, the area under the curve (mean success over epochs)
and the share solved at least once, with 95% intervals over seeds, and Q − similarity paired by seed.

Another Q update: ``--alpha-schedule visits --alpha-floor F`` runs every memory condition with
``MemoryConfig.alpha_schedule="visits"`` (step ``max(F, 1/(n + 2))`` after n rewards) instead of today's
constant α; its files and summary keys carry ``_visits<F in hundredths>`` (``noise_visits10.json``,
``…_rule_visits10``), so the constant rule's results are never touched. ``python -m bench.noise_alpha`` pairs
the two by seed.

Run: python -m bench.noise [--families ...] [--conditions ...] [--rhos 0 0.1 0.2 0.3] [--seeds 5]
     [--reader rule | local/smollm2] [--alpha-schedule constant | visits --alpha-floor F] [--out bench/results]
Writes bench/results/noise.{json,md} and noise_<family>.png (a model's run: noise_<model>.*) and the noise_*
keys of bench/results/summary.json (the rule reader's end in ``_rule``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from bench.common import machine, merge_summary
from bench.learning_conditions import BY_NAME, ENVS, EnvSpec, OptimizerSettings, build_evolver, seed_order
from bench.learning_report import cell_metrics
from bench.noise_report import markdown, plot_family, summary_keys
from connectors import ChatClient, ConfigError, Embedder, Message, load_chat, load_embedder
from evolve import Task
from evolve.envs.ratings import NoisyRatings, check_probability
from memory import MemoryConfig
from memory.config import AlphaSchedule

RESULTS = Path(__file__).resolve().parent / "results"
BUNDLED = ("facility_codes", "lookalikes", "procedures", "changing_facts")
BFCL = ("bfcl_simple_python", "bfcl_multiple")
FAMILIES = BUNDLED + BFCL
CONDITIONS = ("no_memory", "similarity", "q_memory", "q_context")
RHOS = (0.0, 0.1, 0.2, 0.3)
EPOCHS = {"bundled": 8, "bfcl": 3}
BFCL_TASKS = 32


_OUTCOME = re.compile(r"^Outcome: (success|failure)$", re.M)
_ANSWER = re.compile(r"^Answer given: (.+)$", re.M)
_CALLED = re.compile(r"^Called (.+?) -> ", re.M)
_REVEALED = re.compile(r"(?:The expected answer is: (.+?)\.?$|A correct call: (.+?)$|Correct calls: (.+?)$)", re.M)


def rule_reply(messages: Sequence[Message]) -> str:
    """What the best recalled memory shows (experiences are rendered best last): a success's answer or calls,
    a failure's revealed answer or call; "unknown" without one. BFCL's calls are answered as ``[f(x=1)]``."""
    text = messages[-1].content
    outcomes = list(_OUTCOME.finditer(text))
    if not outcomes:
        return "unknown"
    best = text[outcomes[-1].start() : text.find("</experience>", outcomes[-1].start())]
    if outcomes[-1].group(1) == "success":
        calls = _CALLED.findall(best)
        if calls:
            return "[" + ", ".join(calls) + "]"
        found = _ANSWER.search(best)
        return found.group(1).strip() if found else "unknown"
    revealed = _REVEALED.search(best)
    if revealed is None:
        return "unknown"
    answer, call, listed = revealed.groups()
    return answer.strip() if answer else f"[{call.strip()}]" if call else str(listed).strip()


def family_env(name: str) -> tuple[EnvSpec, Callable[[int], list[Task]], int]:
    """A family's environment, its tasks for a seed and its epochs."""
    if name in BUNDLED:
        env = ENVS[name]()
        tasks = env.tasks(None)
        return env, lambda seed: seed_order(tasks, seed), EPOCHS["bundled"]
    if name in BFCL:
        from bench.bfcl_learning import category_env
        from bench.bfcl_splits import split
        from evolve import bfcl_tasks

        category = name.removeprefix("bfcl_")
        everything = bfcl_tasks(category)
        return (
            category_env(category, everything),
            lambda seed: split(everything, BFCL_TASKS, 1, seed=seed)[0],  # the train side of the split
            EPOCHS["bfcl"],
        )
    raise ConfigError(f"unknown family {name!r}; expected one of {list(FAMILIES)}")


def run_seed(
    env: EnvSpec, cond: str, tasks: Sequence[Task], rho: float, seed: int, epochs: int, *,
    chat: ChatClient, embedder: Embedder, folder: Path, schedule: AlphaSchedule = "constant",
    floor: float = MemoryConfig.alpha_floor,
) -> dict[str, Any]:  # fmt: skip
    """One (family, condition, ρ, seed): ``epochs`` rounds with the noisy rater; true rewards per epoch.
    ``schedule``, ``floor``: the memory's Q update (``MemoryConfig.alpha_schedule``, ``alpha_floor``)."""
    here = folder / f"{env.name}-{cond}-{rho}-{seed}"
    here.mkdir(parents=True)
    condition = replace(BY_NAME[cond], alpha_schedule=schedule, alpha_floor=floor)
    evolver, store = build_evolver(
        env, condition, tasks, chat=chat, embedder=embedder, folder=here, optimizer=OptimizerSettings(),
        batch_size=len(tasks), seed=seed, paraphrases=True,
    )  # fmt: skip
    rated = NoisyRatings(evolver.env_factory, rho=rho, seed=seed)
    evolver.env_factory = rated
    rewards, started = [], time.perf_counter()
    try:
        for epoch in range(1, epochs + 1):
            evolver.run_round(epoch)
            rewards.append(rated.true_rewards([t.id for t in tasks], epoch - 1))
        size = len(store.items()) if store is not None else 0
    finally:
        if store is not None:
            store.close()
    out = cell_metrics(rewards)
    return {**out, **curve_points(out["per_epoch"]), "flips": rated.flips, "memory_size": size,
            "seconds": round(time.perf_counter() - started, 2)}  # fmt: skip


def curve_points(per_epoch: Sequence[float]) -> dict[str, float | None]:
    """Speed of learning: success at epochs 2 and 4 (None past the run) and the area under the curve."""
    at = {f"epoch{e}": (round(float(per_epoch[e - 1]), 4) if len(per_epoch) >= e else None) for e in (2, 4)}
    return {**at, "auc": round(float(np.mean(per_epoch)), 4)}


def run(
    families: Sequence[str], conditions: Sequence[str], rhos: Sequence[float], seeds: int, *,
    chat: ChatClient, embedder: Embedder, reader: str, earlier: Mapping[str, Any] | None = None, progress: bool = True,
    schedule: AlphaSchedule = "constant", floor: float = MemoryConfig.alpha_floor,
) -> dict[str, Any]:  # fmt: skip
    """Every (family, condition, ρ) over ``seeds`` seeds; cells of ``earlier`` (a report of the same reader,
    seeds and Q update) are kept unless run again. No memory learns nothing from ratings: it runs at ρ = 0 only."""
    result: dict[str, Any] = {"reader": reader, "seeds": list(range(seeds)), "families": {}}
    if schedule != "constant":
        result.update(alpha_schedule=schedule, alpha_floor=floor)
    for name, cells in (earlier or {}).get("families", {}).items():
        result["families"][name] = json.loads(json.dumps(cells))
    plan = [(f, c, r) for f in families for c in conditions for r in rhos if c != "no_memory" or r == 0.0]
    bar = tqdm(total=len(plan) * seeds, desc="noise", unit="run", disable=not progress)
    with tempfile.TemporaryDirectory(prefix="evolve-noise-") as tmp:
        for family in families:
            env, tasks_of, epochs = family_env(family)
            into = result["families"].setdefault(family, {"cells": {}})
            into.update(epochs=epochs, tasks=len(tasks_of(0)))
            for f, cond, rho in plan:
                if f != family:
                    continue
                per_seed = []
                for seed in range(seeds):
                    per_seed.append(run_seed(env, cond, tasks_of(seed), rho, seed, epochs, chat=chat,
                                             embedder=embedder, folder=Path(tmp), schedule=schedule,
                                             floor=floor))  # fmt: skip
                    bar.update(1)
                into["cells"].setdefault(cond, {})[rho_key(rho)] = per_seed
    bar.close()
    return result


def alpha_tag(schedule: str, floor: float) -> str:
    """What a Q update adds to the files' and keys' names: nothing for today's constant α, ``_visits10`` for
    ``"visits"`` with floor 0.10."""
    return "" if schedule == "constant" else f"_{schedule}{round(floor * 100):02d}"


def rho_key(rho: float) -> str:
    """ρ as the reports and keys name it: 0.2 → ``"rho2"`` (tenths)."""
    return f"rho{round(rho * 10):d}"


def reader_chat(reader: str) -> ChatClient:
    """The rule reader (``oracle_reply``) or a model by name."""
    if reader == "rule":
        return load_chat("fake/scripted", replies=rule_reply)
    if reader.startswith("local/"):
        return load_chat(reader, batch_size=24, threads=os.cpu_count())
    return load_chat(reader)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(prog="python -m bench.noise", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    p.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=list(CONDITIONS))
    p.add_argument("--rhos", nargs="+", type=float, default=list(RHOS), metavar="RHO")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--reader", default="rule", help="rule (reads what the best memory shows) or a chat model")
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument(
        "--alpha-schedule",
        choices=("constant", "visits"),
        default="constant",
        help="the memory's Q update: constant α (today's) or max(floor, 1/(visits + 2))",
    )
    p.add_argument(
        "--alpha-floor", type=float, default=None, help=f"the floor of 'visits' ({MemoryConfig.alpha_floor})"
    )
    p.add_argument("--fresh", action="store_true", help="drop the cells of an earlier report of this reader")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    try:
        rhos = [check_probability("--rhos", r) for r in args.rhos]
    except ConfigError as e:
        p.error(str(e))
    if args.seeds < 2:
        p.error("--seeds must be >= 2: every figure carries an interval over seeds")
    if args.alpha_floor is not None and args.alpha_schedule != "visits":
        p.error("--alpha-floor is the floor of --alpha-schedule visits; the constant α has none")
    args.alpha_floor = MemoryConfig.alpha_floor if args.alpha_floor is None else args.alpha_floor
    try:
        MemoryConfig(alpha_schedule=args.alpha_schedule, alpha_floor=args.alpha_floor)
    except ConfigError as e:
        p.error(str(e))
    tag = alpha_tag(args.alpha_schedule, args.alpha_floor)
    suffix, stem = (part + tag for part in reader_names("noise", args.reader))
    path = args.out / f"{stem}.json"
    earlier = None if args.fresh or not path.exists() else json.loads(path.read_text(encoding="utf-8"))
    if earlier is not None and earlier.get("seeds") != list(range(args.seeds)):
        p.error(f"{path} holds {len(earlier['seeds'])} seeds, not {args.seeds}: pass --fresh to start over")
    from bench.ablations import CachedEmbedder

    started = time.perf_counter()
    chat, embedder = reader_chat(args.reader), CachedEmbedder(load_embedder(args.embedder))
    result = run(args.families, args.conditions, rhos, args.seeds, chat=chat, embedder=embedder,
                 reader=args.reader, earlier=earlier, progress=not args.quiet, schedule=args.alpha_schedule,
                 floor=args.alpha_floor)  # fmt: skip
    result.update(machine=machine(), seconds=round(time.perf_counter() - started, 1), suffix=suffix)
    write_report(result, args.out, stem, markdown=markdown, plot=plot_family, keys=summary_keys)
    return result


def reader_names(bench: str, reader: str) -> tuple[str, str]:
    """A run's summary-key suffix and file stem: the rule reader's keys end in ``_rule`` and its files are
    ``<bench>.*``; a model's keys carry no suffix and its files are ``<bench>_<model>.*``."""
    if reader == "rule":
        return "_rule", bench
    return "", f"{bench}_" + re.sub(r"\W+", "_", reader.split("/")[-1])


def write_report(
    result: Mapping[str, Any], out: Path, stem: str, *,
    markdown: Callable[[Mapping[str, Any]], str], plot: Callable[[Mapping[str, Any], str, Path], Path],
    keys: Callable[[Mapping[str, Any]], dict[str, float]],
) -> None:  # fmt: skip
    """``<stem>.json`` and ``.md``, a PNG per family, the summary keys merged; the markdown printed."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (out / f"{stem}.md").write_text(markdown(result), encoding="utf-8")
    for family in result["families"]:
        plot(result, family, out / f"{stem}_{family}.png")
    merge_summary(out / "summary.json", keys(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
