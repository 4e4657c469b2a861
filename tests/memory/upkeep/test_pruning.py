"""Forgetting with a budget through the real store (memory/upkeep/pruning.py, memory/upkeep/restoring.py, issue 24 item 2):
tiers, merges, the removal log, restoring from it, retention, namespaces, reopening, and a SIGKILL mid-prune."""

from __future__ import annotations

import doctest
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, func, select, update

import memory.store
import memory.upkeep.pruning
import memory.upkeep.restoring
from connectors.embedders import HashEmbedder
from connectors.errors import ConfigError
from memory.config import DAY, ForgetConfig, MemoryConfig, RetrievalConfig
from memory.storage.schema import intents, memory_items, recalls, removals
from memory.store import MemoryStore
from memory.upkeep.forgetting import merged_values
from tests.memory.conftest import sqlite_only

TENANT = "Zürich-Nordhafen-Logistik-Team-07/solver"
OTHER = "Genève-Quai-Wilson-Disposition-Team-12/solver"
WOODS = ["Ahorn", "Birke", "Eiche", "Linde", "Ulme", "Weide"]
ONE = RetrievalConfig(k1=1, k2=1)
ROOT = Path(__file__).resolve().parents[3]

Opener = Callable[..., MemoryStore]


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder(dim=256)  # wide enough that the few intents here never collide


def edit(store: MemoryStore, item_id: str, **values: Any) -> None:
    """Change a stored row behind the store's back (time passing, learned values); reopen to see it."""
    with store.engine.begin() as conn:
        conn.execute(update(memory_items).where(memory_items.c.id == item_id).values(**values))


def recall_at(store: MemoryStore, intent: str, when: float, namespace: str = TENANT) -> str:
    """Recall the memory written for ``intent`` and log that recall as made at ``when``."""
    recall = store.retrieve(intent, namespace=namespace, config=ONE)
    store.flush()  # its log row, committed now rather than with the group
    with store.engine.begin() as conn:
        conn.execute(update(recalls).where(recalls.c.id == recall.id).values(created_at=when))
    return recall.ids[0]


def snapshot(store: MemoryStore, namespace: str | None = None) -> list[tuple[Any, ...]]:
    return sorted((m.id, m.namespace, m.q, m.visits, m.valid_to, m.experience) for m in store.items(namespace))


def test_capacity_evicts_by_tier_superseded_low_stale_proven_new(open_store: Opener) -> None:
    store = open_store()
    intents_ = [f"Torcode Lager {w}?" for w in WOODS]
    ids = [
        m.id
        for m in store.add_many([(t, f"Antwort {w}") for t, w in zip(intents_, WOODS, strict=True)], namespace=TENANT)
    ]
    t0 = time.time() - 100 * DAY
    # The worked example of memory.upkeep.forgetting: (q, visits, last recalled day, created day)
    rows = [(0.0, 2, 10, 1), (-0.62, 5, 90, 2), (0.8, 7, 99, 3), (0.1, 1, 60, 4), (0.0, 0, None, 98), (0.35, 4, 95, 5)]
    for item_id, intent, (q, visits, last, created) in zip(ids, intents_, rows, strict=True):
        if last is not None:
            assert recall_at(store, intent, t0 + last * DAY) == item_id
        edit(store, item_id, q=q, visits=visits, created_at=t0 + created * DAY, valid_from=t0 + created * DAY)
    edit(store, ids[0], valid_to=t0 + 50 * DAY, superseded_by=ids[2])
    store = open_store()
    config = ForgetConfig(capacity=3, min_visits=3, stale_after=30 * DAY)

    report = store.prune(TENANT, config=config, now=t0 + 100 * DAY)

    assert [p.item_id for p in report.removed] == [ids[0], ids[1], ids[3]]
    assert [p.reason for p in report.removed] == [
        "superseded",
        "low Q -0.62 after 5 rewards",
        "not recalled in 40 days",
    ]
    assert report.counts == {"superseded": 1, "low": 1, "stale": 1} and report.kept == {TENANT: 3}
    assert [m.id for m in store.items(TENANT)] == [ids[2], ids[4], ids[5]]
    report = store.prune(TENANT, config=ForgetConfig(capacity=1, min_visits=3), now=t0 + 100 * DAY)
    assert [p.item_id for p in report.removed] == [ids[4], ids[5]]  # an untried one, then the lowest proven
    assert report.counts == {"new": 1, "proven": 1}
    assert report.removed[1].reason == "over capacity: lowest kept Q 0.35 after 4 rewards"
    store.add("Torcode Lager Kiefer?", "Antwort Kiefer", namespace=TENANT)
    assert store.prune(TENANT, config=ForgetConfig(capacity=1), now=t0 + 100 * DAY).counts == {"new": 1}

    back = store.restore([ids[0]], namespace=TENANT)  # a superseded memory comes back superseded
    assert back.restored == (ids[0],)
    assert store.get(ids[0], namespace=TENANT).superseded_by == ids[2] and not store.get(ids[0], namespace=TENANT).valid
    assert ids[0] not in store.retrieve(intents_[0], namespace=TENANT).ids


def test_near_duplicates_merge_by_the_documented_rule_on_the_stored_rows(open_store: Opener) -> None:
    store = open_store()
    door, code = "Torcode Lager Ahorn?", "Answer given: 4471"
    same = [m.id for m in store.add_many([(door, code)] * 3, namespace=TENANT)]  # one intent group, one statement
    changed = store.add(door, "Answer given: 1234", namespace=TENANT).id  # same task, another answer
    elsewhere = store.add("Torcode Lager Birke?", code, namespace=TENANT).id  # same answer, another task
    twins = [
        m.id for m in store.add_many([("Torcode Lager Eiche?", code)] * 2, namespace=TENANT, group=False)
    ]  # two keys
    for item_id, (q, visits) in zip(same, [(0.2, 1), (0.6, 3), (-0.4, 0)], strict=True):
        edit(store, item_id, q=q, visits=visits)
    store = open_store()

    report = store.prune(TENANT, config=ForgetConfig(merge_similarity=0.99))

    assert report.counts == {"merged": 3}
    assert {(p.item_id, p.merged_into) for p in report.removed} == {
        (same[0], same[1]),
        (same[2], same[1]),
        (twins[1], twins[0]),
    }
    q, visits = merged_values(*merged_values(0.6, 3, 0.2, 1), -0.4, 0)  # the most visited keeps, in write order
    kept = store.get(same[1], namespace=TENANT)
    assert (kept.q, kept.visits) == (q, visits) == (pytest.approx(0.5), 4)
    assert {m.id for m in store.items(TENANT)} == {same[1], changed, elsewhere, twins[0]}
    log = {e.removal.item.id: e.removal for e in store.history(TENANT)}
    assert log[same[0]].kept_before == (0.6, 3) and (log[same[0]].item.q, log[same[0]].item.visits) == (0.2, 1)
    assert log[same[2]].kept_before == merged_values(0.6, 3, 0.2, 1) and log[same[2]].reason == f"merged into {same[1]}"

    assert store.restore([same[2]], namespace=TENANT).keepers == (same[1],)  # the latest merge: exactly undone
    assert (store.get(same[1], namespace=TENANT).q, store.get(same[1], namespace=TENANT).visits) == merged_values(
        0.6, 3, 0.2, 1
    )
    store.restore([same[0]], namespace=TENANT)
    assert (store.get(same[1], namespace=TENANT).q, store.get(same[1], namespace=TENANT).visits) == (0.6, 3)
    assert [(m.q, m.visits) for m in store.items(TENANT) if m.id in (same[0], same[2])] == [(-0.4, 0), (0.2, 1)]


def test_undoing_a_merge_after_the_keeper_learned_hands_back_only_what_the_merge_gave(open_store: Opener) -> None:
    store = open_store()
    keep, drop = [m.id for m in store.add_many([("Torcode Lager Linde?", "Answer given: 9902")] * 2, namespace=TENANT)]
    edit(store, keep, q=0.2, visits=3)
    edit(store, drop, q=1.0, visits=1)
    store = open_store()
    store.prune(TENANT, config=ForgetConfig(merge_similarity=0.99))
    assert (store.get(keep, namespace=TENANT).q, store.get(keep, namespace=TENANT).visits) == (pytest.approx(0.4), 4)
    recall = store.retrieve("Torcode Lager Linde?", namespace=TENANT, config=ONE)
    store.reinforce(recall, 0.0)  # α = 0.3: Q 0.4 -> 0.28, 5 visits

    store.restore([drop], namespace=TENANT)

    kept = store.get(keep, namespace=TENANT)
    assert kept.visits == 4 and kept.q == pytest.approx(0.28 - (0.4 - 0.2))
    assert (store.get(drop, namespace=TENANT).q, store.get(drop, namespace=TENANT).visits) == (1.0, 1)


def test_every_removal_is_recorded_with_what_why_and_when(open_store: Opener) -> None:
    store = open_store(MemoryConfig(capacity=2))
    before = time.time()
    a, b, c = (
        store.add(f"Torcode Lager {w}?", f"Antwort {w}", namespace=TENANT, meta={"Schicht": "früh"}).id
        for w in WOODS[:3]
    )
    assert store.remove([b], namespace=TENANT) == 1
    d = store.add("Torcode Lager Linde?", "Antwort Linde", namespace=TENANT).id
    assert [p.item_id for p in store.prune(TENANT, config=ForgetConfig(capacity=1)).removed] == [c]

    log = store.history(TENANT)

    assert [e.removal.item.id for e in log] == [c, b, a]  # newest first
    assert [e.removal.reason for e in log] == [
        "over capacity: new, 0 of 3 rewards in 0 seconds",
        "removed by the caller",
        "over capacity: MemoryConfig.capacity = 2",
    ]
    assert all(e.restorable and e.restored_at is None and e.removal.removed_at >= before for e in log)
    assert log[2].removal.item.intent == "Torcode Lager Ahorn?" and log[2].removal.item.meta["Schicht"] == "früh"
    assert all(len(e.removal.vector or b"") == 256 * 4 for e in log)  # each was its key's last memory
    assert [m.id for m in store.items(TENANT)] == [d]
    assert store.history(TENANT, since=log[0].removal.removed_at) == log[:1]


def test_restore_brings_a_memory_back_exactly_and_every_process_recalls_it(open_store: Opener) -> None:
    store, other = open_store(), open_store()
    item = store.add(
        "Torcode Lager Ulme?", "Antwort: 5521", namespace=TENANT, success=True, meta={"Quelle": "Übergabe"}
    )
    store.reinforce(store.retrieve("Torcode Lager Ulme?", namespace=TENANT), 1.0)
    original = store.get(item.id, namespace=TENANT)
    assert other.retrieve("Torcode Lager Ulme?", namespace=TENANT).ids == (item.id,)
    store.remove([item.id], namespace=TENANT)
    assert other.retrieve("Torcode Lager Ulme?", namespace=TENANT).ids == ()

    report = store.restore([item.id], namespace=TENANT)

    assert report.restored == (item.id,) and report.refused == ()
    assert store.get(item.id, namespace=TENANT) == original  # id, texts, Q, visits, meta, validity, kind
    assert store.retrieve("Torcode Lager Ulme?", namespace=TENANT).ids == (item.id,)
    assert other.retrieve("Torcode Lager Ulme?", namespace=TENANT).ids == (item.id,)
    assert store.history(TENANT)[0].restored_at is not None and not store.history(TENANT)[0].restorable


def test_a_key_whose_last_memory_went_is_recreated_from_the_record(open_store: Opener) -> None:
    store = open_store()
    first, second = [
        m.id
        for m in store.add_many(
            [("Torcode Lager Weide?", "Antwort 1"), ("Torcode Lager Weide?", "Antwort 2")], namespace=TENANT
        )
    ]
    store.remove([first], namespace=TENANT)
    store.remove([second], namespace=TENANT)
    vectors = {e.removal.item.id: e.removal.vector for e in store.history(TENANT)}
    assert vectors[first] is None and vectors[second] is not None  # the key went with the second only
    with store.engine.begin() as conn:
        conn.execute(delete(intents).where(intents.c.namespace == TENANT))  # as a cleanup of unused keys would
    store = open_store()

    assert set(store.restore([first, second], namespace=TENANT).restored) == {first, second}

    assert set(store.retrieve("Torcode Lager Weide?", namespace=TENANT).ids) == {first, second}
    assert store.stats(TENANT)["intents"] == 1


def test_replaying_the_log_twice_changes_nothing(open_store: Opener) -> None:
    store = open_store()
    store.add_many(
        [("Torcode Lager Ahorn?", "Answer given: 4471")] * 4 + [("Torcode Lager Birke?", "x")] * 2, namespace=TENANT
    )
    config = ForgetConfig(merge_similarity=0.99, capacity=1)
    before = snapshot(store)
    assert len(store.prune(TENANT, config=config).removed) == 5
    pruned = snapshot(store)
    assert store.prune(TENANT, config=config).removed == () and snapshot(store) == pruned
    ids = [e.id for e in store.history(TENANT)]

    assert len(store.restore(ids, namespace=TENANT).restored) == 5
    again = store.restore(ids, namespace=TENANT)

    assert again.restored == () and set(again.already) == set(ids)
    assert snapshot(store) == before


def test_records_older_than_the_retention_are_refused_then_purged(open_store: Opener) -> None:
    store = open_store()
    keep, old = [
        m.id for m in store.add_many([("Torcode Lager Ahorn?", "a"), ("Torcode Lager Birke?", "b")], namespace=TENANT)
    ]
    store.remove([old], namespace=TENANT)
    later = time.time() + 31 * DAY

    refused = store.restore([old], namespace=TENANT, now=later).refused
    report = store.prune(TENANT, config=ForgetConfig(retention=30 * DAY), now=later)

    assert refused[0][0] == old and "retention" in refused[0][1]
    assert report.purged == 1 and report.removed == () and store.history(TENANT) == []
    assert store.restore([old], namespace=TENANT).refused[0][0] == old
    assert [m.id for m in store.items(TENANT)] == [keep]


def test_the_default_config_forgets_nothing(open_store: Opener) -> None:
    store = open_store()
    store.add_many([("Torcode Lager Ahorn?", "Answer given: 4471")] * 5, namespace=TENANT)
    store.retrieve("Torcode Lager Ahorn?", namespace=TENANT)
    before = snapshot(store)

    report = store.prune(now=time.time() + 400 * DAY)

    assert report.removed == () and report.purged == 0 and report.kept == {TENANT: 5}
    assert snapshot(store) == before and store.history() == []


def test_namespaces_never_touch_each_other(open_store: Opener) -> None:
    store = open_store()
    rows = [("Torcode Lager Ahorn?", "Answer given: 4471")] * 3 + [("Torcode Lager Birke?", "b")]
    mine, theirs = (
        [m.id for m in store.add_many(rows, namespace=TENANT)],
        [m.id for m in store.add_many(rows, namespace=OTHER)],
    )
    their_items = snapshot(store, OTHER)

    report = store.prune(TENANT, config=ForgetConfig(merge_similarity=0.99, capacity=1))

    assert {p.namespace for p in report.removed} == {TENANT} and report.kept == {TENANT: 1}
    assert snapshot(store, OTHER) == their_items and store.history(OTHER) == []
    assert store.restore([mine[0]], namespace=OTHER).refused[0][0] == mine[0]
    assert {p.namespace for p in store.prune(config=ForgetConfig(capacity=2)).removed} == {OTHER}
    assert len(store.items(OTHER)) == 2 and len(store.items(TENANT)) == 1
    assert store.restore([theirs[0]], namespace=TENANT).restored == ()


@sqlite_only
def test_a_reopened_store_sees_the_same_history(open_store: Opener) -> None:
    store = open_store()
    ids = [m.id for m in store.add_many([("Torcode Lager Ahorn?", "Answer given: 4471")] * 3, namespace=TENANT)]
    store.prune(TENANT, config=ForgetConfig(merge_similarity=0.99))
    store.remove([ids[0]], namespace=TENANT)
    log = store.history()
    store.close()

    again = open_store()

    assert again.history() == log and len(log) == 3
    assert set(again.restore([e.id for e in log], namespace=TENANT).restored) == set(ids)
    assert {m.id for m in again.items(TENANT)} == set(ids)


def test_bad_input_is_a_config_error_naming_what_was_expected(store: MemoryStore) -> None:
    with pytest.raises(ConfigError, match="ForgetConfig"):
        store.prune(config={"capacity": 3})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="Unix time"):
        store.prune(now=float("nan"))
    with pytest.raises(ConfigError, match="namespace"):
        store.prune("")
    with pytest.raises(ConfigError, match="single string"):
        store.restore("0123")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="limit"):
        store.history(limit=0)
    with pytest.raises(ConfigError, match="dry_run"):
        store.prune(dry_run="yes")  # type: ignore[arg-type]


def test_a_dry_run_reports_and_changes_nothing(store: MemoryStore) -> None:
    store.add_many([("Torcode Lager Ahorn?", "Answer given: 4471")] * 3, namespace=TENANT)
    before = snapshot(store)
    report = store.prune(config=ForgetConfig(merge_similarity=0.99), dry_run=True)
    assert report.dry_run and report.counts == {"merged": 2}
    assert snapshot(store) == before and store.history() == []


def test_the_documented_examples_run() -> None:
    for module in (memory.upkeep.pruning, memory.upkeep.restoring, memory.store):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


# ---- SIGKILL in the middle of a big prune ---------------------------------------------------------------
STALLED_PRUNE = """
import sys, time
from connectors.embedders import HashEmbedder
from memory.upkeep import pruning
from memory.config import ForgetConfig
from memory.store import MemoryStore

calls, original = [], pruning.delete_items

def stalled(*args, **kwargs):
    out = original(*args, **kwargs)
    calls.append(1)
    if len(calls) == 2:  # the merges and the evictions are written, the transaction is still open
        print("inside", flush=True)
        time.sleep(120)
    return out

pruning.delete_items = stalled
store = MemoryStore(sys.argv[1], embedder=HashEmbedder(dim=256))
store.prune(config=ForgetConfig(merge_similarity=0.999, capacity=1500))
print("committed", flush=True)
"""


def agree(store: MemoryStore) -> int:
    """Check that the keepers' values follow from their merge records (step by step); returns merges seen."""
    stored = {m.id: m for m in store.items()}
    log = store.history(limit=1_000_000)
    chains: dict[str, list[Any]] = defaultdict(list)
    for e in log:
        assert e.removal.item.id not in stored or e.restored_at is not None
        if e.removal.merged_into is not None:
            chains[e.removal.merged_into].append(e)
    final = {e.removal.item.id: (e.removal.item.q, e.removal.item.visits) for e in log if e.removal.merged_into is None}
    for keeper_id, steps in chains.items():
        steps.sort(key=lambda e: e.id)  # removal ids sort in the order they were written
        values = steps[0].removal.kept_before
        for e in steps:
            assert e.removal.kept_before == values
            values = merged_values(*values, e.removal.item.q, e.removal.item.visits)
        keeper = stored.get(keeper_id)
        if keeper is not None:
            assert (keeper.q, keeper.visits) == values
        elif keeper_id in final:
            assert final[keeper_id] == values  # the keeper was evicted later, with the merged values
    return sum(len(s) for s in chains.values())


@sqlite_only
def test_sigkill_during_a_big_prune_leaves_all_of_it_or_none(open_store: Opener, db_url: str) -> None:
    store = open_store()
    store.add_many([(f"Torcode Lager L{i % 2000}x?", f"Answer given: {1000 + i % 2000}") for i in range(20_000)])
    with store.engine.begin() as conn:  # learned values to merge: Q in [0, 0.6], visits in [0, 3]
        c = memory_items.c
        conn.execute(update(memory_items).values(q=(c.seq % 7) * 0.1, visits=c.seq % 4))
    store.close()
    before = snapshot(open_store())

    proc = subprocess.Popen([sys.executable, "-c", STALLED_PRUNE, db_url], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "inside\n"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    after_kill = open_store()
    assert snapshot(after_kill) == before and after_kill.history() == []  # none of it
    report = after_kill.prune(config=ForgetConfig(merge_similarity=0.999, capacity=1500))
    assert report.counts["merged"] == 18_000 and len(report.removed) == 18_500
    whole = open_store()
    assert len(whole.items()) == 1500 and agree(whole) == 18_000  # all of it, keepers and records agreeing
    with whole.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(removals)).scalar_one() == 18_500
