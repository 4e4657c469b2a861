"""Backups and exports give back exactly what was stored: the harness the tests and the figures share.

``populate`` fills a database with every kind of row (memories with learned Q, recalls, feedback, a
rolled-back prompt graph, adapter versions); ``snapshot`` reads every row of every table back, exactly
comparable (floats bit-exact through ``float.hex``), and ``differences`` counts the fields two snapshots
disagree on; ``item_fields`` / ``field_differences`` do the same for what an export must keep;
``backup_while_writing`` backs up while a writer thread keeps adding memories; ``replayed_feedback``
re-sends every stored feedback id (nothing may change).

``tests/evolve/backup/test_backup.py`` and ``tests/apps/test_cli_backup.py`` assert on them;
``bench/reliability_backup.py`` runs them at size (SQLite, PostgreSQL through pg_dump/pg_restore, JSONL
export/import) for the reliability report.
"""

from __future__ import annotations

import json
import math
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import MetaData, select
from sqlalchemy.pool import NullPool

from connectors import make_engine
from connectors.embedders import HashEmbedder
from evolve.backup.database import backup
from evolve.backup.postgres import bundled_bin
from memory.store import MemoryStore

Snapshot = dict[str, list[tuple[Any, ...]]]
ITEM_FIELDS = ("id", "namespace", "intent", "experience", "q", "visits", "success", "created_at", "updated_at", "meta")


def embedder() -> HashEmbedder:
    return HashEmbedder(dim=64)


def populate(url: str, *, n: int, root: Path, seed: int = 0) -> list[str]:
    """Fill the database at ``url``: ``n`` memories in two namespaces with learned Q-values, recalls and
    feedback, a prompt graph whose HEAD was rolled back, and two adapter versions. The feedback ids."""
    from evolve.prompts.graph import PromptGraph
    from evolve.weights.registry import AdapterRegistry

    rng = np.random.default_rng(seed)
    feedback_ids = []
    with MemoryStore(url, embedder=embedder(), seed=seed) as store:
        for ns, share in (("default", n - n // 4), ("tenant-b", n // 4)):
            rows = [
                (f"{ns} task {i} about topic {i % 37}", f"what worked for task {i}: step {i % 5}") for i in range(share)
            ]
            metas = [{"episode": f"ep-{i}", "tags": ["x", i % 3], "score": float(rng.random())} for i in range(share)]
            store.add_many(rows, namespace=ns, meta=metas, group=False)
            store.add(f"{ns} odd item", "exact floats", namespace=ns, q=math.pi / 7, success=True, meta={"u": "é"})
            for j in range(max(3, n // 50)):
                recall = store.retrieve(f"{ns} task {int(rng.integers(share))} about topic {j % 37}", namespace=ns)
                fid = f"{ns}-fb-{j}"
                store.reinforce(recall, float(rng.uniform(-1, 1)), feedback_id=fid)
                feedback_ids.append(fid)
    engine = make_engine(url, poolclass=NullPool)
    try:
        graph = PromptGraph(engine, "bench")
        v0 = graph.init({"solver.system": "You solve tasks."})
        v1 = graph.commit({"solver.system": "You solve tasks step by step."}, parents=[v0.id], scores={"a": 0.7})
        graph.commit({"solver.system": "Be terse."}, parents=[v1.id], scores={"a": 0.1 + 0.2})
        graph.rollback(v1.id)
        registry = AdapterRegistry(engine, "bench", root=root / "adapters")
        parent = None
        for k in range(2):
            folder = root / f"adapter-{k}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "adapter_config.json").write_text(json.dumps({"r": 8 + k}))
            (folder / "adapter_model.safetensors").write_bytes(bytes(range(k, 64 + k)))
            parent = registry.commit("solver", folder, parent=parent, metrics={"success": 0.5 + k / 10}).id
    finally:
        engine.dispose()
    return feedback_ids


def snapshot(url: str) -> Snapshot:
    """Every row of every table, ordered by primary key, with values made exactly comparable."""
    engine = make_engine(url, poolclass=NullPool)
    try:
        meta = MetaData()
        with warnings.catch_warnings():  # pgvector's ``vector`` type is unknown to reflection: read as text
            warnings.simplefilter("ignore")
            meta.reflect(engine)
        with engine.connect() as conn:
            out = {}
            for name, table in sorted(meta.tables.items()):
                order = list(table.primary_key.columns) or list(table.columns)
                out[name] = [tuple(_exact(v) for v in row) for row in conn.execute(select(table).order_by(*order))]
            return out
    finally:
        engine.dispose()


def _exact(value: Any) -> Any:
    if isinstance(value, float):
        return value.hex()  # bit-exact: 0.30000000000000004 and 0.3 differ here
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return value


def differences(a: Snapshot, b: Snapshot) -> int:
    """Fields that differ between two snapshots (a missing or extra row counts all its fields)."""
    count = 0
    for name in sorted(set(a) | set(b)):
        rows_a, rows_b = a.get(name, []), b.get(name, [])
        for ra, rb in zip(rows_a, rows_b, strict=False):
            count += sum(x != y for x, y in zip(ra, rb, strict=True))
        longer = rows_a if len(rows_a) > len(rows_b) else rows_b
        count += sum(len(r) for r in longer[min(len(rows_a), len(rows_b)) :])
    return count


def item_fields(url: str) -> dict[str, tuple[Any, ...]]:
    """Each memory's user-visible fields and its intent vector, by id (what export/import must keep)."""
    from memory.storage.schema import intents, memory_items

    query = select(*(memory_items.c[f] for f in ITEM_FIELDS), intents.c.embedding).join(
        intents, intents.c.id == memory_items.c.intent_id
    )
    engine = make_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return {row[0]: tuple(_exact(v) for v in row) for row in conn.execute(query)}
    finally:
        engine.dispose()


def field_differences(a: dict[str, tuple[Any, ...]], b: dict[str, tuple[Any, ...]]) -> int:
    """Memory fields that differ between two ``item_fields`` results (a missing memory counts all)."""
    width = len(ITEM_FIELDS) + 1
    return sum(width if k not in b else sum(x != y for x, y in zip(a[k], b[k], strict=True)) for k in a) + sum(
        width for k in b if k not in a
    )


def backup_while_writing(url: str, dest: Path, *, warmup: int = 50) -> tuple[set[str], float]:
    """Back up ``url`` while a writer thread keeps adding memories (with its own store and connection).

    Returns the ids whose write had returned before the backup started, and the backup's seconds.
    """
    committed: list[str] = []
    stop, ready = threading.Event(), threading.Event()

    def write() -> None:
        with MemoryStore(url, embedder=embedder()) as store:
            i = 0
            while not stop.is_set():
                committed.append(store.add(f"written live {i}", f"experience {i}", namespace="live").id)
                i += 1
                if i == warmup:
                    ready.set()
            ready.set()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    ready.wait(60)
    before = set(committed)  # list appends are atomic; these writes had all returned
    start = time.perf_counter()
    backup(url, dest)
    seconds = time.perf_counter() - start
    time.sleep(0.05)  # the writer keeps going after the snapshot, too
    stop.set()
    writer.join(60)
    return before, seconds


def replayed_feedback(url: str) -> int:
    """Memories changed by re-sending every feedback id the ledger holds (must be 0: they are idempotent)."""
    engine = make_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            ledger = conn.exec_driver_sql("SELECT id, recall_id, reward FROM memory_feedback").all()
    finally:
        engine.dispose()
    with MemoryStore(url, embedder=embedder()) as store:
        return sum(store.reinforce(recall_id, reward, feedback_id=fid) for fid, recall_id, reward in ledger)


def pg_bin() -> Path | None:
    """The test server's own client tools (tests/support/postgres.py): the system's pg_dump may be older."""
    return bundled_bin()
