"""`evolve demo`: the embedded default, end to end, in two regimes side by side.

SmolLM2-135M-Instruct (local, CPU) answers the bundled facility-codes tasks; MiniLM embeds; SQLite +
FAISS store the memory. The same model runs without memory, with similarity-only memory (λ = 0, α = 0:
the RAG baseline) and with Q-memory (the default memory: λ = 0.5, α = 0.3, Q in context), on 5 seeds
by default (task order and paraphrase choice), in two regimes:

- **clean ratings**: every verdict comes from the checker;
- **wrong ratings** (ρ = 0.2, chosen before it was run, as ``bench.noise`` measures): a fifth of the
  verdicts memory learns from are wrong (``evolve.envs.ratings.NoisyRatings``), as when people rate
  answers; success is still the checker's. No memory learns nothing from ratings, so it runs once.

Per regime: the per-round table of means with 95% intervals, the paired verdict, a learning-curve PNG.

Greedy answers go through an in-memory response cache: a prompt asked again (the same phrasing with the
same recalled memories, or any round-1 prompt, which has no memory yet) gets the answer it got before
instead of a second generation. Generation is compute-bound on a CPU (one batch of 120 prompts is 1.1x
faster than five of 24), so batching the seeds together would not make the demo faster; the cache does.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from apps.report import paired_verdict, plot_bands, seeded_table, solved_line
from connectors import (
    ChatClient,
    ConfigError,
    Embedder,
    ResponseCache,
    evolve_home,
    load_chat,
    load_embedder,
    make_engine,
)
from evolve import Agent, Evolver, MemoryView, RoundMetrics, Team, load_tasks, paraphrase_schedule
from evolve.envs.bundled import bundled_root
from evolve.envs.ratings import NoisyRatings
from evolve.evolver import task_envs
from memory import MemoryConfig, MemoryStore, RetrievalConfig, similarity_only

DATA = bundled_root() / "facility_codes.jsonl"
SYSTEM = (
    "You are the assistant of the Acme facilities team. Reply with the code only. Past experiences may show "
    "the correct code in their feedback: the feedback is always right, the answer given may be wrong."
)
RETRIEVAL = RetrievalConfig(k1=10, k2=1, delta=0.5, lam=0.5)
CONDITIONS = ("no memory", "similarity", "q-memory")
NOISY = ("similarity", "q-memory")
RHO = 0.2
"""The share of wrong ratings in the demo's second regime (chosen before the demo was run)."""
BATCH = 24  # one generate call per round: the whole task set at once


def run_condition(
    name: str,
    *,
    chat: ChatClient,
    embedder: Embedder,
    tasks_path: Path,
    folder: Path,
    rounds: int,
    seed: int,
    progress: bool,
    rho: float = 0.0,
) -> list[RoundMetrics]:
    """One condition in its own database file, so the conditions cannot see each other's memories; with
    ``rho`` its ratings are wrong that often, and each round's success is the checker's."""
    stem = name.replace(" ", "-") + (f"-rho{rho:g}" if rho else "")
    url = f"sqlite:///{folder / (stem + '.db')}"
    tasks = load_tasks(tasks_path)
    rated = NoisyRatings(task_envs(tasks), rho=rho, seed=seed) if rho else None
    params = {"max_tokens": 20, "temperature": 0.0}
    store = None
    if name != "no memory":
        config = MemoryConfig(retrieval=RETRIEVAL)
        store = MemoryStore(
            url, embedder=embedder, config=similarity_only(config) if name == "similarity" else config, seed=seed
        )
    agent = Agent("solver", chat, system=SYSTEM, memory=MemoryView(store) if store else None, params=params)
    evolver = Evolver(
        Team([agent]),
        tasks,
        memory=store,
        env_factory=rated,
        engine=store.engine if store else make_engine(url),
        run=name,
        batch_size=BATCH,
        schedule=paraphrase_schedule(seed),
        progress=progress,
    )
    try:
        metrics = evolver.run(rounds)
    finally:
        if store is not None:
            store.close()
    return metrics if rated is None else true_metrics(metrics, rated, [t.id for t in tasks])


def true_metrics(metrics: list[RoundMetrics], rated: NoisyRatings, ids: list[str]) -> list[RoundMetrics]:
    """Each round's success and solved share by the checker, not by the wrong ratings memory learned from."""
    out, solved = [], set()
    for n, m in enumerate(metrics):
        rewards = rated.true_rewards(ids, n)
        solved |= {i for i, r in zip(ids, rewards, strict=True) if r >= 1.0}
        out.append(
            replace(m, success_rate=sum(r >= 1.0 for r in rewards) / len(ids), solved_share=len(solved) / len(ids))
        )
    return out


def run_demo(
    *,
    rounds: int = 8,
    seeds: int = 5,
    home: Path | None = None,
    chat: ChatClient | None = None,
    embedder: Embedder | None = None,
    tasks_path: Path = DATA,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the conditions of both regimes with seeds ``seed``, ``seed + 1``, … (paraphrase choice and task
    order) and write each regime's table (means with 95% intervals over seeds), paired verdict and PNG, and
    one JSON, under ``<home>/demo``."""
    if seeds < 1:
        raise ConfigError(f"the demo needs at least one seed, got {seeds}")
    folder = (home or evolve_home()) / "demo"
    shutil.rmtree(folder, ignore_errors=True)  # the demo's own scratch folder: always a fresh start
    folder.mkdir(parents=True)
    started = time.perf_counter()
    chat = chat or load_chat("local/smollm2", batch_size=BATCH, cache=ResponseCache())
    embedder = embedder or load_embedder("minilm")
    numbers = list(range(seed, seed + seeds))
    clean: dict[str, list[list[RoundMetrics]]] = {name: [] for name in CONDITIONS}
    noisy: dict[str, list[list[RoundMetrics]]] = {name: [] for name in NOISY}
    plan = [(clean, name, 0.0) for name in CONDITIONS] + [(noisy, name, RHO) for name in NOISY]
    for s in numbers:
        here = folder / f"seed-{s}"
        here.mkdir()
        for into, name, rho in plan:
            into[name].append(
                run_condition(
                    name,
                    chat=chat,
                    embedder=embedder,
                    tasks_path=tasks_path,
                    folder=here,
                    rounds=rounds,
                    seed=s,
                    progress=progress,
                    rho=rho,
                )  # fmt: skip
            )
    result = {
        "model": chat.name,
        "embedder": embedder.name,
        "rounds": rounds,
        "seeds": numbers,
        "retrieval": asdict(RETRIEVAL),
        "failure_keeps": MemoryConfig().failure_keeps,  # what a failure memory stores of its attempt
        **regime(clean, folder / "learning_curve.png", "facility codes: success rate per round"),
        "noisy": {
            "rho": RHO,
            **regime(
                noisy,
                folder / "learning_curve_noisy.png",
                f"facility codes, {RHO:.0%} wrong ratings: success",
            ),
        },  # fmt: skip
        "seconds": round(time.perf_counter() - started, 1),
        "json": str(folder / "demo.json"),
    }
    (folder / "demo.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


def regime(runs: dict[str, list[list[RoundMetrics]]], png: Path, title: str) -> dict[str, Any]:
    """One regime's figures: per-seed curves, the table, the solved line, the paired verdict and the plot."""
    return {
        "curves": {n: [[asdict(m) for m in ms] for ms in per_seed] for n, per_seed in runs.items()},
        "table": seeded_table(runs),
        "solved": solved_line(runs),
        "verdict": paired_verdict(runs, "q-memory", "similarity"),
        "plot": str(plot_bands(runs, png, title=title)) if can_plot() else None,
    }


def can_plot() -> bool:
    """Whether matplotlib (the ``plots`` extra) is there: without it the demo reports its tables, no PNG."""
    return importlib.util.find_spec("matplotlib") is not None
