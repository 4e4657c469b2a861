"""SIGKILL while recalls wait for their group commit (``MemoryConfig.recall_log_delay``): what is lost is what
the contract says may be, and nothing else.

One SQLite file lives through every trial. A worker process opens a ``MemoryStore`` on it with a short group
commit window (so the background writer commits every few milliseconds and kills land inside its commits
too), and loops until the parent kills it: recall one to four queries (each recall id acknowledged with when
it returned), and every third step reinforce one of its earlier recalls by id (the feedback id acknowledged
once ``reinforce`` returned). The parent notes when it sent each SIGKILL.

After the trials the parent checks: ``PRAGMA integrity_check``; every acknowledged feedback id is in
``memory_feedback``; every memory's Q is, bit for bit, the learning rule replayed over the applied feedback
in the order it was applied (from ``q_init``) and its visits their count; every acknowledged recall is in the
log or was made less than ``WINDOW_SLACK`` seconds plus the window before its worker was killed (the unrated-
recall window); and rating a lost recall by id is a ``StoreError`` that names ``recall_log_delay`` and changes
nothing. ``tests/memory/recall/test_recall_log.py`` asserts on ``run_trials``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

from connectors import HashEmbedder
from connectors.errors import StoreError
from memory.config import MemoryConfig, RetrievalConfig
from memory.learn.rule import td_update
from memory.recall.log import candidates_of
from memory.store import MemoryStore
from tests.reliability.crash import read_acks

DIM = 32
NAMESPACE = "Lager Zürich-Altstetten — Nachtschicht"
WORDS = "open close door gate lock alarm code safe harbor summit quarry lagoon red blue green amber".split()
DELAY = 0.003  # the workers' recall_log_delay: a commit every few milliseconds
WINDOW_SLACK = 0.5  # seconds the background writer may run late on a busy machine
CONFIG = MemoryConfig(recall_log_delay=DELAY, alpha=0.3, retrieval=RetrievalConfig(k1=6, k2=3, delta=-1.0))


def seed_store(url: str) -> None:
    with MemoryStore(url, embedder=HashEmbedder(DIM), config=CONFIG) as store:
        rng = random.Random(0)
        store.add_many(
            [(" ".join(rng.sample(WORDS, 4)) + f" {i}", f"did {i}") for i in range(300)], namespace=NAMESPACE
        )


def worker(url: str, ack_path: str, trial: int, seed: int, started: Any) -> None:
    """Recall and reinforce on ``url`` until killed, acknowledging each call (``tests.reliability.crash``'s log)."""
    rng = random.Random(seed)
    fd = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    store = MemoryStore(url, embedder=HashEmbedder(DIM), config=CONFIG, seed=seed)
    started.send(True)
    made: list[str] = []
    for step in range(10**9):
        if step % 3 == 2 and made:
            recall_id, feedback_id = rng.choice(made), f"fb-{trial}-{step}"
            store.reinforce(recall_id, rng.choice((-1.0, 1.0)), namespace=NAMESPACE, feedback_id=feedback_id)
            _ack(fd, {"trial": trial, "feedback": feedback_id})
            continue
        recalls = store.retrieve_many(
            [" ".join(rng.sample(WORDS, 3)) for _ in range(rng.randint(1, 4))], namespace=NAMESPACE
        )
        made += [r.id for r in recalls]
        _ack(fd, {"trial": trial, "recalls": [r.id for r in recalls], "at": time.time()})


def _ack(fd: int, record: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(record) + "\n").encode("utf-8"))  # one write(): whole or absent after a SIGKILL


def run_trials(
    folder: Path, *, trials: int, seed: int = 0, delays: tuple[float, float] = (0.05, 0.4)
) -> dict[str, Any]:
    """``trials`` workers killed after seeded random delays, then every check; counts of each outcome."""
    folder.mkdir(parents=True, exist_ok=True)
    url, ack_path = f"sqlite:///{folder / 'memory.db'}", folder / "acks.jsonl"
    seed_store(url)
    rng = random.Random(seed)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    killed: dict[int, float] = {}
    for trial in range(trials):
        theirs, ours = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=worker, args=(url, str(ack_path), trial, rng.randrange(2**31), ours))
        proc.start()
        if not theirs.poll(60):
            raise RuntimeError(f"group commit trial {trial}: the worker did not start within 60 s")
        time.sleep(rng.uniform(*delays))
        killed[trial] = time.time()
        if proc.pid is not None and proc.exitcode is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.join()
    return check(url, read_acks(ack_path), killed)


def check(url: str, acks: list[dict[str, Any]], killed: dict[int, float]) -> dict[str, Any]:
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        out: dict[str, Any] = {
            "integrity_failures": int(conn.execute("PRAGMA integrity_check").fetchall() != [("ok",)])
        }
        logged = {row[0] for row in conn.execute("SELECT id FROM memory_recalls")}
        applied = conn.execute(
            "SELECT id, recall_id, reward FROM memory_feedback ORDER BY applied_at, rowid"
        ).fetchall()
        heads = conn.execute("SELECT id, candidates FROM memory_recalls").fetchall()
        stored = {i: (q, v) for i, q, v in conn.execute("SELECT id, q, visits FROM memory_items")}
    acked_feedback = {a["feedback"] for a in acks if "feedback" in a}
    out["acknowledged_feedback"], out["feedback_lost"] = (
        len(acked_feedback),
        len(acked_feedback - {a[0] for a in applied}),
    )
    out["q_or_visits_off_replay"] = replay_mismatches(url, applied, dict(heads), stored)
    made = [(r, a["at"], a["trial"]) for a in acks if "recalls" in a for r in a["recalls"]]
    lost = [(r, at, t) for r, at, t in made if r not in logged]
    out["acknowledged_recalls"], out["recalls_lost"] = len(made), len(lost)
    ages = [killed[t] - at for _, at, t in lost]
    out["lost_recall_max_age_s"] = round(max(ages, default=0.0), 4)
    out["recalls_lost_outside_window"] = sum(age > DELAY + WINDOW_SLACK for age in ages)
    out["lost_recalls_rated_silently"] = rated_silently(url, [r for r, _, _ in lost[:10]])
    return out


def replay_mismatches(url: str, applied: list[Any], heads: dict[str, bytes], stored: dict[str, Any]) -> int:
    """Memories whose stored Q or visits differ from the rule replayed over ``applied`` in order."""
    from sqlalchemy import create_engine

    engine = create_engine(url)
    with engine.connect() as conn:
        selections = candidates_of(conn, list(heads.items()))
    engine.dispose()
    q = dict.fromkeys(stored, CONFIG.q_init)
    visits = dict.fromkeys(stored, 0)
    for _, recall_id, reward in applied:
        for item in selections[recall_id].selection()[0]:
            q[item] = float(td_update(q[item], reward, CONFIG.alpha))
            visits[item] += 1
    return sum(1 for i, (sq, sv) in stored.items() if (sq, sv) != (q[i], visits[i]))


def rated_silently(url: str, lost: list[str]) -> int:
    """Of these lost recalls, how many a reinforce by id did not refuse with a ``StoreError`` naming the window."""
    silent = 0
    with MemoryStore(url, embedder=HashEmbedder(DIM), config=CONFIG) as store:
        before = [(m.id, m.q, m.visits) for m in store.items()]
        for recall_id in lost:
            try:
                store.reinforce(recall_id, 1.0, namespace=NAMESPACE, feedback_id=f"late-{recall_id}")
                silent += 1
            except StoreError as e:
                silent += "recall_log_delay" not in str(e)
        silent += [(m.id, m.q, m.visits) for m in store.items()] != before
    return silent


FAILURES = (
    "integrity_failures",
    "feedback_lost",
    "q_or_visits_off_replay",
    "recalls_lost_outside_window",
    "lost_recalls_rated_silently",
)
