"""Processes × threads adding, recalling and reinforcing on one store: the sequential result, no lock error.

The workload and its check live in ``tests.reliability.load`` (the benchmark reports the same figures).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from memory.store import MemoryStore
from tests.reliability.load import LOCKED, SHARED, Check, Log, mixed_workload, open_store, reward_of, sequential_q
from tests.reliability.load import check as check_log

PROCESSES, THREADS, ROUNDS = 3, 4, 12


def assert_sequential(result: Check) -> None:
    assert not any(LOCKED in e for e in result.errors), result.errors[:1]
    assert result.errors == [], result.errors[:1]
    # Seeds plus one own add per round and a shared add every other round, per thread.
    assert result.items == 10 + PROCESSES * THREADS * (ROUNDS + (ROUNDS + 1) // 2)
    assert result.mismatches == [], result.mismatches[:5]
    assert result.feedback_rows == result.feedback_sent  # retried and raced ids stored once
    assert result.updates_reported == result.updates_expected > PROCESSES * THREADS * ROUNDS  # each applied once


def test_processes_and_threads_on_one_sqlite_file_give_the_sequential_q(tmp_path: Path) -> None:
    result, seconds, ops = mixed_workload(
        f"sqlite:///{tmp_path / 'shared.db'}", processes=PROCESSES, threads=THREADS, rounds=ROUNDS
    )
    assert_sequential(result)
    print(f"\n{PROCESSES} processes x {THREADS} threads, {ops} operations on SQLite: {seconds:.2f} s")


@pytest.mark.postgres
def test_processes_and_threads_on_postgres_give_the_sequential_q(pg_url: str) -> None:
    result, seconds, ops = mixed_workload(pg_url, processes=PROCESSES, threads=THREADS, rounds=ROUNDS)
    assert_sequential(result)
    print(f"\n{PROCESSES} processes x {THREADS} threads, {ops} operations on PostgreSQL: {seconds:.2f} s")


def test_the_check_sees_a_lost_update_and_an_extra_one(tmp_path: Path) -> None:
    """The verdict is not vacuous: a feedback the store never applied, or one applied but not reported,
    each shows as a mismatch against the sequential result."""
    url = f"sqlite:///{tmp_path / 'one.db'}"
    store = open_store(url)
    store.add_many([("deploy job", "lesson a"), ("backup job", "lesson b")], namespace=SHARED)
    recall = store.retrieve("deploy job", namespace=SHARED)
    assert store.reinforce(recall, reward_of(SHARED), feedback_id="f1") == len(recall.ids) == 2
    store.close()
    log = Log(recalls={recall.id: (SHARED, list(recall.ids))}, feedback={"f1": recall.id}, applied=2)
    exact = check_log(url, log)
    assert exact.mismatches == [] and exact.updates_expected == exact.updates_reported == 2
    with open_store(url) as again:
        assert again.get(recall.ids[0], namespace=SHARED).q == sequential_q(1, 1.0) == 0.05
    log.feedback["f2"] = recall.id  # claimed but never applied: a lost update
    assert len(check_log(url, log).mismatches) == 2
    del log.feedback["f1"], log.feedback["f2"]  # applied but not accounted for: an extra update
    assert len(check_log(url, log).mismatches) == 2
    assert reward_of(SHARED) == 1.0 and -1.0 <= reward_of("ns-p0t1") <= 1.0


def test_two_stores_of_one_process_saving_their_indexes_at_once_both_succeed(tmp_path: Path) -> None:
    """Index files are written under per-process temporary names: two stores of one process saving the
    same namespace at once once shared the name, and one rename failed with FileNotFoundError."""
    url = f"sqlite:///{tmp_path / 'two.db'}"
    stores, errors = [open_store(url), open_store(url)], list[str]()
    start = threading.Barrier(2)

    def save(store: MemoryStore, tag: str) -> None:
        start.wait()
        for i in range(60):
            try:
                store.add(f"{tag} job {i}", "lesson")
                store.retrieve("job", record=False)  # loads the mirror, so the add marks its index dirty
                store.save_index()
            except Exception as e:
                errors.append(repr(e))

    threads = [threading.Thread(target=save, args=(s, t)) for s, t in zip(stores, "ab", strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert errors == []
    with open_store(url) as again:
        assert again.index_status() in ("loaded", "caught_up")  # the saved file is usable
        assert len(again.items()) == 120
