"""What Q in context costs a recall: a served tenant's recall over its run's trained memory, ranked by its
overlay Q on the shared memories it rated and by its task's Q in context, on a store whose recall log holds
``H`` rated recalls of that tenant.

Three recalls are timed in one run, interleaved, per history: *after a write* (an unrelated memory written
first, untimed: the generation moved, so the tenant's rewards are read from the log and folded again),
*kept* (the same tenant and task again, no write since: the values folded at this generation come from the
store's ``memory.recall.context_cache.ContextQCache``, no SQL for them), and *plain* (the same question in the shared
namespace, no overlay and no context: the floor). The store: ``--items`` memories, HashEmbedder vectors
(the embedding is not what is measured), SQLite in a temporary folder.

Run: ``python -m bench.context_q_recall [--items 1000] [--recalls 200] [--history 0 200 1000]`` →
bench/results/context_q_recall.{json,md} and the ``context_q_recall_*`` keys of bench/results/summary.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from bench.common import machine, merge_summary
from connectors import HashEmbedder
from memory import MemoryConfig, MemoryStore, RetrievalConfig

RESULTS = Path(__file__).parent / "results"
SHARED = "Acme support assistant — trained/solver"
TENANT = "Acme support assistant — trained@Nordlicht-Logistik Filiale Zürich/solver"
CONFIG = MemoryConfig(retrieval=RetrievalConfig(k1=10, k2=2, delta=0.0))
ARMS = ("after_write", "kept", "plain")  # kept follows a recall of its context at the same generation


def question(i: int) -> str:
    return f"Which door code opens the loading bay of warehouse {i % 97} in Zürich-Altstetten?"


def measure(folder: Path, items: int, history: int, recalls: int) -> dict[str, float]:
    """p50 ms of each arm on a fresh store with ``history`` rated recalls of the tenant."""
    store = MemoryStore(f"sqlite:///{folder / f'h{history}.db'}", embedder=HashEmbedder(dim=384), config=CONFIG, seed=0)
    try:
        rows = [(question(i), f"The loading bay of warehouse {i} opens with {1000 + i}.") for i in range(items)]
        store.add_many(rows, namespace=SHARED)
        for i in range(history):
            rated = store.retrieve(question(i), namespace=TENANT, shared=SHARED, context=f"task {i % 20}")
            store.reinforce(rated, 1.0 if i % 3 else -1.0)
        times: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for i in tqdm(range(recalls), desc=f"history {history}", unit="round", leave=False):
            for arm in ARMS:
                if arm == "after_write":
                    store.add(f"unrelated note {history}-{i}", "nothing", namespace="notes")
                started = time.perf_counter()
                if arm == "plain":
                    store.retrieve(question(i), namespace=SHARED)
                else:
                    store.retrieve(question(i), namespace=TENANT, shared=SHARED, context=f"task {i % 20}")
                times[arm].append(time.perf_counter() - started)
        return {arm: round(statistics.median(t) * 1000, 3) for arm, t in times.items()}
    finally:
        store.close()


def markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        "# What Q in context costs a recall",
        "",
        f"A tenant's recall over its run's {s['items']} trained memories, ranked by its overlay Q and its task's "
        f"Q in context, on a store whose recall log holds H rated recalls of that tenant; {s['recalls']} rounds "
        "per history, the three recalls interleaved, p50 in ms (SQLite, HashEmbedder vectors: the embedding is "
        "not what is measured). *kept*: no write since the last recall (the folded values come from the "
        "store's cache, no SQL for them); *after a write*: the generation moved, the tenant's rewards folded "
        "again from the log; *plain*: the same question without overlay or context (the floor).",
        "",
        "| H rated recalls | kept | after a write | plain | kept ÷ plain | after a write ÷ plain |",
        "|---|---|---|---|---|---|",
    ]
    for h, r in result["histories"].items():
        lines.append(
            f"| {h} | {r['kept']:.2f} | {r['after_write']:.2f} | {r['plain']:.2f} | "
            f"{r['kept'] / r['plain']:.2f} | {r['after_write'] / r['plain']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--items", type=int, default=1000)
    p.add_argument("--recalls", type=int, default=200)
    p.add_argument("--history", type=int, nargs="+", default=[0, 200, 1000])
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.items < 1 or args.recalls < 1 or any(h < 0 for h in args.history):
        p.error("--items and --recalls must be at least 1, --history values at least 0")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        histories = {str(h): measure(Path(tmp), args.items, h, args.recalls) for h in args.history}
    settings = {"items": args.items, "recalls": args.recalls, "history": args.history}
    result = {"settings": settings, "histories": histories, "seconds": round(time.perf_counter() - started, 1),
              "machine": machine()}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "context_q_recall.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "context_q_recall.md").write_text(markdown(result))
    keys = {f"context_q_recall_{arm}_ms_p50_h{h}": r[arm] for h, r in histories.items() for arm in ARMS}
    merge_summary(args.out / "summary.json", keys)
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
