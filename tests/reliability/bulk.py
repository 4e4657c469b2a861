"""A long bulk load with other processes recalling, reading and reinforcing on the same SQLite file.

One process loads ``rows`` memories with ``add_many`` (precomputed embeddings, no grouping: the fastest
and so the longest-holding write there is); ``workers`` other processes loop ``retrieve`` (logged, so a
write), ``get``, ``stats`` and ``reinforce`` on a small namespace until the load is done. Every call's
wait is timed. A bulk load commits in bounded chunks and frees the write lock between them, so no
caller sees "database is locked" and the longest wait stays about a second, whatever the load's size.

``tests/memory/write/test_memory_bulk_load.py`` asserts on ``contended_load``; ``python -m bench.reliability_bulk``
runs it at size and prints the figures (``--rows`` to change the load).
"""

from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DIM = 32
LIVE = "live tenant «Nordlicht»/solver"
QUERIES = ("reset the harbour gate", "badge colour for Quartz", "door code of the north depot", "alarm of site 7")


@dataclass
class Waits:
    """What one worker saw: seconds per call by operation, and every failure as text."""

    seconds: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, op: str, seconds: float) -> None:
        self.seconds.setdefault(op, []).append(seconds)


def _loader(url: str, rows: int, chunk: int | None, started: Any, done: Any, out: Any) -> None:
    """Bulk-load ``rows`` memories (in the process that may hold the write lock for long)."""
    from connectors.embedders import HashEmbedder
    from memory.store import MemoryStore
    from memory.write import adding

    if chunk is not None:  # every chunk this size, not only the first (later ones are otherwise timed)
        adding.BULK_CHUNK = chunk
        adding.chunk_size = lambda rows, seconds: chunk
    vecs = np.random.default_rng(7).standard_normal((rows, DIM)).astype(np.float32)
    texts = [(f"bulk memory {i}: route {i % 97} of depot {i % 13}", f"lesson {i}") for i in range(rows)]
    with MemoryStore(url, embedder=HashEmbedder(DIM)) as store:
        started.set()
        t0 = time.perf_counter()
        try:
            store.add_many(texts, namespace="bulk load", embeddings=vecs, group=False)
            out.put({"load_seconds": time.perf_counter() - t0})
        except Exception:
            out.put({"load_seconds": time.perf_counter() - t0, "load_error": traceback.format_exc()})
        finally:
            done.set()


def _worker(url: str, tag: int, busy_ms: int | None, started: Any, done: Any, out: Any) -> None:
    """Recall, read and reinforce in a loop until the load is done, timing every call."""
    from connectors import db
    from connectors.embedders import HashEmbedder
    from memory.store import MemoryStore

    if busy_ms is not None:
        db.BUSY_TIMEOUT_MS = busy_ms
    waits = Waits()
    with MemoryStore(url, embedder=HashEmbedder(DIM)) as store:
        started.wait(60)
        i = 0
        while not done.is_set():
            try:
                _one_round(store, tag, i, waits)
            except Exception as e:
                waits.errors.append(f"worker {tag} round {i}: {type(e).__name__}: {e}")
            i += 1
    out.put({"seconds": waits.seconds, "errors": waits.errors})


def _one_round(store: Any, tag: int, i: int, waits: Waits) -> None:
    t0 = time.perf_counter()
    recall = store.retrieve(QUERIES[(tag + i) % len(QUERIES)], namespace=LIVE)
    t1 = time.perf_counter()
    store.get(recall.ids[0], namespace=LIVE)
    t2 = time.perf_counter()
    store.stats(LIVE)
    t3 = time.perf_counter()
    store.reinforce(recall, float(i % 2), feedback_id=f"w{tag}-{i}")
    t4 = time.perf_counter()
    for op, seconds in (("retrieve", t1 - t0), ("get", t2 - t1), ("stats", t3 - t2), ("reinforce", t4 - t3)):
        waits.add(op, seconds)


def contended_load(url: str, *, rows: int, workers: int = 2, chunk: int | None = None,
                   busy_ms: int | None = None) -> dict[str, Any]:  # fmt: skip
    """Run the load against ``workers`` busy processes; what they saw. ``chunk`` fixes the size of every
    chunk (``memory.write.adding``'s ``BULK_CHUNK`` and ``chunk_size``) and ``busy_ms`` the workers' busy timeout (both
    for tests of the mechanism)."""
    from connectors.embedders import HashEmbedder
    from memory.store import MemoryStore

    with MemoryStore(url, embedder=HashEmbedder(DIM)) as store:
        store.add_many([(q, f"how to {q}") for q in QUERIES], namespace=LIVE)
    ctx = mp.get_context("spawn")
    started, done, out = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(url, t, busy_ms, started, done, out)) for t in range(workers)]
    procs.append(ctx.Process(target=_loader, args=(url, rows, chunk, started, done, out)))
    for p in procs:
        p.start()
    results = [out.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join(60)
    return summarise(results, rows, workers)


def summarise(results: list[dict[str, Any]], rows: int, workers: int) -> dict[str, Any]:
    load = next(r for r in results if "load_seconds" in r)
    seen = [r for r in results if "seconds" in r]
    every = [s for r in seen for values in r["seconds"].values() for s in values]
    errors = [e for r in seen for e in r["errors"]] + ([load["load_error"]] if "load_error" in load else [])
    by_op = {
        op: max(s for r in seen for s in r["seconds"].get(op, [0.0]))
        for op in ("retrieve", "get", "stats", "reinforce")
    }
    return {
        "rows": rows,
        "workers": workers,
        "load_seconds": round(load["load_seconds"], 2),
        "calls": len(every),
        "errors": errors,
        "locked": sum("locked" in e for e in errors),
        "max_wait": round(max(every, default=0.0), 3),
        "p99_wait": round(float(np.percentile(every, 99)) if every else 0.0, 4),
        "max_wait_by_op": {k: round(v, 3) for k, v in by_op.items()},
    }
