"""Several processes on one store: no lost update, fresh reads, identical recalls after reopening.

SQLite: two processes on one file. PostgreSQL: four processes on one database, every transaction
touching the same rows.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from connectors.embedders import HashEmbedder
from memory.config import MemoryConfig, RetrievalConfig
from memory.learn.rule import td_update
from memory.store import MemoryStore, Recall

N_UPDATES = 200
N_ADDS = 20  # memories each worker adds to the "crowd" namespace, one transaction each
CAPACITY = 30  # the crowd's capacity: the workers' adds evict each other's
# α small enough that Q is still moving after 400 updates (with α = 0.3 it reaches 1.0 - 1e-16 within
# ~100 and a lost update would no longer show in Q, only in visits).
CONFIG = MemoryConfig(alpha=0.01, retrieval=RetrievalConfig(k1=4, k2=2, lam=0.5))
QUERIES = ["restart the web server", "rotate api keys", "backup the database", "deploy to staging"]


def _open(url: str) -> MemoryStore:
    return MemoryStore(url, embedder=HashEmbedder(dim=64), config=CONFIG)


def _reinforce_worker(url: str, recall_id: str, shared_id: str, tag: str, barrier: Any, results: Any) -> None:
    """Reinforce ``recall_id`` with this worker's own feedback ids, then ``shared_id`` with ids every
    worker uses (each must apply once in all), then add memories to a namespace at capacity while the
    others do; report both counts and the seconds of the first part."""
    store = _open(url)
    barrier.wait(60)  # every process is up and has opened the store: start together
    started = time.perf_counter()
    own = sum(store.reinforce(recall_id, 1.0, feedback_id=f"{tag}-{i}") for i in range(N_UPDATES))
    seconds = time.perf_counter() - started
    barrier.wait(60)
    shared = sum(store.reinforce(shared_id, 1.0, feedback_id=f"shared-{i}") for i in range(N_UPDATES))
    store.close()
    crowd = MemoryStore(url, embedder=HashEmbedder(dim=64), config=replace(CONFIG, capacity=CAPACITY))
    barrier.wait(60)
    for i in range(N_ADDS):
        crowd.add(f"{tag} chore {i}", "done", namespace="crowd")
    crowd.close()
    results.put((own, shared, seconds))


def _run_workers(url: str, recall_ids: list[str]) -> tuple[list[int], int, float]:
    """One spawned process per recall: each reinforces its recall ``N_UPDATES`` times, then all race
    on the first recall with shared feedback ids. Per-worker counts, the shared total, the slowest
    worker's seconds for its own part."""
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(len(recall_ids)), ctx.Queue()
    workers = [
        ctx.Process(target=_reinforce_worker, args=(url, rid, recall_ids[0], f"w{i}", barrier, results))
        for i, rid in enumerate(recall_ids)
    ]
    for w in workers:
        w.start()
    answers: list[tuple[int, int, float]] = []
    deadline = time.monotonic() + 300
    while len(answers) < len(workers):  # a worker that dies fails the test now, not at the timeout
        assert time.monotonic() < deadline, "the workers did not finish"
        failed = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
        assert not failed, f"a worker failed with exit code {failed[0]}; its traceback is above"
        with contextlib.suppress(queue.Empty):
            answers.append(results.get(timeout=0.5))
    for w in workers:
        w.join(30)
        assert w.exitcode == 0
    return sorted(a[0] for a in answers), sum(a[1] for a in answers), max(a[2] for a in answers)


def check_crowd(store: MemoryStore, workers: int) -> None:
    """The namespace the workers filled at capacity: exactly at capacity, the newest kept, and this
    process's mirror equal to SQL once it catches up."""
    in_sql = store.items("crowd")
    assert len(in_sql) == CAPACITY < workers * N_ADDS
    assert store.stats("crowd")["count"] == CAPACITY
    store.retrieve("chore", namespace="crowd", record=False)  # loads and catches up the mirror
    mirror = store._mirrors.loaded("crowd")
    assert mirror is not None and sorted(mirror.ids.tolist()) == sorted(i.id for i in in_sql)
    kept: dict[str, list[int]] = {}
    for item in in_sql:
        tag, _, i = item.intent.split()
        kept.setdefault(tag, []).append(int(i))
    for chores in kept.values():  # Q and visits tie, so the oldest went first: each worker keeps its last
        assert sorted(chores) == list(range(N_ADDS - len(chores), N_ADDS))


def visits_expected(item_id: str, recalls: list[Recall]) -> int:
    """Updates an item gets: one per reinforce of each recall holding it, plus the shared race's."""
    return N_UPDATES * (sum(item_id in r.ids for r in recalls) + (item_id in recalls[0].ids))


def expected_q(n: int) -> float:
    """Q after n updates with reward 1 from Q = 0: the same update n times, so order cannot matter,
    floats included."""
    q = 0.0
    for _ in range(n):
        q = float(td_update(q, 1.0, CONFIG.alpha))
    return q


def _recall_worker(url: str, add: bool) -> list[tuple[str, ...]]:
    store = _open(url)
    if add:
        store.add("rotate the api keys every month", "use the vault CLI")
    out = [store.retrieve(q).ids for q in QUERIES]
    store.close()
    return out


def _seed_store(url: str) -> MemoryStore:
    store = _open(url)
    store.add_many(
        [
            ("restart the web server", "systemctl restart nginx"),
            ("restart the web server gracefully", "nginx -s reload"),
            ("rotate api keys", "regenerate in the console"),
            ("backup the database", "pg_dump nightly"),
            ("deploy to staging", "make deploy ENV=staging"),
        ]
    )
    return store


def test_two_processes_reinforcing_concurrently_lose_no_update(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    store = _seed_store(url)
    web, keys = store.retrieve("restart the web server"), store.retrieve("rotate api keys restart the server")
    shared = set(web.ids) & set(keys.ids)
    assert shared and set(web.ids) != set(keys.ids)
    counts, shared_total, _ = _run_workers(url, [web.id, keys.id])
    assert counts == sorted([N_UPDATES * len(web.ids), N_UPDATES * len(keys.ids)])
    assert shared_total == N_UPDATES * len(web.ids)  # each shared feedback id applied once
    assert expected_q(N_UPDATES) < expected_q(3 * N_UPDATES) < 1.0
    for item_id in set(web.ids) | set(keys.ids):
        n = visits_expected(item_id, [web, keys])
        item = store.get(item_id)
        assert (item.q, item.visits) == (expected_q(n), n)
    check_crowd(store, 2)
    fresh = {d.item.id: d.item.q for d in store.retrieve("restart the web server").details}
    assert fresh == {i: store.get(i).q for i in fresh}  # this process's mirror caught up
    store.close()


@pytest.mark.postgres
def test_four_processes_reinforcing_the_same_memories_on_postgres_lose_no_update(pg_url: str) -> None:
    """READ COMMITTED, four writers, every reinforce touching the two memories all recalls share;
    then all four apply the same feedback ids at once, and each id counts once."""
    store = _seed_store(pg_url)
    query = "restart the web server"
    recalls = [store.retrieve(query, config=RetrievalConfig(k1=5, k2=k2, delta=-1.0)) for k2 in (2, 3, 4, 5)]
    shared = set.intersection(*(set(r.ids) for r in recalls))
    assert len(shared) == 2 and len(recalls[-1].ids) == 5  # top 2 in all four, the 5th in one
    counts, shared_total, seconds = _run_workers(pg_url, [r.id for r in recalls])
    assert counts == [N_UPDATES * k2 for k2 in (2, 3, 4, 5)]
    assert shared_total == N_UPDATES * 2  # 4 processes racing on the same feedback ids: each applied once
    for item_id in recalls[-1].ids:
        n = visits_expected(item_id, recalls)
        item = store.get(item_id)
        assert (item.q, item.visits) == (expected_q(n), n), item_id
    assert store.stats("default")["visits"]["total"] == N_UPDATES * (2 + 3 + 4 + 5 + 2)
    check_crowd(store, 4)
    fresh = {d.item.id: d.item.q for d in store.retrieve(query).details}
    assert fresh == {i: store.get(i).q for i in fresh}  # this process's mirror caught up
    print(f"\n4 processes x {N_UPDATES} reinforce calls on PostgreSQL: {seconds:.2f} s for the slowest")
    store.close()


def test_reopened_store_in_another_process_recalls_the_same_and_sees_new_writes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    store = _seed_store(url)
    store.reinforce(store.retrieve("restart the web server"), 1.0)
    here = [store.retrieve(q).ids for q in QUERIES]
    store.close()
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        assert pool.apply(_recall_worker, (url, False)) == here
        live = _open(url)
        before = live.retrieve("rotate the api keys every month").ids
        there = pool.apply(_recall_worker, (url, True))  # the child adds a memory
    after = live.retrieve("rotate the api keys every month")
    assert after.items[0].intent == "rotate the api keys every month" and after.ids != before
    assert [live.retrieve(q).ids for q in QUERIES] == there
    live.close()
