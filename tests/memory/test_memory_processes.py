"""Several processes on one store: no lost update, fresh reads, identical recalls after reopening."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

from connectors.embedders import HashEmbedder
from memory.config import MemoryConfig, RetrievalConfig
from memory.scoring import td_update
from memory.store import MemoryStore

N_UPDATES = 200
# α small enough that Q is still moving after 400 updates (with α = 0.3 it reaches 1.0 - 1e-16 within
# ~100 and a lost update would no longer show in Q, only in visits).
CONFIG = MemoryConfig(alpha=0.01, retrieval=RetrievalConfig(k1=4, k2=2, lam=0.5))
QUERIES = ["restart the web server", "rotate api keys", "backup the database", "deploy to staging"]


def _open(url: str) -> MemoryStore:
    return MemoryStore(url, embedder=HashEmbedder(dim=64), config=CONFIG)


def _reinforce_worker(url: str, recall_id: str, tag: str, barrier: Any, results: Any) -> None:
    store = _open(url)
    barrier.wait(60)  # both processes are up and have opened the store: start together
    results.put(sum(store.reinforce(recall_id, 1.0, feedback_id=f"{tag}-{i}") for i in range(N_UPDATES)))
    store.close()


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
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    workers = [
        ctx.Process(target=_reinforce_worker, args=(url, r.id, tag, barrier, results))
        for r, tag in ((web, "a"), (keys, "b"))
    ]
    for w in workers:
        w.start()
    counts = sorted(results.get(timeout=120) for _ in workers)
    for w in workers:
        w.join(30)
        assert w.exitcode == 0
    assert counts == sorted([N_UPDATES * len(web.ids), N_UPDATES * len(keys.ids)])

    def expected(n: int) -> float:  # the same update n times: order cannot matter, floats included
        q = 0.0
        for _ in range(n):
            q = float(td_update(q, 1.0, CONFIG.alpha))
        return q

    assert expected(N_UPDATES) < expected(2 * N_UPDATES) < 1.0
    for item_id in set(web.ids) | set(keys.ids):
        n = N_UPDATES * ((item_id in web.ids) + (item_id in keys.ids))
        item = store.get(item_id)
        assert (item.q, item.visits) == (expected(n), n)
    fresh = {d.item.id: d.item.q for d in store.retrieve("restart the web server").details}
    assert fresh == {i: store.get(i).q for i in fresh}  # this process's mirror caught up
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
