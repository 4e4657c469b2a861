"""Several processes on one store: no lost update, fresh reads, identical recalls after reopening."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

from connectors.embedders import HashEmbedder
from memory.config import MemoryConfig, RetrievalConfig
from memory.scoring import td_update
from memory.store import MemoryStore

N_UPDATES = 200
CONFIG = MemoryConfig(retrieval=RetrievalConfig(k1=4, k2=2, lam=0.5))
QUERIES = ["restart the web server", "rotate api keys", "backup the database", "deploy to staging"]


def _open(url: str) -> MemoryStore:
    return MemoryStore(url, embedder=HashEmbedder(dim=64), config=CONFIG)


def _reinforce_worker(url: str, recall_id: str, tag: str, start: mp.synchronize.Event) -> int:
    store = _open(url)
    start.wait(30)
    updated = sum(store.reinforce(recall_id, 1.0, feedback_id=f"{tag}-{i}") for i in range(N_UPDATES))
    store.close()
    return updated


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
    start = ctx.Manager().Event()
    with ctx.Pool(2) as pool:
        jobs = [pool.apply_async(_reinforce_worker, (url, r.id, tag, start)) for r, tag in ((web, "a"), (keys, "b"))]
        start.set()
        counts = [job.get(timeout=120) for job in jobs]
    assert counts == [N_UPDATES * len(web.ids), N_UPDATES * len(keys.ids)]

    def expected(n: int) -> float:  # the same update n times: order cannot matter, floats included
        q = 0.0
        for _ in range(n):
            q = float(td_update(q, 1.0, CONFIG.alpha))
        return q

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
