"""Teams by diversity, measured: accuracy and K* against team size, homogeneous against heterogeneous.

For each family and seed, two pools answer every task once (``evolve.teams.diagnose``):

- **homogeneous**: ``--copies`` copies of one agent (the family's prompt) sampled at ``--temperature``,
  each its own draw; a team of n is n of them (every disjoint group of n, averaged);
- **heterogeneous**: prompt variants of the same local model (``VARIANTS``: the family's prompt as it is,
  briefer, as an expert, answer-first), sampled alike; a memory variant (``--memory``, on by default: the
  family's agent recalling from a store trained one round on the same tasks, MemRL's protocol); and one
  variant per ``--extra-model``. A team of 2 or 4 is every ordered choice of them, averaged (a vote's tie
  goes to its first member, so order counts).

A team's answer is the majority of its members' normalised answers; its figures are the vote's accuracy,
its mean K* (Agent-Scaling, arXiv 2602.03794: ``evolve.teams.diversity``) over the tasks, and its
coverage (some member right). Every figure is a mean over seeds with a Student-t 95% interval, and
"2 diverse >= 16 homogeneous" is the paired per-seed difference (mean of the 2-member heterogeneous
teams minus the 16-copy team) with its interval: above, level (the interval holds 0) or below.

Families: ``format_rules`` (bundled: capitals and facts under output rules the task does not state) and
``bfcl_simple_python`` (BFCL v4 single calls, checked by BFCL's AST rules; needs ``bfcl-eval``).

Run: python -m bench.kstar [--families format_rules bfcl_simple_python] [--tasks N] [--copies 16]
     [--seeds 3] [--temperature 0.7] [--model local/smollm2] [--extra-model openai/<name> ...] [--no-memory]
Writes bench/results/kstar.{json,md}, bench/results/kstar_<family>.png and ``kstar_*`` keys in
bench/results/summary.json; families measured earlier with the same settings and not named again are kept.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from bench.common import machine, merge_summary
from bench.learning import load_model
from connectors import ChatClient, Embedder, Environment, load_embedder
from evolve import Agent, Evolver, MemoryView, Task, Team
from evolve.envs.tasks import TaskEnv, load_tasks
from evolve.intervals import paired_interval, seed_interval
from evolve.teams.compose import coverage, mean_kstar, vote_accuracy
from evolve.teams.diagnose import Diagnosis, diagnose
from memory import MemoryStore

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SIZES = (1, 2, 4, 8, 16)
DIVERSE_SIZES = (2, 4)
VARIANTS = {  # name: how the family's prompt is changed
    "as written": lambda s: s,
    "brief": lambda s: f"{s} Use as few words as you can.",
    "expert": lambda s: f"You are a meticulous expert. {s}",
    "answer first": lambda s: f"{s} Give the answer first, then stop.",
}


@dataclass(frozen=True)
class Family:
    """Tasks, the prompt they are answered under, sampling settings and the environment that checks them."""

    name: str
    tasks: Callable[[int], list[Task]]
    system: str
    params: dict[str, Any]
    env_factory: Callable[[list[Task]], Callable[[], Environment]]
    note: str
    tasks_by_default: int = 40


def families() -> dict[str, Callable[[], Family]]:
    def format_rules() -> Family:
        tasks = load_tasks(ROOT / "data" / "format_rules.jsonl")
        return Family("format_rules", lambda n: tasks[:n], "You are a helpful assistant.", {"max_tokens": 16},
                      lambda ts: lambda: TaskEnv(ts), "bundled: data/format_rules.jsonl (rules checker)")  # fmt: skip

    def bfcl_simple_python() -> Family:
        from bench.bfcl_learning import SYSTEM
        from evolve.envs.bfcl.single import BfclEnv, bfcl_tasks

        tasks = bfcl_tasks("simple_python")
        params = {"max_tokens": 64, "tool_choice": "required", "stop": ["\n\n"]}
        return Family("bfcl_simple_python", lambda n: tasks[:n], SYSTEM, params, lambda ts: lambda: BfclEnv(tasks),
                      "BFCL v4 simple_python (bfcl-eval), BFCL's AST checker", 24)  # fmt: skip

    return {"format_rules": format_rules, "bfcl_simple_python": bfcl_simple_python}


def pools(
    family: Family, chat: ChatClient, extra: Sequence[ChatClient], *, copies: int, temperature: float, seed: int
) -> tuple[list[Agent], list[Agent]]:
    """The homogeneous pool (copies of one agent) and the heterogeneous one (variants, other models)."""
    base = {**family.params, "temperature": temperature}
    same = [Agent(f"copy {i + 1:02d}", chat, system=family.system, params={**base, "seed": seed}, tool_rounds=2)
            for i in range(copies)]  # fmt: skip
    varied = [Agent(name, chat, system=change(family.system), params={**base, "seed": seed + 500}, tool_rounds=2)
              for name, change in VARIANTS.items()]  # fmt: skip
    varied += [
        Agent(m.name, m, system=family.system, params={**base, "seed": seed + 700}, tool_rounds=2) for m in extra
    ]
    return same, varied


def with_memory(
    family: Family,
    chat: ChatClient,
    embedder: Embedder,
    tasks: list[Task],
    folder: Path,
    *,
    temperature: float,
    seed: int,
) -> Agent:
    """The family's agent with a memory view: a fresh store trained by one round of that agent on the same
    tasks (MemRL's protocol: epochs over the tasks it is scored on), then recalled from while it answers."""
    store = MemoryStore(f"sqlite:///{folder / f'memory-{family.name}-{seed}.db'}", embedder=embedder)
    params = {**family.params, "temperature": temperature, "seed": seed + 900}
    agent = Agent("with memory", chat, system=family.system, params=params, memory=MemoryView(store), tool_rounds=2)
    Evolver(Team([agent]), tasks, memory=store, env_factory=family.env_factory(tasks), run=f"kstar-{seed}",
            batch_size=len(tasks), progress=False).run(rounds=1)  # fmt: skip
    return agent


def homogeneous(d: Diagnosis, n: int) -> dict[str, float]:
    """A team of n copies: every disjoint group of n, averaged."""
    groups = [list(range(i * n, (i + 1) * n)) for i in range(len(d.members) // n)]
    return _mean([_team(d, g) for g in groups])


def heterogeneous(d: Diagnosis, n: int) -> dict[str, float]:
    """A team of n variants: every ordered choice of n, averaged."""
    return _mean([_team(d, list(p)) for p in itertools.permutations(range(len(d.members)), n)])


def run_family(
    family: Family, chat: ChatClient, extra: Sequence[ChatClient], embedder: Embedder, *,
    tasks: int | None, copies: int, seeds: int, temperature: float, memory: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Every seed's two pools on the family's first ``tasks`` tasks (its own default when None), and the
    figures over seeds."""
    chosen = family.tasks(tasks or family.tasks_by_default)
    env = family.env_factory(chosen)
    per_seed: list[dict[str, Any]] = []
    for s in tqdm(range(seeds), desc=f"kstar {family.name}", leave=False):
        same, varied = pools(family, chat, extra, copies=copies, temperature=temperature, seed=1000 * (s + 1))
        if memory:
            with tempfile.TemporaryDirectory(prefix="evolve-kstar-") as folder:
                varied.append(with_memory(family, chat, embedder, chosen, Path(folder), temperature=temperature,
                                          seed=1000 * (s + 1)))  # fmt: skip
                dv = diagnose(varied, chosen, embedder=embedder, env_factory=env)
                varied[-1].memory.store.close()  # type: ignore[union-attr]
        else:
            dv = diagnose(varied, chosen, embedder=embedder, env_factory=env)
        dh = diagnose(same, chosen, embedder=embedder, env_factory=env)
        per_seed.append({
            "homogeneous": {n: homogeneous(dh, n) for n in SIZES if n <= copies},
            "heterogeneous": {n: heterogeneous(dv, n) for n in DIVERSE_SIZES if n <= len(varied)},
            "members": dv.accuracy, "copies_accuracy": float(np.mean(list((dh.accuracy or {}).values()))),
        })  # fmt: skip
    variants = [a.name for a in varied]
    out: dict[str, Any] = {"tasks": len(chosen), "note": family.note, "variants": variants, "seeds": per_seed}
    for kind in ("homogeneous", "heterogeneous"):
        out[kind] = {
            n: {k: _interval([p[kind][n][k] for p in per_seed]) for k in ("accuracy", "kstar", "coverage")}
            for n in per_seed[0][kind]
        }
    if 2 in out["heterogeneous"] and 16 in out["homogeneous"]:
        diff = paired_interval(baseline=[p["homogeneous"][16]["accuracy"] for p in per_seed],
                               treatment=[p["heterogeneous"][2]["accuracy"] for p in per_seed])  # fmt: skip
        verdict = "above" if diff.low > 0 else "below" if diff.high < 0 else "level"
        out["diverse2_vs_homog16"] = {**_as_dict(diff), "verdict": verdict}
    return out


def summary_keys(result: dict[str, Any]) -> dict[str, float | str]:
    flat: dict[str, float | str] = {}
    for fam, r in result["families"].items():
        for kind, short in (("homogeneous", "homog"), ("heterogeneous", "hetero")):
            for n, figs in r[kind].items():
                for k, iv in figs.items():
                    flat[f"kstar_{fam}_{short}_{n}_{k}"] = round(iv["mean"], 4)
                flat[f"kstar_{fam}_{short}_{n}_accuracy_ci_low"] = round(figs["accuracy"]["low"], 4)
                flat[f"kstar_{fam}_{short}_{n}_accuracy_ci_high"] = round(figs["accuracy"]["high"], 4)
        if "diverse2_vs_homog16" in r:
            d = r["diverse2_vs_homog16"]
            flat[f"kstar_{fam}_diverse2_minus_homog16_mean"] = round(d["mean"], 4)
            flat[f"kstar_{fam}_diverse2_minus_homog16_ci_low"] = round(d["low"], 4)
            flat[f"kstar_{fam}_diverse2_minus_homog16_ci_high"] = round(d["high"], 4)
            flat[f"kstar_{fam}_diverse2_vs_homog16"] = d["verdict"]
    return flat


def markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        "# Teams by diversity: accuracy and K* against team size", "",
        f"`python -m bench.kstar` on {result['machine']['cpu_count']} cores: {s['model']} at temperature "
        f"{s['temperature']}, {s['copies']} copies; {s['seeds']} seeds "
        "(mean [95% interval]). A team answers by majority vote over normalised answers (ties to its first member).",
    ]  # fmt: skip
    for fam, r in result["families"].items():
        variants = ", ".join(r.get("variants") or VARIANTS)
        lines += ["", f"## {fam}", "", f"{r['tasks']} tasks; {r['note']}. Heterogeneous pool: {variants}.", "",
                  "| team | members | vote accuracy | K* | coverage (some member right) |", "|---|--:|--:|--:|--:|"]  # fmt: skip
        for kind in ("homogeneous", "heterogeneous"):
            for n, f in r[kind].items():
                acc, k, cov = f["accuracy"], f["kstar"], f["coverage"]
                lines.append(f"| {kind} | {n} | {acc['mean']:.3f} [{acc['low']:.3f}, {acc['high']:.3f}] | "
                             f"{k['mean']:.2f} | {cov['mean']:.3f} |")  # fmt: skip
        if "diverse2_vs_homog16" in r:
            d = r["diverse2_vs_homog16"]
            lines += ["", f"2 diverse − 16 homogeneous (paired per seed): {d['mean']:+.3f} [{d['low']:+.3f}, "
                          f"{d['high']:+.3f}]: **{d['verdict']}**."]  # fmt: skip
        lines += ["", f"![{fam}](kstar_{fam}.png)"]
    return "\n".join(lines) + "\n"


def plot(fam: str, r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for kind, style in (("homogeneous", "o-"), ("heterogeneous", "s--")):
        ns = [int(n) for n in r[kind]]
        acc = [r[kind][n]["accuracy"] for n in r[kind]]
        a.errorbar(ns, [x["mean"] for x in acc], yerr=[[x["mean"] - x["low"] for x in acc], [x["high"] - x["mean"] for x in acc]],
                   fmt=style, capsize=3, label=kind)  # fmt: skip
        b.plot([r[kind][n]["kstar"]["mean"] for n in r[kind]], [x["mean"] for x in acc], style, label=kind)
        for n in r[kind]:
            b.annotate(str(n), (r[kind][n]["kstar"]["mean"], r[kind][n]["accuracy"]["mean"]), fontsize=8)
    a.set_xscale("log", base=2)
    a.set_xlabel("agents on the team")
    a.set_ylabel("vote accuracy")
    b.set_xlabel("K* (effective channels)")
    a.legend()
    b.legend()
    fig.suptitle(f"{fam}: accuracy against agents and against K*")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(
    names: Sequence[str], *, tasks: int | None, copies: int, seeds: int, temperature: float, model: str,
    extra_models: Sequence[str] = (), chat: ChatClient | None = None, embedder: Embedder | None = None,
    out: Path = RESULTS, memory: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """Run ``names`` and write the pages; families measured earlier and not named here are kept."""
    known = families()
    chat = chat or load_model(model, None, batch_size=max(copies, len(VARIANTS)))
    extra = [load_model(m, None, batch_size=8) for m in extra_models]
    embedder = embedder or load_embedder("minilm")
    start = time.perf_counter()
    result: dict[str, Any] = {
        "machine": machine(),
        "settings": {
            "model": model,
            "temperature": temperature,
            "copies": copies,
            "seeds": seeds,
            "tasks": tasks,
        },  # fmt: skip
        "families": _earlier(
            out / "kstar.json", {"model": model, "temperature": temperature, "copies": copies, "seeds": seeds}
        ),  # fmt: skip
    }
    for name in names:
        result["families"][name] = run_family(known[name](), chat, extra, embedder, tasks=tasks, copies=copies,
                                              seeds=seeds, temperature=temperature, memory=memory)  # fmt: skip
    result["seconds"] = round(time.perf_counter() - start, 1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "kstar.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    (out / "kstar.md").write_text(markdown(result), encoding="utf-8")
    for fam, r in result["families"].items():
        plot(fam, r, out / f"kstar_{fam}.png")
    merge_summary(out / "summary.json", summary_keys(result))
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.kstar", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--families", nargs="+", choices=sorted(families()), default=["format_rules", "bfcl_simple_python"])
    p.add_argument("--tasks", type=int, default=None, help="tasks per family (default: 40, BFCL's 24)")
    p.add_argument("--copies", type=int, default=16, help="copies in the homogeneous pool (default 16)")
    p.add_argument("--seeds", type=int, default=3, help="seeds (default 3)")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature of every agent (default 0.7)")
    p.add_argument("--model", default="local/smollm2", help="the agents' model (default local/smollm2)")
    p.add_argument("--extra-model", action="append", default=[], help="another model as one more heterogeneous variant")
    p.add_argument("--memory", action=argparse.BooleanOptionalAction, default=True,
                   help="a variant with memory trained one round on the tasks (default on)")  # fmt: skip
    args = p.parse_args(argv)
    result = run(args.families, tasks=args.tasks, copies=args.copies, seeds=args.seeds, temperature=args.temperature,
                 model=args.model, extra_models=args.extra_model, memory=args.memory)  # fmt: skip
    print(markdown(result))
    return result


def _earlier(path: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The families of an earlier run with the same settings (JSON's keys back to team sizes), else none."""
    if not path.exists():
        return {}
    earlier = json.loads(path.read_text(encoding="utf-8"))
    if {k: earlier["settings"].get(k) for k in settings} != settings:
        return {}
    for r in earlier["families"].values():
        for kind in ("homogeneous", "heterogeneous"):
            r[kind] = {int(n): v for n, v in r[kind].items()}
    return dict(earlier["families"])


def _team(d: Diagnosis, members: list[int]) -> dict[str, float]:
    return {"accuracy": vote_accuracy(d, members), "kstar": mean_kstar(d, members), "coverage": coverage(d, members)}


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}


def _interval(values: list[float]) -> dict[str, float]:
    return _as_dict(seed_interval(values))


def _as_dict(iv: Any) -> dict[str, float]:
    return {"mean": iv.mean, "low": iv.low, "high": iv.high}


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
