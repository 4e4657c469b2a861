"""A recall's tail when the machine or the database is busy: the group-committed recall log against a commit per
recall, in one run.

One store of ``--items`` clustered vectors (``bench.memory_speed``'s workload, the default adaptive index,
settled into its graph), two ``MemoryStore`` objects on its SQLite file in this process: one logs each recall
in a commit of its own (``recall_log_delay=0``, what every recall did before), the other defers the row to the
group commit (the default). Their recalls alternate, ``--recalls`` each, in three phases: *quiet*; *CPU busy*
(another process spinning on one of the cores); *writer* (another process adding a memory to the same file
every 2 ms: its write transactions hold SQLite's write lock). p50 and p95 in ms, and p95 ÷ p50.

Run: ``python -m bench.recall_loaded [--items 100000] [--recalls 1500]`` → bench/results/recall_loaded.{json,md}
and the ``recall_loaded_*`` keys and ``ann_retrieve_p95_over_p50_loaded_100k`` of bench/results/summary.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from bench.common import machine, merge_summary
from bench.memory_speed_measure import DIM, LookupEmbedder, add_throughput, workload
from memory.config import MemoryConfig, RetrievalConfig
from memory.store import MemoryStore

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parents[1]
ARMS = {"commit": 0.0, "deferred": None}  # recall_log_delay: a commit per recall, the default group commit
PHASES = ("quiet", "cpu", "writer")
RETRIEVAL = RetrievalConfig(k1=10, k2=5)
BLOCK = 50  # recalls of one arm in a row: the deferred arm's rows are committed by its own background writer

SPIN = "import time\nend = time.time() + 3600\nwhile time.time() < end: sum(range(10_000))\n"
WRITER = """
import sys, time
import numpy as np
sys.path.insert(0, {root!r})
from bench.memory_speed_measure import DIM, LookupEmbedder
from memory.config import MemoryConfig
from memory.store import MemoryStore
store = MemoryStore({url!r}, embedder=LookupEmbedder(DIM), config=MemoryConfig(index="adaptive"))
rng = np.random.default_rng(7)
print("ready", flush=True)
for i in range(10**9):
    v = rng.normal(size=(1, DIM)).astype(np.float32)
    store.add_many([(f"Lieferschein {{i}} Halle Zürich-Altstetten", "gebucht")], embeddings=v / np.linalg.norm(v),
                   group=False, namespace="Nebenlager")
    time.sleep(0.002)
"""


def measure(folder: Path, items: int, recalls: int, seed: int) -> dict[str, Any]:
    _, vecs, _, queries = workload(items, recalls, seed)
    embedder = LookupEmbedder(DIM)
    texts = [f"query {i}" for i in range(len(queries))]
    embedder.vectors.update(zip(texts, queries, strict=True))
    url = f"sqlite:///{folder / 'loaded.db'}"
    stores: dict[str, MemoryStore] = {}
    try:
        for arm, delay in ARMS.items():
            config = MemoryConfig(index="adaptive", retrieval=RETRIEVAL, recall_log_delay=delay)
            stores[arm] = store = MemoryStore(url, embedder=embedder, config=config, seed=seed)
            if arm == "commit":
                add_throughput(store, vecs, items)
            store.retrieve(texts[0], record=False)  # loads the namespace's mirror and index (a graph past 20,000)
            store.wait_for_index(3600)
            for text in texts[:100]:  # warm: the graph, the item cache
                store.retrieve(text, record=False)
        return {phase: timed_phase(phase, stores, texts, url) for phase in PHASES}
    finally:
        for store in stores.values():
            store.close()


def timed_phase(phase: str, stores: dict[str, MemoryStore], texts: list[str], url: str) -> dict[str, Any]:
    """Each arm's recalls, alternating, while ``phase``'s other process runs."""
    other: subprocess.Popen[str] | None = None
    if phase == "cpu":
        other = subprocess.Popen([sys.executable, "-c", SPIN], text=True)
    elif phase == "writer":
        code = WRITER.format(root=str(ROOT), url=url)
        other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert other.stdout is not None and other.stdout.readline().strip() == "ready", "the writer did not start"
    try:
        times: dict[str, list[float]] = {arm: [] for arm in stores}
        blocks = range(0, len(texts), BLOCK)
        for b, lo in enumerate(tqdm(blocks, desc=phase, unit="block", leave=False)):
            for arm in list(stores)[b % 2 :] + list(stores)[: b % 2]:  # each arm goes first half the time
                for text in texts[lo : lo + BLOCK]:
                    started = time.perf_counter()
                    stores[arm].retrieve(text)
                    times[arm].append(time.perf_counter() - started)
    finally:
        if other is not None:
            other.kill()
            other.wait()
    out = {}
    for arm, t in times.items():
        p50, p95 = (float(np.percentile(t, p) * 1000) for p in (50, 95))
        out[arm] = {"p50_ms": round(p50, 3), "p95_ms": round(p95, 3), "p95_over_p50": round(p95 / p50, 2)}
    return out


def markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        "# A recall's tail under load: group-committed recall log against a commit per recall",
        "",
        f"{s['items']:,} items (adaptive index, settled), {s['recalls']:,} recalls per arm and phase, the two arms "
        f"alternating in blocks of {BLOCK} in one process on one SQLite file. *commit*: `recall_log_delay=0`, each recall commits its "
        "row (its own write transaction); *deferred*: the default group commit (a read transaction; the row "
        "committed by a background writer). *CPU busy*: another process spinning on one of the 2 cores; "
        "*writer*: another process adding a memory to the same file every 2 ms.",
        "",
        "| phase | arm | p50 ms | p95 ms | p95 ÷ p50 |",
        "|---|---|---|---|---|",
    ]
    for phase, arms in result["phases"].items():
        for arm, r in arms.items():
            lines.append(f"| {phase} | {arm} | {r['p50_ms']:.3f} | {r['p95_ms']:.3f} | {r['p95_over_p50']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--items", type=int, default=100_000)
    p.add_argument("--recalls", type=int, default=1500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.items < 1000 or args.recalls < 20:
        p.error("--items must be at least 1000 and --recalls at least 20")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        phases = measure(Path(tmp), args.items, args.recalls, args.seed)
    settings = {"items": args.items, "recalls": args.recalls, "seed": args.seed}
    result = {"settings": settings, "phases": phases, "seconds": round(time.perf_counter() - started, 1),
              "machine": machine()}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "recall_loaded.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "recall_loaded.md").write_text(markdown(result))
    tag = f"{args.items // 1000}k" if args.items < 1_000_000 else f"{args.items // 1_000_000}m"
    keys = {
        f"recall_loaded_{phase}_{arm}_{m}_{tag}": r[m]
        for phase, arms in phases.items()
        for arm, r in arms.items()
        for m in ("p50_ms", "p95_ms")
    }
    keys[f"ann_retrieve_p95_over_p50_loaded_{tag}"] = phases["cpu"]["deferred"]["p95_over_p50"]
    merge_summary(args.out / "summary.json", keys)
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
