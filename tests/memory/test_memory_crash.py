"""SIGKILL at random moments of memory writes, reinforcements and index saves (``tests/reliability/crash.py``).

The harness is shared with the benchmark: workers forked from a preloaded server loop store calls on one
database and acknowledge each call in a log; each is killed after a seeded random delay; after each
kill the database, the log and a reopened store are compared.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import delete, update

from connectors import HashEmbedder
from connectors.errors import StoreError
from memory import MemoryStore, Reinforcement
from memory.mirror.adaptive import load_index
from memory.mirror.files import meta_path
from memory.mirror.sync import index_file
from memory.storage.schema import feedback, memory_items
from tests.reliability.crash import FAILURES, check
from tests.reliability.group_commit import FAILURES as GROUP_COMMIT_FAILURES


def assert_nothing_lost(result: dict, *, trials: int) -> None:
    totals = result["totals"]
    failures = {key: totals.get(key, 0) for key in FAILURES.values()}
    assert failures == dict.fromkeys(FAILURES.values(), 0), result
    assert result["trials"] >= trials
    assert totals["acknowledged_writes"] > 10 * trials and totals["acknowledged_feedback"] > trials, result
    assert totals["resent_feedback"] > 0, "no feedback id was sent twice: idempotency went unchecked"


def trials_in_a_fresh_process(url: str, folder: Path, **options: object) -> dict:
    """``run_trials`` in its own interpreter: the trials then cost what they cost alone (about 25 s for
    50 on 2 cores), not what they cost inside a pytest process that has run a thousand other tests
    (five times more, measured, for reasons that are not the store's)."""
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from tests.reliability.crash import run_trials\n"
        f"print(json.dumps(run_trials({url!r}, Path({str(folder)!r}), **{options!r})))\n"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_sigkill_at_random_moments_loses_no_acknowledged_write_and_applies_no_feedback_twice(tmp_path: Path) -> None:
    floors = {"inside reinforce": 5, "inside save": 2}  # more trials (at most 100) until kills landed there
    result = trials_in_a_fresh_process(
        f"sqlite:///{tmp_path / 'memory.db'}", tmp_path, trials=50, seed=8, until=floors, most=100
    )
    assert_nothing_lost(result, trials=50)
    landed = result["landed"]
    inside_calls = sum(v for k, v in landed.items() if k in ("inside add", "inside add_many", "inside write_many"))
    assert inside_calls >= 5 and landed.get("inside reinforce", 0) >= 5, landed
    assert landed.get("inside save", 0) >= 2, landed
    assert set(result["index_states"]) <= {"loaded", "caught_up", "rebuilt", "built"}
    assert result["index_states"].get("caught_up", 0) > 0, "reopening never caught a stale index up"
    assert result["totals"]["leftover_temp_files"] <= 1  # the last kill's, at most: the next save sweeps it


def test_sigkill_while_the_default_index_switches_and_merges_in_the_background_loses_nothing(tmp_path: Path) -> None:
    """The same trials with ``index="adaptive"`` switching to its graph at 150 items and merging every 32
    new ones (``memory.mirror.adaptive``): kills land while it builds, merges and saves in the background."""
    result = trials_in_a_fresh_process(
        f"sqlite:///{tmp_path / 'memory.db'}", tmp_path, trials=30, seed=21, switch_at=150,
        until={"index busy": 1}, most=60,
    )  # fmt: skip
    assert_nothing_lost(result, trials=30)
    assert result["landed"].get("index busy", 0) >= 1, result["landed"]
    assert set(result["index_states"]) <= {"loaded", "caught_up", "rebuilt", "built"}


@pytest.mark.postgres
def test_sigkill_on_postgresql_loses_nothing_acknowledged(pg_url: str, tmp_path: Path) -> None:
    result = trials_in_a_fresh_process(pg_url, tmp_path, trials=10, seed=3, delays=(0.2, 2.0))
    assert_nothing_lost(result, trials=10)
    assert set(result["index_states"]) == {"database"}


def test_the_checks_catch_lost_writes_lost_feedback_extra_visits_and_double_application(tmp_path: Path) -> None:
    """The checker is not vacuous: damage a healthy store the way a broken store would and it says so."""
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    with MemoryStore(url, embedder=HashEmbedder(32)) as store:
        ids = [m.id for m in store.add_many([("open the door", "push"), ("close the gate", "pull")])]
        (recall,) = store.retrieve_many(["open the door"])
        store.reinforce_many([Reinforcement(recall.id, 1.0, "fb-1")])
    acks = tmp_path / "acks.jsonl"
    acks.write_text(json.dumps({"ids": ids, "feedback": [[recall.id, 1.0, "fb-1"]], "resent_updated": 0}) + "\n")
    healthy = check(url, acks, tmp_path / "scratch")
    assert {k: healthy[k] for k in FAILURES.values() if k in healthy} == dict.fromkeys(
        [k for k in FAILURES.values() if k in healthy], 0
    )

    with MemoryStore(url, embedder=HashEmbedder(32)) as store, store.engine.begin() as conn:
        conn.execute(update(memory_items).where(memory_items.c.id == recall.items[0].id).values(visits=2))
        conn.execute(delete(memory_items).where(memory_items.c.id == ids[1]))
        conn.execute(delete(feedback))
    with acks.open("a") as f:
        f.write(json.dumps({"resent_updated": 1}) + "\n" + '{"ids": ["torn')  # a torn last line is no ack
    broken = check(url, acks, tmp_path / "scratch")
    assert (broken["writes_lost"], broken["feedback_lost"], broken["feedback_applied_twice"]) == (1, 1, 1)
    assert broken["visit_mismatches"] == 1


def test_an_index_saved_without_its_sidecar_is_caught_up_not_rebuilt(tmp_path: Path) -> None:
    """A kill between the two renames of a save leaves a newer index beside an older sidecar."""
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    with MemoryStore(url, embedder=HashEmbedder(32)) as store:
        store.add_many([(f"task {i}", "did it") for i in range(5)])
    path = index_file(tmp_path / "memory.db.faiss", "default")
    old_sidecar = meta_path(path).read_text()
    with MemoryStore(url, embedder=HashEmbedder(32)) as store:
        store.add_many([(f"chore {i}", "did it") for i in range(3)])
    meta_path(path).write_text(old_sidecar)  # the second save's sidecar never landed
    with MemoryStore(url, embedder=HashEmbedder(32)) as store:
        assert store.index_status() == "loaded"  # the ids agree with SQL: nothing to rebuild
        assert len(store.items()) == 8
    loaded = load_index(path, dim=32, kind="adaptive")
    assert loaded is not None and len(loaded[0]) == 8


def test_a_save_sweeps_temporary_files_of_killed_savers_but_not_of_live_ones(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    with MemoryStore(url, embedder=HashEmbedder(32)) as store:
        store.add("open the door", "push")
    path = index_file(tmp_path / "memory.db.faiss", "default")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        litter = [path.with_name(f"{path.name}.{dead.stdout.strip()}.tmp"), meta_path(path).with_name(
            f"{meta_path(path).name}.{dead.stdout.strip()}.tmp"
        )]  # fmt: skip
        busy = path.with_name(f"{path.name}.{live.pid}.tmp")
        for p in [*litter, busy]:
            p.write_bytes(b"half an index")
        with MemoryStore(url, embedder=HashEmbedder(32)) as store:
            store.add("close the gate", "pull")
        assert not any(p.exists() for p in litter) and busy.exists()
    finally:
        live.kill()
        live.wait()
    assert os.path.exists(path)


def test_sigkill_while_recalls_wait_for_their_group_commit_loses_only_what_the_window_allows(tmp_path: Path) -> None:
    code = (
        "import json\nfrom pathlib import Path\nfrom tests.reliability.group_commit import run_trials\n"
        f"print(json.dumps(run_trials(Path({str(tmp_path)!r}), trials=30, seed=3)))\n"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {k: result[k] for k in GROUP_COMMIT_FAILURES} == dict.fromkeys(GROUP_COMMIT_FAILURES, 0), result
    assert result["acknowledged_feedback"] > 30 and result["acknowledged_recalls"] > 100, result
    assert result["recalls_lost"] > 0, "no kill landed inside a group commit window: the contract went unchecked"


# -- the recall log's group commit -------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
TENANT = "Zürich-Nordhafen-Logistik-Team-07@Ärztekammer-Nordrhein/solver"


def embedder() -> HashEmbedder:
    return HashEmbedder(dim=64)


def fill(store: MemoryStore) -> None:
    store.add_many([(f"Torcode Lager {w} Nachtschicht", f"Der Code ist {4400 + i}") for i, w in enumerate("ABCDE")],
                   namespace=TENANT)  # fmt: skip


KILLED_RIGHT_AFTER_RETRIEVE = """
import os, signal, sys
from connectors.embedders import HashEmbedder
from memory.config import MemoryConfig
from memory.store import MemoryStore
store = MemoryStore(sys.argv[1], embedder=HashEmbedder(dim=64), config=MemoryConfig(recall_log_delay=float(sys.argv[4])))
recall = store.retrieve(sys.argv[2], namespace=sys.argv[3])
print(recall.id, *recall.ids, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_right_after_retrieve(url: str, delay: float) -> tuple[str, list[str]]:
    """A process that recalls, prints the recall's id and selection, and is killed at once."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", KILLED_RIGHT_AFTER_RETRIEVE, url, "Torcode Lager C Nachtschicht", TENANT, str(delay)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr
    recall_id, *ids = done.stdout.split()
    assert ids
    return recall_id, ids


def test_a_recall_id_is_reinforced_after_its_process_was_killed_right_after_retrieve(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    with MemoryStore(url, embedder=embedder()) as store:
        fill(store)
    recall_id, ids = killed_right_after_retrieve(url, 0.0)  # recall_log_delay=0: committed before retrieve returned
    with MemoryStore(url, embedder=embedder()) as store:
        before = {i: store.get(i, namespace=TENANT).q for i in ids}
        assert store.explain(recall_id, namespace=TENANT)["selected"] == ids
        assert store.reinforce(recall_id, 1.0, namespace=TENANT, feedback_id="nach-dem-Absturz-0001") == len(ids)
        assert all(store.get(i, namespace=TENANT).q > before[i] for i in ids)
        assert store.reinforce(recall_id, 1.0, namespace=TENANT, feedback_id="nach-dem-Absturz-0001") == 0


def test_a_recall_lost_in_its_group_commit_window_is_a_clear_error_and_changes_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    with MemoryStore(url, embedder=embedder()) as store:
        fill(store)
        before = [(m.id, m.q, m.visits) for m in store.items()]
    recall_id, _ = killed_right_after_retrieve(url, 5.0)  # killed long before its group commit was due
    with MemoryStore(url, embedder=embedder()) as store:
        with pytest.raises(StoreError, match="recall_log_delay"):
            store.reinforce(recall_id, 1.0, namespace=TENANT, feedback_id="nach-dem-Absturz-0002")
        with pytest.raises(StoreError, match="no recall|unknown"):
            store.explain(recall_id, namespace=TENANT)
        assert [(m.id, m.q, m.visits) for m in store.items()] == before
