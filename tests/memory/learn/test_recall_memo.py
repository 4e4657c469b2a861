"""Provenance edges from the process's memo of its recent recalls (``memory.recall.planning.RECENT``) are exactly the edges
read from the recall log: a recall the log does not hold (``record=False``, expired) links nothing, a memory
removed since or of another namespace is no parent, and a recall made by another store or another process
(unknown to the memo) is read from the log and still gets its edges."""

from __future__ import annotations

import doctest
import json
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import create_engine, select

import memory.recall.planning
from connectors.errors import StoreError
from memory import ForgetConfig, MemoryConfig, MemoryStore, RetrievalConfig
from memory.learn.provenance import selected_own
from memory.learn.rewards import Reinforcement
from memory.learn.targets import logged_namespaces, recall_targets, resolve_recall
from memory.recall.planning import RECENT, Remembered
from memory.storage.schema import links
from tests.memory.conftest import sqlite_only

Open = Callable[..., MemoryStore]

TEAM = "Zürich-Nordhafen-Logistik-Team-07/solver"
OTHER = "Kraków-Südhafen-Spedition-Team-12/solver"
BASE = "Nordhafen-Basiswissen-gemeinsam-für-alle-Teams"
PICK3 = RetrievalConfig(k1=10, k2=3, lam=0.0)
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def fresh_memo() -> Iterator[None]:
    RECENT.clear()
    yield
    RECENT.clear()


def edges(url: str) -> set[tuple[str, str]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(links.c.child_id, links.c.parent_id).where(links.c.relation == "context"))
            return {(r[0], r[1]) for r in rows}
    finally:
        engine.dispose()


def seed(store: MemoryStore, namespace: str) -> list[str]:
    rows = [(f"Kühlcontainer Liegeplatz {i} anschließen", f"Stecker {chr(65 + i)}") for i in range(6)]
    return [m.id for m in store.add_many(rows, namespace=namespace)]


def test_the_memo_gives_what_the_log_gives(open_store: Open) -> None:
    store = open_store()
    team, other = seed(store, TEAM), seed(store, OTHER)
    store.add_many([("Kühlcontainer Liegeplatz Sicherheitsregel", "Stopp bei Sturm")], namespace=BASE)
    made = store.retrieve_many(
        ["Kühlcontainer Liegeplatz 1", "Kühlcontainer Liegeplatz 4"], namespace=TEAM, config=PICK3
    )
    shared = store.retrieve("Kühlcontainer Liegeplatz Regel", namespace=TEAM, shared=BASE, config=PICK3)
    foreign = store.retrieve("Kühlcontainer Liegeplatz 2", namespace=OTHER, config=PICK3)
    unlogged = store.retrieve("Kühlcontainer Liegeplatz 3", namespace=TEAM, config=PICK3, record=False)
    removed = made[0].ids[0]
    assert store.remove([removed], namespace=TEAM) == 1  # selected, then removed: no parent any more
    named = [r.id for r in (*made, shared, foreign, unlogged)] + ["nie-protokolliert-0000"]
    assert all(RECENT.get(r) is not None for r in named[:-1])

    def both_ways(namespace: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        saved = {r: RECENT.get(r) for r in named}
        engine = create_engine(store.url)
        try:
            with engine.connect() as conn:
                memo = selected_own(conn, named, namespace)
                RECENT.clear()
                logged = selected_own(conn, named, namespace)
        finally:
            engine.dispose()
        for r, remembered in saved.items():  # as the store remembered them
            if remembered is not None:
                RECENT.remember(r, remembered)
        return memo, logged

    memo, logged = both_ways(TEAM)
    assert memo == logged
    for r in made:
        assert memo[r.id] == [i for i in r.ids if i != removed] and len(r.ids) == 3
    assert shared.id in memo and all(i in team for i in memo[shared.id])  # the shared memory is no parent
    assert foreign.id not in memo and unlogged.id not in memo
    memo, logged = both_ways(OTHER)
    assert memo == logged == {foreign.id: list(foreign.ids)} and set(foreign.ids) <= set(other)


def test_an_expired_recall_links_nothing_though_the_memo_knows_it(open_store: Open) -> None:
    store = open_store(MemoryConfig(retrieval=PICK3))
    seed(store, TEAM)
    recall = store.retrieve("Kühlcontainer Liegeplatz 5", namespace=TEAM)
    store.prune(TEAM, config=ForgetConfig(recall_retention=0.0), now=time.time() + 1)
    assert RECENT.get(recall.id) is not None
    child = store.write("Kühlcontainer prüfen", trajectory="t", feedback="ok", success=True, namespace=TEAM,
                        provenance={"recalls": [recall.id]})  # fmt: skip
    assert not {c for c, _ in edges(store.url) if c == child.id}


def test_a_recall_made_by_another_store_on_the_same_file_gets_its_edges(open_store: Open) -> None:
    first, second = open_store(), open_store()
    seed(first, TEAM)
    recall = first.retrieve("Kühlcontainer Liegeplatz 2", namespace=TEAM, config=PICK3)
    RECENT.clear()  # as in a process that did not make it
    child = second.write("Kühlcontainer Liegeplatz 2 prüfen", trajectory="t", feedback="ok", success=True,
                         namespace=TEAM, provenance={"recalls": [recall.id]})  # fmt: skip
    assert {p for c, p in edges(second.url) if c == child.id} == set(recall.ids) and len(recall.ids) == 3


@sqlite_only
def test_a_recall_made_by_another_process_gets_its_edges(open_store: Open, db_url: str) -> None:
    store = open_store()
    seed(store, TEAM)
    script = textwrap.dedent(f"""
        import json
        from connectors.embedders import HashEmbedder
        from memory import MemoryStore, RetrievalConfig
        with MemoryStore({db_url!r}, embedder=HashEmbedder(dim=64)) as s:
            r = s.retrieve("Kühlcontainer Liegeplatz 4", namespace={TEAM!r}, config=RetrievalConfig(k1=10, k2=3, lam=0.0))
            print(json.dumps([r.id, list(r.ids)]))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    recall_id, selected = json.loads(done.stdout.strip().splitlines()[-1])
    assert RECENT.get(recall_id) is None and len(selected) == 3
    child = store.write("Kühlcontainer Liegeplatz 4 prüfen", trajectory="t", feedback="ok", success=True,
                        namespace=TEAM, provenance={"recalls": [recall_id]})  # fmt: skip
    assert {p for c, p in edges(store.url) if c == child.id} == set(selected)


def test_reinforcing_by_id_from_the_memo_credits_what_the_log_credits(open_store: Open) -> None:
    store = open_store(MemoryConfig(credit="score"))
    seed(store, TEAM), seed(store, OTHER)
    (base,) = [
        m.id for m in store.add_many([("Kühlcontainer Liegeplatz Sicherheitsregel", "Stopp bei Sturm")], namespace=BASE)
    ]
    made = store.retrieve_many(["Kühlcontainer Liegeplatz 1", "Kühlcontainer 5"], namespace=TEAM, config=PICK3)
    shared = store.retrieve("Kühlcontainer Liegeplatz Regel", namespace=TEAM, shared=BASE, config=PICK3)
    assert base in shared.ids
    unlogged = store.retrieve("Kühlcontainer Liegeplatz 3", namespace=TEAM, config=PICK3, record=False)
    asked = [(r.id, TEAM) for r in (*made, shared)] + [(made[0].id, OTHER), (made[0].id, None), (unlogged.id, TEAM)]
    store.flush()  # read below through a connection of the test's own
    engine = create_engine(store.url)
    try:
        with engine.connect() as conn:
            logged = logged_namespaces(conn, [rid for rid, _ in asked])
            assert logged == {r.id: TEAM for r in (*made, shared)}
            for rid, ns in asked:
                got = outcome(lambda rid=rid, ns=ns: resolve_recall(conn, rid, ns, logged))
                assert got == outcome(lambda rid=rid, ns=ns: recall_targets(conn, rid, ns)), (rid, ns)
                if ns == TEAM and rid != unlogged.id:
                    assert got[2] == [i for r in (*made, shared) if r.id == rid for i in r.ids]
                else:
                    assert "unknown recall id" in str(got)
    finally:
        engine.dispose()
    store.reinforce_many([Reinforcement(r.id, 1.0, None, TEAM) for r in (*made, shared)])
    own = {i.id for r in (*made, shared) for i in r.items if i.namespace == TEAM}
    assert {m.id for m in store.items(TEAM) if m.visits} == own
    assert store.get(base, namespace=BASE).visits == 0  # a shared memory never moves


def outcome(call: Callable[[], tuple[str, str, list[str], np.ndarray]]) -> tuple[object, ...] | str:
    """What a lookup returns (scores as bytes: bit for bit), or its error's message."""
    try:
        rid, ns, ids, scores = call()
    except StoreError as e:
        return re.sub(r"made [0-9.]+ s ago", "made … s ago", str(e))  # two lookups are never the same age
    return rid, ns, ids, scores.dtype.str, scores.tobytes()


def test_the_memo_keeps_the_most_recent_recalls() -> None:
    memo = memory.recall.planning.Selections(size=3)
    for i in range(5):
        memo.remember(f"Abruf-Nordhafen-{i}", Remembered((f"Erinnerung-{i}",), np.array([1.0]), ()))
    kept = [memo.get(f"Abruf-Nordhafen-{i}") for i in range(5)]
    assert [None if k is None else k.ids for k in kept] == [
        None,
        None,
        ("Erinnerung-2",),
        ("Erinnerung-3",),
        ("Erinnerung-4",),
    ]
    assert doctest.testmod(memory.recall.planning).failed == 0
