"""Concurrency and load: many writers on one memory store, and ``evolve serve`` under a bounded load.

``mixed_workload(url)`` runs P spawned processes × T threads on one store (SQLite file or PostgreSQL);
every thread interleaves adds (its own namespace and a shared one), logged recalls (own and shared) and
``reinforce_many`` batches whose feedback names its own recalls and recalls any worker made (read back
from the database, with a feedback id derived from the recall so that workers race on the same ids).
Every exception a caller sees is captured. The sequential result is then computed from what the
workers report: an item's feedback all carries the reward of its namespace, so n updates give the same
Q in any order (the TD rule applied n times, ``memory.learn.rule.td_update``); every item's Q and visits
must equal it, and every feedback id must apply exactly once.

``tests/memory/test_memory_concurrency.py`` asserts on ``mixed_workload``; ``bench/reliability_load.py``
runs it at size for the reliability report (with ``evolve serve`` under load, ``tests.reliability.serve_load``).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import random
import threading
import time
import traceback
import zlib
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from sqlalchemy import Engine, text

from connectors.embedders import HashEmbedder
from memory.config import MemoryConfig, RetrievalConfig
from memory.learn.rewards import Reinforcement
from memory.learn.rule import td_update
from memory.store import MemoryStore

SHARED = "shared"
CONFIG = MemoryConfig(alpha=0.05, retrieval=RetrievalConfig(k1=6, k2=3, delta=-1.0))
WORDS = ["deploy", "backup", "restart", "rotate", "migrate", "index", "cache", "queue", "audit", "scale"]
LOCKED = "database is locked"


def reward_of(namespace: str) -> float:
    """The one reward every feedback on a namespace's recalls carries, in [-1, 1], stable across processes."""
    return 1.0 if namespace == SHARED else (zlib.crc32(namespace.encode()) % 21) / 10 - 1.0


def open_store(url: str) -> MemoryStore:
    return MemoryStore(url, embedder=HashEmbedder(dim=64), config=CONFIG)


@dataclass
class Log:
    """What workers did and saw: recalls made (id → namespace, items), feedback sent (id → recall),
    item updates ``reinforce_many`` reported, operations, and every exception as text."""

    recalls: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    feedback: dict[str, str] = field(default_factory=dict)
    applied: int = 0
    ops: int = 0
    errors: list[str] = field(default_factory=list)

    def merge(self, other: Log) -> None:
        self.recalls.update(other.recalls)
        self.feedback.update(other.feedback)
        self.applied += other.applied
        self.ops += other.ops
        self.errors += other.errors


def _others(engine: Engine, rng: random.Random) -> list[tuple[str, str]]:
    """Two recalls any worker made, read from the log (a read racing every writer)."""
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, namespace FROM memory_recalls ORDER BY random() LIMIT 2")).all()
    return [(str(r[0]), str(r[1])) for r in rows if rng.random() < 0.9]


def _round(store: MemoryStore, tag: str, i: int, rng: random.Random, log: Log) -> None:
    """One round of a thread: add, recall own and shared, reinforce a batch naming anyone's recalls."""
    own, word = f"ns-{tag}", rng.choice(WORDS)
    store.add(f"{word} job {tag} {i}", f"lesson {i} of {tag}", namespace=own)
    if i % 2 == 0:
        store.add(f"{word} shared job {tag} {i}", f"shared lesson {i}", namespace=SHARED)
    batch: list[Reinforcement] = []
    for ns in (own, SHARED):
        recall = store.retrieve(f"{rng.choice(WORDS)} job", namespace=ns)
        log.recalls[recall.id] = (ns, list(recall.ids))
        batch.append(Reinforcement(recall.id, reward_of(ns), f"{tag}:{i}:{ns}", ns))
    batch += [Reinforcement(rid, reward_of(ns), f"any:{rid}", ns) for rid, ns in _others(store.engine, rng)]
    log.feedback.update({b.feedback_id: b.recall for b in batch})
    if i and rng.random() < 0.3:  # a retried entry (last round's id): already applied, must change nothing
        batch.append(Reinforcement(batch[0].recall, batch[0].reward, f"{tag}:{i - 1}:{own}", own))
    log.applied += store.reinforce_many(batch)
    log.ops += 4 + (i % 2 == 0)


def _thread(store: MemoryStore, tag: str, rounds: int, start: threading.Barrier, log: Log) -> None:
    rng = random.Random(tag)
    start.wait()
    for i in range(rounds):
        try:
            _round(store, tag, i, rng, log)
        except Exception:
            log.errors.append(f"{tag} round {i}: {traceback.format_exc()}")


def worker(url: str, p: int, threads: int, rounds: int, barrier: Any, results: Any) -> None:
    """One process: two stores shared by ``threads`` threads, started together with the other processes."""
    log = Log()
    try:
        stores = [open_store(url), open_store(url)]
        barrier.wait(120)
        start = threading.Barrier(threads)
        logs = [Log() for _ in range(threads)]
        pool = [
            threading.Thread(target=_thread, args=(stores[t % 2], f"p{p}t{t}", rounds, start, logs[t]))
            for t in range(threads)
        ]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        for one in logs:
            log.merge(one)
        for s in stores:
            s.close()  # saves the vector index while the other processes still write
    except Exception:
        log.errors.append(f"process {p}: {traceback.format_exc()}")
    results.put(log)


def run_processes(url: str, processes: int, threads: int, rounds: int, timeout: float = 300) -> Log:
    """Spawn the workers on ``url`` and merge their logs (a worker that dies is an error, not a hang)."""
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(url, p, threads, rounds, barrier, results)) for p in range(processes)]
    for w in procs:
        w.start()
    total, got = Log(), 0
    deadline = time.monotonic() + timeout
    while got < processes:
        if time.monotonic() > deadline or any(w.exitcode not in (None, 0) for w in procs):
            total.errors.append(f"workers failed or timed out: exit codes {[w.exitcode for w in procs]}")
            break
        with contextlib.suppress(queue.Empty):
            total.merge(results.get(timeout=0.5))
            got += 1
    for w in procs:
        w.join(30)
        if w.is_alive():
            w.kill()
    return total


@cache
def sequential_q(n: int, reward: float, q0: float = 0.0) -> float:
    """Q after the same TD update (rate α, ``reward``) applied n times from ``q0``, as a sequential run gives."""
    q = q0
    for _ in range(n):
        q = float(td_update(q, reward, CONFIG.alpha))
    return q


@dataclass
class Check:
    """The workload's verdict: items compared, mismatches against the sequential result, lock errors."""

    items: int
    mismatches: list[str]
    updates_expected: int
    updates_reported: int
    feedback_rows: int
    feedback_sent: int
    locked: int
    errors: list[str]


def check(url: str, log: Log) -> Check:
    """Compare every stored item with the sequential result of the feedback the workers sent."""
    visits: Counter[str] = Counter()
    for rid in log.feedback.values():
        visits.update(log.recalls[rid][1])
    store = open_store(url)
    try:
        items = store.items()
        with store.engine.connect() as conn:
            rows = int(conn.execute(text("SELECT count(*) FROM memory_feedback")).scalar_one())
    finally:
        store.close()
    mismatches = []
    for it in items:
        n = visits[it.id]
        want = (sequential_q(n, reward_of(it.namespace)), n)
        if (it.q, it.visits) != want:
            mismatches.append(f"{it.namespace}/{it.id}: (q, visits) = {(it.q, it.visits)}, sequential {want}")
    locked = sum(LOCKED in e for e in log.errors)
    expected = sum(visits.values())
    return Check(len(items), mismatches, expected, log.applied, rows, len(log.feedback), locked, log.errors)


def mixed_workload(url: str, *, processes: int = 3, threads: int = 4, rounds: int = 12) -> tuple[Check, float, int]:
    """Seed the shared namespace, run the workers, check; returns the check, seconds and operations."""
    seed = open_store(url)
    seed.add_many([(f"{w} shared job seed", f"seed lesson {w}") for w in WORDS], namespace=SHARED)
    seed.close()
    started = time.perf_counter()
    log = run_processes(url, processes, threads, rounds)
    seconds = time.perf_counter() - started
    return check(url, log), seconds, log.ops
