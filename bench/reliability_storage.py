"""Reliability: what durability costs, and what callers see when the storage fails.

`python -m bench.reliability_storage [--full]` prints JSON.

- Durability: single ``add``, ``add_many`` of 100 and ``reinforce`` per second on a SQLite file with
  ``MemoryConfig(durability="normal")`` (``synchronous=NORMAL``) and ``"full"`` (``synchronous=FULL``:
  one more flush per commit), and the ratio. The folder is the system's temporary one; on tmpfs a
  flush is free and the ratio says nothing.
- Faults, all real SQLite conditions except the index save: a full disk (``PRAGMA max_page_count``), a
  read-only database (``mode=ro``), a lock another connection holds past the busy timeout, and faiss
  failing to write the index (its ``RuntimeError`` for a full disk). Every faulted call must raise a
  ``StoreError`` naming the cause, change nothing, and ``close`` must release the database anyway.
- Reads while another connection holds the write lock: they must all answer (read transactions take
  no lock).
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import connectors.db
from connectors.embedders import HashEmbedder
from connectors.errors import EvolveError, StoreError
from memory.config import MemoryConfig
from memory.store import MemoryStore

DURABILITIES = ("normal", "full")
LOCK_WAIT_MS = 100  # the busy timeout while a lock is held on purpose: the faulted write gives up fast


def open_store(url: str, durability: str = "normal") -> MemoryStore:
    return MemoryStore(url, embedder=HashEmbedder(dim=64), config=MemoryConfig(durability=durability))  # type: ignore[arg-type]


def rates(folder: Path, n: int, rounds: int = 5) -> dict[tuple[str, str], float]:
    """Calls per second of ``add``, ``add_many`` (100 rows) and ``reinforce`` per durability: the median
    of ``rounds`` rounds that alternate the two stores, so load from elsewhere falls on both alike."""
    stores = {d: open_store(f"sqlite:///{folder / f'{d}.db'}", d) for d in DURABILITIES}
    samples: dict[tuple[str, str], list[float]] = {}
    per_round = max(10, n // rounds)
    try:
        for s in stores.values():  # warm up: first transactions, index, caches
            s.add_many([(f"warm up {i}", "x") for i in range(100)])
        for r in range(rounds):
            for d in DURABILITIES if r % 2 == 0 else DURABILITIES[::-1]:
                for op, seconds in _one_round(stores[d], r, per_round).items():
                    samples.setdefault((d, op), []).append(seconds)
    finally:
        for s in stores.values():
            s.close()
    return {key: float(np.median(rate)) for key, rate in samples.items()}


def _one_round(store: MemoryStore, r: int, n: int) -> dict[str, float]:
    out = {}
    t0 = time.perf_counter()
    for i in range(n):
        store.add(f"round {r} task {i} about topic {i % 17}", f"what worked for task {i}")
    out["add"] = n / (time.perf_counter() - t0)
    batches = max(2, n // 10)
    t0 = time.perf_counter()
    for b in range(batches):
        store.add_many([(f"round {r} bulk {b}-{i}", "done") for i in range(100)], group=False)
    out["add_many(100)"] = batches / (time.perf_counter() - t0)
    recalls = [store.retrieve(f"round {r} task {i} about topic {i % 17}") for i in range(n)]
    t0 = time.perf_counter()
    for recall in recalls:
        store.reinforce(recall, 1.0)
    out["reinforce"] = n / (time.perf_counter() - t0)
    return out


@dataclass
class Faults:
    """What the faulted calls did."""

    injected: int = 0
    not_store_error: int = 0  # raised anything but StoreError
    cause_missing: int = 0  # a StoreError whose message does not name the cause
    succeeded: int = 0  # returned normally although the storage refused
    changed: int = 0  # memories changed by a faulted write
    leaked_open: int = 0  # stores still open after close
    examples: dict[str, str] = field(default_factory=dict)

    def expect(self, cause: str, call: Callable[[], object], store: MemoryStore | None = None) -> None:
        """Run one faulted call: it must raise ``StoreError`` naming ``cause`` and change no memory."""
        self.injected += 1
        before = _snapshot(store) if store is not None else None
        try:
            call()
            self.succeeded += 1
        except StoreError as e:
            self.cause_missing += cause not in str(e)
            self.examples.setdefault(cause, str(e)[:160])
        except Exception:  # counted, not raised: the figure is how many escaped as something else
            self.not_store_error += 1
        if store is not None and _snapshot(store) != before:
            self.changed += 1


def _snapshot(store: MemoryStore) -> list[tuple[str, float, int]]:
    return [(m.id, m.q, m.visits) for m in store.items()]


@contextmanager
def _max_pages(store: MemoryStore) -> Iterator[None]:
    """SQLite's own "disk full": the file may not grow while inside."""
    with store._db.transaction() as conn:
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
        conn.exec_driver_sql(f"PRAGMA max_page_count={pages}")
    yield
    with store._db.transaction() as conn:
        conn.exec_driver_sql("PRAGMA max_page_count=1073741823")


def _writes(store: MemoryStore, tag: str) -> list[Callable[[], object]]:
    big = "x" * 4000
    return [
        lambda: store.add_many([(f"{tag} bulk {i}", big) for i in range(300)]),
        lambda: store.write(f"{tag} attempt", trajectory=big * 50, feedback="ok", success=True),
        lambda: store.reinforce(store.retrieve("task 3", record=True), 1.0),
    ]


def faults(folder: Path) -> tuple[Faults, int]:
    """Inject every fault kind; the tally and how many reads failed while another connection wrote."""
    f = Faults()
    path = folder / "faults.db"
    url = f"sqlite:///{path}"
    with open_store(url) as store:
        store.add_many([(f"task {i}", f"how to do task {i}") for i in range(50)])
        store.reinforce(store.retrieve("task 3"), 1.0)
        with _max_pages(store):
            for call in _writes(store, "full")[:2]:
                f.expect("disk full", call, store)
    ro = open_store(f"sqlite:///file:{path}?mode=ro&uri=true")
    for call in [*_writes(ro, "ro"), lambda: ro.remove([ro.items()[0].id])]:
        f.expect("read-only", call, ro)
    ro.close()
    f.leaked_open += _still_open(ro)
    blocked = 0
    default_wait, connectors.db.BUSY_TIMEOUT_MS = connectors.db.BUSY_TIMEOUT_MS, LOCK_WAIT_MS
    try:
        store = open_store(url)
    finally:
        connectors.db.BUSY_TIMEOUT_MS = default_wait
    recall = store.retrieve("task 4")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        for call in _writes(store, "locked"):
            f.expect("locked", call)
        blocked = _failed_reads(store, recall.id, folder / "export.jsonl")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    _index_faults(store, f)
    return f, blocked


def _failed_reads(store: MemoryStore, recall_id: str, export: Path) -> int:
    """How many reads fail while another connection holds the write lock (each kind five times)."""
    reads: list[Callable[[], object]] = [
        lambda: store.get(store.items()[0].id),
        store.stats,
        lambda: store.explain(recall_id),
        lambda: store.export(export),
    ]
    failed = 0
    for read in reads * 5:
        try:
            read()
        except EvolveError:
            failed += 1
    return failed


def _index_faults(store: MemoryStore, f: Faults) -> None:
    """faiss cannot write the index (its error for a full disk): ``save_index`` says so, ``close`` warns."""
    import faiss

    real = faiss.write_index

    def full(index: Any, path: str) -> None:
        raise RuntimeError(
            f"Error: 'ret == (size * 4)' failed: write error in {path}: 0 != 512 (No space left on device)"
        )

    faiss.write_index = full  # type: ignore[assignment]
    try:
        store.add("one more", "so the index has changed")
        f.expect("disk full", store.save_index)
        f.injected += 1
        try:
            store.close()
        except Exception:  # counted: close must never raise for the index
            f.not_store_error += 1
        f.leaked_open += _still_open(store)
    finally:
        faiss.write_index = real


def _still_open(store: MemoryStore) -> int:
    try:
        store.items()
        return 1
    except StoreError:
        return 0


def run(quick: bool = True) -> dict[str, Any]:
    """Durability's cost and the fault tally, as report rows."""
    n = 400 if quick else 2000
    with tempfile.TemporaryDirectory(prefix="evolve-storage-") as tmp:
        folder = Path(tmp)
        speed = rates(folder, n)
        tally, blocked = faults(folder)
    rows: list[list[Any]] = []
    for op in ("add", "add_many(100)", "reinforce"):
        rows += [[f"{op} per second, durability={d}", round(speed[d, op], 1)] for d in DURABILITIES]
        rows.append([f"{op}: full / normal", round(speed["full", op] / speed["normal", op], 2)])
    rows += [
        ["storage faults injected (full disk, read-only, held lock, index save)", tally.injected],
        ["faulted calls whose error was not EvolveError (StoreError)", tally.not_store_error],
        ["faulted calls that succeeded", tally.succeeded],
        ["StoreErrors with the cause missing from the message", tally.cause_missing],
        ["memories changed by a faulted write", tally.changed],
        ["stores that leak open after close", tally.leaked_open],
        ["reads locked out while another connection held the write lock", blocked],
    ]
    notes = (
        f"SQLite files in {tempfile.gettempdir()}; per durability {n} adds and reinforces and {n // 10} add_many "
        "batches in 5 rounds alternating the two stores (median round). Full flushes the WAL at every commit (survives a power loss); normal flushes at "
        "checkpoints (survives a crash of the application). Messages, e.g.: "
        + "; ".join(f"{k}: {v!r}" for k, v in tally.examples.items())
    )
    return {"title": "Storage: durability cost and faults", "rows": rows, "notes": notes}


if __name__ == "__main__":
    import sys

    print(json.dumps(run(quick="--full" not in sys.argv[1:]), indent=2))
