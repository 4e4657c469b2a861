"""Ablations of Q-memory's knobs on every bundled family: what each one does to success, over seeds.

One knob moves at a time from the bundled settings (k1 = 10, k2 = 1, δ = 0.5, λ = 0.5, α = 0.3, ε = 0,
centred rewards, failure memories holding the answer given and the feedback, one Q per memory): λ,
k1, k2, δ, α, ε, reward centring, what a failure memory stores and Q in context
(``RetrievalConfig.context_q``: a memory's Q is what it earned for the task at hand) and, with it, what
a memory's Q is for a task that has not rewarded it (``context_start``: its stored Q, or Q_init). Each point runs 8 epochs of a family's 24 tasks with
paraphrases, over 5 seeds (task order, paraphrase choice, ε draws), and reports last-epoch and
cumulative success with 95% intervals.

The reader is the ``oracle`` by default: it answers with what the best recalled memory shows (the
answer a success gave, the answer a failure's feedback revealed) and "unknown" without one, so every
figure measures recall alone, not a model's reading of it. ``--reader local/smollm2`` puts the real
model back (about 10 s an epoch instead of 0.1 s).

Run: python -m bench.ablations [--knobs lam k1 ...] [--families ...] [--seeds 5] [--reader oracle]
Writes bench/results/ablations.{json,md}, bench/results/ablations_<family>.png and the ablation_* keys
of bench/results/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from bench.ablations_report import markdown, plot_family, summary_keys
from bench.common import machine, merge_summary
from bench.learning_conditions import ENVS, EnvSpec, seed_order
from bench.learning_report import cell_metrics, seed_cell
from connectors import ChatClient, Embedder, Message, ScriptedChat, load_chat, load_embedder
from evolve import Agent, Evolver, MemoryView, Task, Team, paraphrase_schedule
from evolve.evolver import centred, raw
from memory import MemoryConfig, MemoryStore, RetrievalConfig
from memory.config import CONTEXT_STARTS

RESULTS = Path(__file__).resolve().parent / "results"
FAMILIES = ("facility_codes", "changing_facts", "procedures", "lookalikes")
EPOCHS = 8


@dataclass(frozen=True)
class Point:
    """One setting: the bundled one with a knob moved."""

    lam: float = 0.5
    k1: int = 10
    k2: int = 1
    delta: float = 0.5
    alpha: float = 0.3
    epsilon: float = 0.0
    reward: str = "centred"
    failure_memory: str = "both"  # the default before 2026-11-26, around which these ablations were measured
    context_q: bool = False
    context_start: str = "global"

    def config(self) -> MemoryConfig:
        retrieval = RetrievalConfig(
            k1=self.k1, k2=self.k2, delta=self.delta, lam=self.lam, epsilon=self.epsilon, context_q=self.context_q,
            context_start=self.context_start,  # type: ignore[arg-type]
        )  # fmt: skip
        keeps = FAILURE_CONTENT[self.failure_memory]
        return MemoryConfig(retrieval=retrieval, alpha=self.alpha, failure_keeps=keeps)  # type: ignore[arg-type]


FAILURE_CONTENT = {"both": "both", "answer": "attempt", "feedback": "feedback"}
"""The failure_memory knob's values (as the results name them) → ``MemoryConfig.failure_keeps``."""


BASE = Point()
KNOBS: dict[str, tuple[Any, ...]] = {
    "lam": (0.0, 0.25, 0.5, 0.75, 1.0),
    "k1": (1, 3, 10, 30),
    "k2": (1, 2, 3, 5),
    "delta": (0.0, 0.3, 0.5, 0.7, 0.85),
    "alpha": (0.1, 0.3, 0.6, 1.0),
    "epsilon": (0.0, 0.1, 0.2, 0.4),
    "reward": ("centred", "raw"),
    "failure_memory": tuple(FAILURE_CONTENT),
    "context_q": (False, True),
    "context_start": CONTEXT_STARTS,
}
"""Knob → the values it takes (the bundled value among them); k1 values below k2 are skipped."""

_OUTCOME = re.compile(r"Outcome: (success|failure)")
_GIVEN = re.compile(r"Answer given: (.+)")
_REVEALED = re.compile(r"The expected answer is: (.+?)\.?$", re.MULTILINE)


def oracle_reply(messages: Sequence[Message]) -> str:
    """What the best recalled memory shows: a success's answer, a failure's revealed answer, or "unknown".

    Experiences are rendered best last (``evolve.agent.render_experiences``), so the last one is read."""
    text = messages[-1].content
    outcomes = list(_OUTCOME.finditer(text))
    if not outcomes:
        return "unknown"
    best = text[outcomes[-1].start() :]
    found = (_GIVEN if outcomes[-1].group(1) == "success" else _REVEALED).search(best)
    return found.group(1).strip() if found else "unknown"


class CachedEmbedder:
    """An embedder that embeds each distinct text once: a family has 120 phrasings, read thousands of times."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self._seen: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        new = list(dict.fromkeys(t for t in texts if t not in self._seen))
        if new:
            self._seen.update(zip(new, np.asarray(self.inner.embed(new), dtype=np.float32), strict=True))
        return np.stack([self._seen[t] for t in texts]) if texts else np.empty((0, self.dim), dtype=np.float32)


def run_point(
    env: EnvSpec, tasks: Sequence[Task], point: Point, seed: int, *, chat: ChatClient, embedder: Embedder, folder: Path
) -> dict[str, Any]:
    """8 epochs (``EPOCHS``) of one family at one setting and seed; the epochs × tasks rewards' metrics."""
    url = f"sqlite:///{folder / f'{env.name}-{len(list(folder.iterdir()))}.db'}"
    with MemoryStore(url, embedder=embedder, config=point.config(), seed=seed) as store:
        params = {"max_tokens": env.max_tokens, "temperature": 0.0, "seed": seed}
        agent = Agent("solver", chat, system=env.system, memory=MemoryView(store), params=params)
        ordered = seed_order(tasks, seed)
        evolver = Evolver(
            Team([agent]),
            ordered,
            memory=store,
            run="ablation",
            batch_size=len(ordered),
            schedule=paraphrase_schedule(seed),
            memory_reward=centred if point.reward == "centred" else raw,
            progress=False,
        )
        rewards, rounds, started = [], [], time.perf_counter()
        for epoch in range(1, EPOCHS + 1):
            rounds.append(evolver.run_round(epoch))
            by_task = {row["task_id"]: float(row["reward"]) for row in evolver.log.round_rows(epoch)}
            rewards.append([by_task.get(t.id, 0.0) for t in ordered])
    tokens = sum(m.tokens for m in rounds)
    return {
        **cell_metrics(rewards),
        "memory_size": rounds[-1].memory_size,
        "errors": sum(m.errors for m in rounds),
        **dict.fromkeys(("tokens", "episode_tokens"), tokens),
        **dict.fromkeys(("optimizer_tokens", "prompt_updates"), 0),
        "seconds": round(time.perf_counter() - started, 1),
    }


def points_of(
    knobs: Sequence[str], *, base: Point = BASE, ladder: Mapping[str, Sequence[Any]] = KNOBS
) -> list[tuple[str, Any, Point]]:
    """(knob, value, setting) for every value of every knob, ``base`` with that knob moved; settings with
    k1 below k2 are skipped."""
    out = []
    for knob in knobs:
        for value in ladder[knob]:
            point = replace(base, **{knob: value})
            if point.k1 >= point.k2:
                out.append((knob, value, point))
    return out


def parse_setting(text: str) -> tuple[str, tuple[Any, ...]]:
    """``"lam=0,0.5"`` → ``("lam", (0.0, 0.5))``, each value of the knob's type; ValueError otherwise."""
    knob, sep, values = text.partition("=")
    if not sep or knob not in KNOBS or not values:
        raise ValueError(f"expected KNOB=VALUE[,VALUE...] with KNOB one of {list(KNOBS)}, got {text!r}")
    kind = type(getattr(BASE, knob))
    if kind is bool:
        if not set(values.split(",")) <= {"True", "False"}:
            raise ValueError(f"{knob} is True or False, got {values!r}")
        parsed: tuple[Any, ...] = tuple(v == "True" for v in values.split(","))
    else:
        parsed = tuple(kind(v) for v in values.split(","))
    if knob == "reward" and not set(parsed) <= {"centred", "raw"}:
        raise ValueError(f"reward is 'centred' or 'raw', got {values!r}")
    if knob == "failure_memory" and not set(parsed) <= set(FAILURE_CONTENT):
        raise ValueError(f"failure_memory is one of {tuple(FAILURE_CONTENT)}, got {values!r}")
    if knob == "context_start" and not set(parsed) <= set(CONTEXT_STARTS):
        raise ValueError(f"context_start is one of {CONTEXT_STARTS}, got {values!r}")
    return knob, parsed


def run(
    families: Sequence[str],
    knobs: Sequence[str],
    seeds: int,
    *,
    chat: ChatClient,
    embedder: Embedder,
    reader: str,
    base: Point = BASE,
    ladder: Mapping[str, Sequence[Any]] = KNOBS,
    progress: bool = True,
) -> dict[str, Any]:
    """Every (family, knob value) over ``seeds`` seeds; a setting shared by several knobs runs once."""
    result: dict[str, Any] = {"reader": reader, "epochs": EPOCHS, "seeds": list(range(seeds)), "base": vars(base)}
    result["families"] = {}
    plan = points_of(knobs, base=base, ladder=ladder)
    cache: dict[tuple[str, Point], dict[str, Any]] = {}
    bar = tqdm(total=len(families) * len({p for _, _, p in plan}) * seeds, desc="ablations", disable=not progress)
    with tempfile.TemporaryDirectory(prefix="evolve-ablations-") as tmp:
        for family in families:
            env = ENVS[family]()
            tasks = env.tasks(None)
            knob_cells: dict[str, dict[str, Any]] = {}
            for knob, value, point in plan:
                if (family, point) not in cache:
                    per_seed = []
                    for seed in range(seeds):
                        per_seed.append(
                            run_point(env, tasks, point, seed, chat=chat, embedder=embedder, folder=Path(tmp))
                        )
                        bar.update(1)
                    cache[(family, point)] = seed_cell(per_seed, list(range(seeds)))
                knob_cells.setdefault(knob, {})[str(value)] = cache[(family, point)]
            result["families"][family] = {"tasks": len(tasks), "knobs": knob_cells}
    bar.close()
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(
        prog="python -m bench.ablations", description=__doc__.splitlines()[0] if __doc__ else None
    )
    p.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    p.add_argument("--knobs", nargs="+", choices=list(KNOBS), default=list(KNOBS))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--reader", default="oracle", help="oracle (reads what the best memory shows) or a chat model")
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument(
        "--set", nargs="+", default=[], metavar="KNOB=V,...", help="the values a knob takes (default: its ladder)"
    )
    p.add_argument("--base", nargs="+", default=[], metavar="KNOB=V", help="move the setting the other knobs vary from")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    if args.seeds < 2:
        p.error("--seeds must be >= 2: every figure carries an interval over seeds")
    if args.reader == "oracle":
        chat = ChatClient(ScriptedChat(oracle_reply))
    else:
        chat = (
            load_chat(args.reader, batch_size=24, threads=os.cpu_count())
            if args.reader.startswith("local/")
            else load_chat(args.reader)
        )
    try:
        ladder = {**KNOBS, **dict(parse_setting(t) for t in args.set)}
        moved = dict(parse_setting(t) for t in args.base)
    except ValueError as e:
        p.error(str(e))
    if any(len(v) != 1 for v in moved.values()):
        p.error("--base takes one value per knob")
    base = replace(BASE, **{k: v[0] for k, v in moved.items()})
    started = time.perf_counter()
    embedder = CachedEmbedder(load_embedder(args.embedder))
    result = {
        "machine": machine(),
        **run(
            args.families,
            args.knobs,
            args.seeds,
            chat=chat,
            embedder=embedder,
            reader=args.reader,
            base=base,
            ladder=ladder,
            progress=not args.quiet,
        ),
    }
    result["seconds"] = round(time.perf_counter() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    named = ([] if args.reader == "oracle" else [args.reader]) + [f"{k}{v[0]}" for k, v in moved.items()]
    suffix = "".join("_" + re.sub(r"\W+", "_", n) for n in named)
    result["suffix"] = suffix
    (args.out / f"ablations{suffix}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (args.out / f"ablations{suffix}.md").write_text(markdown(result), encoding="utf-8")
    for family, cells in result["families"].items():
        plot_family(family, cells["knobs"], args.out / f"ablations{suffix}_{family}.png", reader=args.reader)
    merge_summary(args.out / "summary.json", summary_keys(result, suffix))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
