"""SIGKILL at random moments of heavy memory writes, reinforcements and index saves: nothing acknowledged is lost.

One SQLite file (or PostgreSQL database) lives through every trial. In each trial a worker process opens
a ``MemoryStore`` on it — finding whatever the previous, killed worker left: a WAL, a stale or torn
index file — and loops ``add`` / ``add_many`` / ``write_many`` / ``retrieve_many`` + ``reinforce_many``
/ ``save_index`` until the parent kills it with SIGKILL after a seeded random delay. Around every call
the worker appends a line to an acknowledgement log: ``begin`` before, ``done`` with the ids written
and the feedback ids applied after it returned. A SIGKILL keeps the page cache, so a line that was
written is there; a torn last line is ignored. Some trials save the index after every write, so kills
land inside ``save_index`` too; the ``begin`` without ``done`` tells where each kill landed.

After each kill the parent checks: ``PRAGMA integrity_check``; every acknowledged id is in
``memory_items`` and every acknowledged feedback id in ``memory_feedback``; each memory's visits equal
the number of applied feedback rows whose recall selected it; feedback ids sent again (acknowledged
by an earlier worker) update nothing; and a store reopened on a copy of the index files reports a
usable index state whose ids and vectors agree with SQL and finds every sampled memory by its own
intent. Workers are forked from a preloaded fork server, so a trial costs its delay plus the checks.

``tests/memory/test_memory_crash.py`` asserts on ``run_trials``; ``bench/reliability_crash.py`` runs it
at size for the reliability report.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import select

from connectors import HashEmbedder
from memory.config import MemoryConfig, RetrievalConfig
from memory.learn.rewards import Reinforcement
from memory.recall.log import candidates_of
from memory.storage.schema import feedback, intents, memory_items, recalls
from memory.store import MemoryStore
from memory.write.writer import WriteEntry

DIM = 32
NAMESPACES = ("default", "tenant-b")
WORDS = "open close door gate lock alarm code safe harbor summit quarry lagoon red blue green amber".split()
WRITE_OPS = ("add", "add_many", "write_many", "reinforce")
INSERT_OPS = WRITE_OPS[:3]
USABLE_STATES = {"loaded", "caught_up", "rebuilt", "built", "database"}
EXACT = RetrievalConfig(k1=1, k2=1, delta=-1.0, lam=0.0)


# -- the worker: runs in the process that gets killed ---------------------------------------------
def worker(
    url: str,
    ack_path: str,
    trial: int,
    seed: int,
    save_every_write: bool,
    started: Any = None,
    after_open: bool = False,
    switch_at: int | None = None,
) -> None:
    """Loop writes, reinforcements and saves on ``url`` until killed, acknowledging each call.

    ``started`` (a pipe end) is told when the process is up, or with ``after_open`` once the store is
    open, so start-up costs (and on a loaded machine, opening) do not eat the delay before the kill.
    ``switch_at`` opens the store with ``index="adaptive"`` and lowers its thresholds (``memory.mirror.adaptive``:
    the switch to a graph at that many items, merges every 32 new ones, each step into the graph 20 ms
    longer), so kills land in its background work too.
    """
    if switch_at is not None:
        import memory.mirror.adaptive as adaptive
        from memory.mirror.graph import Graph

        adaptive.ANN_AT, adaptive.MERGE_AT, adaptive.MERGE_CHUNK = switch_at, 32, 8
        add = Graph.add

        def slow_add(graph: Graph, ids: Any, vecs: Any) -> None:  # a graph this small is built in no time: the
            time.sleep(0.02)  # kills must still land while the worker builds and merges, as at a million items
            add(graph, ids, vecs)

        Graph.add = slow_add  # type: ignore[method-assign]
    if started is not None and not after_open:
        started.send(True)
    rng = random.Random(seed)
    resend = _acked_feedback(Path(ack_path))
    fd = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    _ack(fd, {"begin": "open", "trial": trial})
    config = MemoryConfig(index="adaptive" if switch_at is not None else "auto")
    store = MemoryStore(url, embedder=HashEmbedder(DIM), seed=seed, config=config)
    _ack(fd, {"done": "open", "trial": trial})
    if started is not None and after_open:
        started.send(True)
    for step in range(10**9):
        op = rng.choice(INSERT_OPS if save_every_write else WRITE_OPS)  # an insert leaves the index to save
        ns = rng.choice(NAMESPACES)
        _ack(fd, {"begin": op, "trial": trial})
        done = _call(store, op, ns, f"t{trial}-{step}", rng, resend)
        _ack(fd, {"done": op, "trial": trial, **done, "index_busy": store.index_details(ns)["working"]})
        if save_every_write or rng.random() < 0.1:
            _ack(fd, {"begin": "save", "trial": trial})
            store.save_index()
            _ack(fd, {"done": "save", "trial": trial})


def _call(store: MemoryStore, op: str, ns: str, key: str, rng: random.Random, resend: list[Any]) -> dict[str, Any]:
    """One store call; what it acknowledges (ids written, feedback ids applied, resent updates)."""
    n = rng.randint(1, 12)
    texts = [f"{' '.join(rng.sample(WORDS, 4))} {key}-{i}" for i in range(n)]
    if op == "add":
        item = store.add(texts[0], f"did {key}", namespace=ns, id=f"{key}-0", q=rng.random())
        return {"ids": [item.id]}
    if op == "add_many":
        return {"ids": [m.id for m in store.add_many([(t, f"did {t}") for t in texts], namespace=ns)]}
    if op == "write_many":
        entries = [
            WriteEntry(
                t, trajectory=f"tried {t}", feedback="ok", success=rng.random() < 0.5, namespace=ns, id=f"{key}-{i}"
            )
            for i, t in enumerate(texts)
        ]
        return {"ids": [m.id for m in store.write_many(entries)]}
    queries = [f"{' '.join(rng.sample(WORDS, 4))}" for _ in range(n)]
    recalls = store.retrieve_many(queries, namespace=ns)
    fresh = [Reinforcement(r.id, rng.choice((0.0, 1.0)), f"fb-{key}-{i}", ns) for i, r in enumerate(recalls)]
    again = rng.sample(resend, min(len(resend), rng.randint(0, 3)))
    store.reinforce_many(fresh)
    resent_updated = store.reinforce_many(again) if again else 0
    feedback = [[f.recall, f.reward, f.feedback_id, f.namespace] for f in fresh]
    return {"feedback": feedback, "resent": len(again), "resent_updated": resent_updated}


def _ack(fd: int, record: dict[str, Any]) -> None:
    # One write() per line: a SIGKILL leaves it whole or absent (the page cache outlives the process,
    # so no fsync is needed against a crash of the process, only against one of the machine).
    os.write(fd, (json.dumps(record) + "\n").encode("utf-8"))


def read_acks(path: Path) -> list[dict[str, Any]]:
    """The whole lines of an acknowledgement log (a torn last line is not an acknowledgement)."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")[:-1]  # everything after the last newline is torn
    return [json.loads(line) for line in lines if line]


def _acked_feedback(path: Path) -> list[Reinforcement]:
    """Every acknowledged reinforcement, to send again."""
    return [Reinforcement(r, w, f, ns) for rec in read_acks(path) for r, w, f, ns in rec.get("feedback", [])]


# -- the checks: run in the parent after each kill -----------------------------------------------
def check(url: str, ack_path: Path, scratch: Path, *, samples: int = 40, index: str = "auto") -> dict[str, Any]:
    """What the killed workers left, against what they acknowledged; counts of each kind of failure."""
    acks = read_acks(ack_path)
    out: dict[str, Any] = {"integrity_failures": 0 if integrity_ok(url) else 1}
    acked_ids = {i for rec in acks for i in rec.get("ids", [])}
    acked_fids = {fb[2] for rec in acks for fb in rec.get("feedback", [])}
    out["acknowledged_writes"], out["acknowledged_feedback"] = len(acked_ids), len(acked_fids)
    out["feedback_applied_twice"] = sum(rec.get("resent_updated", 0) for rec in acks)
    out["resent_feedback"] = sum(rec.get("resent", 0) for rec in acks)
    with _reopen(url, ack_path.parent, scratch, index) as store:
        with store.engine.connect() as conn:
            stored_ids = set(conn.execute(select(memory_items.c.id)).scalars())
            stored_fids = set(conn.execute(select(feedback.c.id)).scalars())
            out["visit_mismatches"] = visit_mismatches(conn)
        out["writes_lost"] = len(acked_ids - stored_ids)
        out["feedback_lost"] = len(acked_fids - stored_fids)
        out["index_states"], kinds = index_agreement(store, samples)
    out["index_disagreements"] = sum(kinds.values())
    out.update({f"index_disagreements: {kind}": n for kind, n in kinds.items()})  # which check, in which state
    return out


def integrity_ok(url: str) -> bool:
    """``PRAGMA integrity_check`` and ``foreign_key_check`` on a SQLite file (other databases: True)."""
    if not url.startswith("sqlite:///"):
        return True
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        ok = conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        return ok and not conn.execute("PRAGMA foreign_key_check").fetchall()


def visit_mismatches(conn: Any) -> int:
    """Memories whose visits differ from the applied feedback rows whose recall selected them."""
    applied = conn.execute(
        select(recalls.c.id, recalls.c.candidates).join(feedback, feedback.c.recall_id == recalls.c.id)
    ).all()
    found = candidates_of(conn, list({r[0]: r[1] for r in applied}.items()))
    expected = Counter(item for r in applied for item in found[r[0]].selection()[0])
    visits = dict(conn.execute(select(memory_items.c.id, memory_items.c.visits)).all())
    return sum(1 for item, v in visits.items() if v != expected.get(item, 0))


class _reopen:
    """A store reopened on a copy of the saved index files, so checking leaves the crash's files alone."""

    def __init__(self, url: str, folder: Path, scratch: Path, index: str = "auto") -> None:
        shutil.rmtree(scratch, ignore_errors=True)
        index_dir = folder / "memory.db.faiss"
        if index_dir.exists():
            shutil.copytree(index_dir, scratch)
        self.store = MemoryStore(
            url,
            embedder=HashEmbedder(DIM),
            index_path=scratch if url.startswith("sqlite") else None,
            config=MemoryConfig(index=index),  # type: ignore[arg-type]
        )

    def __enter__(self) -> MemoryStore:
        return self.store

    def __exit__(self, *exc: object) -> None:
        self.store.close()


def index_agreement(store: MemoryStore, samples: int) -> tuple[dict[str, str], Counter[str]]:
    """Each namespace's index state, and the checks that found the index disagreeing with SQL, counted by what
    disagreed and the state the index was obtained in."""
    states = {ns: store.index_status(ns) for ns in NAMESPACES}
    bad: Counter[str] = Counter(f"unusable state {s}" for s in states.values() if s not in USABLE_STATES)
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(memory_items.c.namespace, memory_items.c.seq, intents.c.text).join(
                intents, intents.c.id == memory_items.c.intent_id
            )
        ).all()
    for ns in NAMESPACES:
        mine = [r for r in rows if r[0] == ns]
        mirror = store._mirrors.loaded(ns)  # noqa: SLF001 - the in-process index is what is checked
        if mirror is not None and states[ns] != "database":
            held = sorted(int(i) for i in mirror.index.ids())  # type: ignore[attr-defined]
            bad[f"ids differ ({states[ns]})"] += held != sorted(int(r[1]) for r in mine)
        picked = random.Random(len(mine)).sample(mine, min(samples, len(mine)))
        # The intent key's own text embeds to the stored vector exactly: the nearest item is at cosine 1.
        found = store.retrieve_many([r[2] for r in picked], namespace=ns, config=EXACT, record=False)
        bad[f"a key's own text missed ({states[ns]})"] += sum(
            1 for f in found if not f.details or f.details[0].sim < 0.999
        )
    return states, +bad  # the kinds that happened


# -- the trials ----------------------------------------------------------------------------------
def run_trials(
    url: str,
    folder: Path,
    *,
    trials: int,
    seed: int = 0,
    delays: tuple[float, float] = (0.02, 0.6),
    switch_at: int | None = None,
    until: dict[str, int] | None = None,
    most: int | None = None,
) -> dict[str, Any]:
    """``trials`` workers on one database, each killed after a seeded random delay and then checked.

    ``delays`` bounds the uniform delay from the worker's start to its kill (opening a store on
    PostgreSQL takes longer: give it a later window).

    Every second trial inserts and saves the index after each insert, so kills land inside
    ``save_index`` as well (a few of them in every run, whatever the machine's speed). In one trial of
    four the delay runs from the worker's start, so some kills land while the store opens; in the others
    from the open store, so a slow or busy machine still does calls before the kill (a test asserts a
    floor on them: 50 trials on a machine running three test suites at once acknowledged only 75 writes
    when every delay ran from the start).
    ``switch_at``: the workers' default index switches to a graph at that many items and merges often
    (``worker``); ``landed["index busy"]`` counts the kills that came while it worked in the background.
    ``until``: after ``trials``, more trials (up to ``most`` in all) while fewer kills than it asks landed
    where it names (``{"inside reinforce": 5}``): where a kill lands is chance, and a call whose share of
    the worker's time shrinks would otherwise go unchecked in some runs (4 of 50 once, against a floor of 5).
    Returns totals: failures of each kind (all must be 0), where the kills landed, index states seen, and
    how many trials ran.
    """
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    ack_path = folder / "acks.jsonl"
    totals: Counter[str] = Counter()
    landed: Counter[str] = Counter()
    states: Counter[str] = Counter()
    floors, cap = dict(until or {}), max(trials, most or trials)
    trial, acknowledged = 0, {}
    while trial < trials or (trial < cap and any(landed[k] < n for k, n in floors.items())):
        theirs, ours = ctx.Pipe(duplex=False)
        args = (url, str(ack_path), trial, rng.randrange(2**31), trial % 2 == 1, ours, trial % 4 != 0, switch_at)
        proc = ctx.Process(target=worker, args=args)
        proc.start()
        if not theirs.poll(60):
            raise RuntimeError(f"crash trial {trial}: the worker did not start within 60 s")
        time.sleep(rng.uniform(*delays))
        if proc.pid is not None and proc.exitcode is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        totals["worker_errors"] += proc.exitcode != -signal.SIGKILL
        acks = read_acks(ack_path)
        landed[_landed(acks, trial)] += 1
        mine = [a for a in acks if a.get("trial") == trial and "done" in a]
        landed["index busy"] += bool(mine) and bool(mine[-1].get("index_busy"))
        found = check(url, ack_path, folder / "scratch-index", index="adaptive" if switch_at is not None else "auto")
        states.update(found.pop("index_states").values())
        totals.update({k: v for k, v in found.items() if not k.startswith("acknowledged")})
        acknowledged = {k: v for k, v in found.items() if k.startswith("acknowledged")}  # all trials' so far
        trial += 1
    totals.update(acknowledged)
    index_dir = folder / "memory.db.faiss"
    totals["leftover_temp_files"] = len(list(index_dir.glob("*.tmp"))) if index_dir.exists() else 0
    return {"trials": trial, "totals": dict(totals), "landed": dict(landed), "index_states": dict(states)}


def _landed(acks: list[dict[str, Any]], trial: int) -> str:
    """Where trial ``trial``'s kill landed: inside a call (its ``begin`` has no ``done``) or between calls."""
    mine = [a for a in acks if a.get("trial") == trial]
    if not mine:
        return "before open"
    return f"inside {mine[-1]['begin']}" if "begin" in mine[-1] else "between calls"


FAILURES = {
    "acknowledged writes lost": "writes_lost",
    "acknowledged feedback lost": "feedback_lost",
    "integrity check failures": "integrity_failures",
    "index disagreements after reopen": "index_disagreements",
    "visit counts disagreeing with the feedback log": "visit_mismatches",
    "feedback applied twice": "feedback_applied_twice",
    "workers that died of anything but SIGKILL": "worker_errors",
}
