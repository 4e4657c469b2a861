"""What does the loop itself cost? Episodes per second with a zero-latency scripted model, and local
generation batched across episodes versus one prompt at a time.

Run ``python -m bench.loop_overhead [--profile quick|full]``.

Part 1 runs an ``Evolver`` over a few hundred generated facility-code tasks (like
``data/facility_codes.jsonl``, more sites) with a ``ScriptedChat`` that answers instantly (it copies the
last code a recalled experience shows) and the ``HashEmbedder``, so no model runs: every millisecond is
the framework's own — memory recall, reinforce and write, the run log, checking answers, round metrics.
The store is a SQLite file with its FAISS index, ``learn=True``, several rounds; the same loop without
memory is measured too. Time per phase comes from wrapping the loop's seams with a clock
(``PhaseClock``); a separate cProfile run lists the hottest functions.

Part 2 loads SmolLM2-135M (``load_chat("local/smollm2")``) and generates answers to the same prompts
one at a time and in one batch (greedy, fixed new-token budget).

Results go to ``bench/results/loop_overhead.{json,md}``; headline numbers are merged into
``bench/results/summary.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import machine, merge_summary
from bench.loop_overhead_report import markdown
from connectors import Environment, HashEmbedder, Message, ScriptedChat, make_engine
from connectors.chat import ChatClient
from data.make_facility_codes import ASSETS, BUILDINGS, TEMPLATES  # the bundled family's phrasing
from evolve import Agent, Evolver, MemoryView, Task, Team, paraphrase_schedule
from memory import MemoryStore

RESULTS = Path(__file__).parent / "results"
TARGET_MS = 0.5  # issue 25, item 4: the loop with memory costs at most 0.5 ms an episode
PREFIXES = ["North", "South", "East", "West", "Upper", "Lower", "Old", "New", "Red", "Blue", "Stone", "Iron"]
ROOTS = ["harbor", "summit", "maple", "granite", "willow", "copper", "ridge", "brook", "field", "haven"]
REVEALED = re.compile(r"(?:expected answer is: |Answer given: )(\d{4})")


@dataclass(frozen=True)
class Profile:
    """How much one profile measures."""

    tasks: int
    rounds: int
    batch_size: int
    gen_prompts: int
    gen_tokens: int
    profile_rounds: int


PROFILES = {
    "quick": Profile(tasks=300, rounds=4, batch_size=16, gen_prompts=16, gen_tokens=32, profile_rounds=2),
    "full": Profile(tasks=480, rounds=8, batch_size=16, gen_prompts=32, gen_tokens=64, profile_rounds=3),
}


def make_tasks(n: int) -> list[Task]:
    """``n`` facility-code tasks: site × building × asset, each with four paraphrases and its own code."""
    sites = [f"{p}{r}" for p in PREFIXES for r in ROOTS]
    combos = [(s, b, a) for s in sites for b in BUILDINGS for a in ASSETS]
    if n > len(combos):
        raise ValueError(f"at most {len(combos)} generated tasks, asked for {n}")
    tasks = []
    for i, (site, building, asset) in enumerate(combos[:n]):
        phrasings = [t.format(site=site, building=building, asset=asset) for t in TEMPLATES]
        code = str(1000 + (i * 7919) % 9000)
        tasks.append(
            Task(
                id=f"{site}-{building}-{asset.split()[0]}".lower(),
                prompt=phrasings[0],
                answer=code,
                family="facility-codes",
                meta={"paraphrases": phrasings[1:]},
            )
        )
    return tasks


def copying_reply(messages: Sequence[Message]) -> str:
    """A zero-latency model that knows nothing but copies the last code a recalled experience shows."""
    found = REVEALED.findall(messages[-1].content)
    return found[-1] if found else "0000"


class PhaseClock:
    """Accumulates wall time per phase by wrapping methods of live objects (instance attributes, so
    nothing global changes). A call made while its phase is already being timed (``write`` calling
    ``write_many``) is not counted twice; nested *different* phases are taken out by ``exclusive``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._depth: dict[str, int] = {}

    def wrap(self, obj: Any, attr: str, phase: str) -> None:
        fn = getattr(obj, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth.get(phase, 0):
                return fn(*args, **kwargs)
            self._depth[phase] = 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start
                self.calls[phase] = self.calls.get(phase, 0) + 1
                self._depth[phase] = 0

        setattr(obj, attr, timed)


def build_loop(tasks: list[Task], folder: Path, *, memory: bool, batch_size: int) -> Evolver:
    """An Evolver on a fresh SQLite file: scripted model, HashEmbedder memory (or none)."""
    url = f"sqlite:///{folder / 'loop.db'}"
    store = MemoryStore(url, embedder=HashEmbedder(), seed=0) if memory else None
    view = MemoryView(store) if store is not None else None
    agent = Agent("solver", ChatClient(ScriptedChat(copying_reply)), memory=view)
    return Evolver(
        Team([agent]),
        tasks,
        memory=store,
        engine=None if store is not None else make_engine(url),
        run="overhead",
        batch_size=batch_size,
        learn=True,
        schedule=paraphrase_schedule(seed=0),
        progress=False,
    )


def instrument(ev: Evolver) -> PhaseClock:
    """Wrap the loop's seams: recall, generation, the rest of acting, environment, run log, reinforce,
    write, round metrics."""
    clock = PhaseClock()
    clock.wrap(ev, "run_batch", "batch")
    clock.wrap(ev.team, "act", "act")
    clock.wrap(ev.team, "_generate", "generate")
    clock.wrap(ev.log, "record_episodes", "run_log")
    clock.wrap(ev.log, "mark_learned", "run_log")
    clock.wrap(ev, "_metrics", "metrics")
    clock.wrap(ev.log, "record_round", "metrics")
    if ev.memory is not None:
        clock.wrap(ev.memory, "retrieve_many", "recall")
        clock.wrap(ev.memory, "reinforce_many", "reinforce")
        for name in ("write", "write_many"):
            if hasattr(ev.memory, name):
                clock.wrap(ev.memory, name, "write")
    make_env = ev.env_factory

    def timed_env() -> Environment:
        env = make_env()  # the loop's own factory, wrapped (a few µs per episode, counted in batch_other)
        clock.wrap(env, "reset", "env")
        clock.wrap(env, "step", "env")
        return env

    ev.env_factory = timed_env
    return clock


def exclusive(clock: PhaseClock, total: float) -> dict[str, float]:
    """Seconds per phase with nested phases taken out, and what is left of the round as ``other``."""
    s = clock.seconds
    recall, generate, env = s.get("recall", 0.0), s.get("generate", 0.0), s.get("env", 0.0)
    act = s.get("act", 0.0)
    out = {
        "recall": recall,
        "generate": generate,
        "act_other": act - recall - generate,
        "env": env,
        "batch_other": s.get("batch", 0.0) - act - env,
        "run_log": s.get("run_log", 0.0),
        "reinforce": s.get("reinforce", 0.0),
        "write": s.get("write", 0.0),
        "metrics": s.get("metrics", 0.0),
    }
    out["round_other"] = total - sum(out.values())
    return out


def measure_loop(tasks: list[Task], *, rounds: int, batch_size: int, memory: bool) -> dict[str, Any]:
    """Run ``rounds`` rounds and return ms per episode overall, per round and per phase."""
    with tempfile.TemporaryDirectory(prefix="evolve-loop-") as folder:
        ev = build_loop(tasks, Path(folder), memory=memory, batch_size=batch_size)
        clock = instrument(ev)
        start, cpu = time.perf_counter(), time.process_time()
        metrics = ev.run(rounds)
        total, cpu = time.perf_counter() - start, time.process_time() - cpu
        if ev.memory is not None:
            ev.memory.close()
    episodes = sum(m.episodes for m in metrics)
    phases = exclusive(clock, total)
    return {
        "memory": memory,
        "tasks": len(tasks),
        "rounds": rounds,
        "batch_size": batch_size,
        "episodes": episodes,
        "seconds": total,
        "ms_per_episode": 1e3 * total / episodes,
        "cpu_ms_per_episode": 1e3 * cpu / episodes,
        "episodes_per_s": episodes / total,
        "phases_ms_per_episode": {k: 1e3 * v / episodes for k, v in phases.items()},
        "rounds_ms_per_episode": [1e3 * m.seconds / m.episodes for m in metrics],
        "success_rate": [m.success_rate for m in metrics],
        "memory_size": [m.memory_size for m in metrics],
    }


def profile_loop(tasks: list[Task], *, rounds: int, batch_size: int, top: int = 25) -> dict[str, Any]:
    """cProfile of the loop with memory: the hottest functions by own time and by cumulative time."""
    with tempfile.TemporaryDirectory(prefix="evolve-loop-prof-") as folder:
        ev = build_loop(tasks, Path(folder), memory=True, batch_size=batch_size)
        profiler = cProfile.Profile()
        profiler.enable()
        ev.run(rounds)
        profiler.disable()
        if ev.memory is not None:
            ev.memory.close()
    return {"by_tottime": _top(profiler, "tottime", top), "by_cumtime": _top(profiler, "cumulative", top)}


def _top(profiler: cProfile.Profile, key: str, n: int) -> list[dict[str, Any]]:
    stats = pstats.Stats(profiler, stream=io.StringIO()).sort_stats(key)
    rows = []
    for func in stats.fcn_list[:n]:  # type: ignore[attr-defined]
        cc, nc, tt, ct, _ = stats.stats[func]  # type: ignore[attr-defined]
        path, line, name = func
        rows.append({"function": f"{_short(path)}:{line}({name})", "calls": nc, "tottime_s": tt, "cumtime_s": ct})
    return rows


def _short(path: str) -> str:
    for marker in ("site-packages/", "/work/main/", "python3.11/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def measure_generation(tasks: list[Task], *, prompts: int, tokens: int) -> dict[str, Any]:
    """SmolLM2 answering the same ``prompts`` prompts one at a time and in one batch (greedy)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from connectors import load_chat
    from evolve.agent import render_messages

    chat = load_chat("local/smollm2", max_new_tokens=tokens, batch_size=prompts)
    start = time.perf_counter()
    chat.complete_batch([[Message("user", "Hi")]], max_tokens=1)  # loads (or converts) the model
    load_s = time.perf_counter() - start
    agent = Agent("solver", chat)
    batch = [render_messages(agent, t.prompt, None, {}) for t in tasks[:prompts]]
    load_before = _load_average()
    params: dict[str, Any] = {"max_tokens": tokens, "temperature": 0.0}
    chat.complete_batch(batch[:2], **params)  # warm-up: first-call allocations
    start = time.perf_counter()
    singles = [chat.complete(p, **params) for p in batch]
    single_s = time.perf_counter() - start
    start = time.perf_counter()
    batched = chat.complete_batch(batch, **params)
    batch_s = time.perf_counter() - start
    single_tokens = sum(c.usage.completion_tokens for c in singles)
    batch_tokens = sum(c.usage.completion_tokens for c in batched)
    out: dict[str, Any] = {
        "model": chat.name,
        "load_s": load_s,
        "prompts": prompts,
        "max_new_tokens": tokens,
        "torch_threads": _torch_threads(),
        "load_average": {"before": load_before, "after": _load_average()},
        "single": {
            "seconds": single_s,
            "tokens": single_tokens,
            "tokens_per_s": single_tokens / single_s,
            "episodes_per_s": prompts / single_s,
        },
        "batched": {
            "seconds": batch_s,
            "tokens": batch_tokens,
            "tokens_per_s": batch_tokens / batch_s,
            "episodes_per_s": prompts / batch_s,
        },
        "same_text": sum(a.text == b.text for a, b in zip(singles, batched, strict=True)),
        "example": {"prompt": tasks[0].prompt, "answer": batched[0].text},
    }
    out["speedup"] = out["batched"]["tokens_per_s"] / out["single"]["tokens_per_s"]
    return out


def _load_average() -> float | None:
    """The 1-minute load average: above the core count, other work shares the cores and generation,
    memory-bound and multi-threaded, slows down far more than the loop does."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def headline(results: dict[str, Any]) -> dict[str, Any]:
    """Flat numbers for summary.json."""
    loop, bare = results["loop"], results["loop_no_memory"]
    flat = {
        "loop_overhead_ms_per_episode": round(loop["ms_per_episode"], 3),
        "loop_episodes_per_s": round(loop["episodes_per_s"], 1),
        "loop_overhead_ms_per_episode_no_memory": round(bare["ms_per_episode"], 3),
    }
    gen = results.get("generation")
    if gen:
        flat["local_gen_tokens_per_s_batched"] = round(gen["batched"]["tokens_per_s"], 1)
        flat["local_gen_tokens_per_s_single"] = round(gen["single"]["tokens_per_s"], 1)
        flat["local_gen_batch_speedup"] = round(gen["speedup"], 2)
    return flat


def run(profile: Profile, *, generation: bool = True, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every measurement of one profile, as one JSON-able dict."""
    tasks = make_tasks(profile.tasks)
    results: dict[str, Any] = {"machine": machine(), "profile": asdict(profile), "target_ms_per_episode": TARGET_MS}
    start = time.perf_counter()
    kw = {"rounds": profile.rounds, "batch_size": profile.batch_size}
    results["loop"] = measure_loop(tasks, memory=True, **kw)
    log(f"loop with memory: {results['loop']['ms_per_episode']:.3f} ms/episode")
    results["loop_no_memory"] = measure_loop(tasks, memory=False, **kw)
    log(f"loop without memory: {results['loop_no_memory']['ms_per_episode']:.3f} ms/episode")
    results["cprofile"] = profile_loop(tasks, rounds=profile.profile_rounds, batch_size=profile.batch_size)
    if generation:
        results["generation"] = measure_generation(tasks, prompts=profile.gen_prompts, tokens=profile.gen_tokens)
        g = results["generation"]
        log(
            f"SmolLM2: {g['single']['tokens_per_s']:.1f} tok/s one at a time, {g['batched']['tokens_per_s']:.1f} "
            f"tok/s batched ({g['speedup']:.2f}x)"
        )
    results["seconds"] = time.perf_counter() - start
    return results


def main(argv: Sequence[str] | None = None, *, profile: Profile | None = None) -> dict[str, Any]:
    """The command line; ``profile`` overrides the named profile's sizes (tests run a tiny one)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    parser.add_argument("--no-generation", action="store_true", help="skip the SmolLM2 part")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results are written")
    args = parser.parse_args(argv)
    results = run(profile or PROFILES[args.profile], generation=not args.no_generation)
    results["profile_name"] = args.profile
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "loop_overhead.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (args.out / "loop_overhead.md").write_text(markdown(results), encoding="utf-8")
    merge_summary(args.out / "summary.json", headline(results))
    print(f"done in {results['seconds']:.1f} s; results in {args.out}")
    return results


if __name__ == "__main__":
    main()
