"""Reliability: backups and exports give back exactly what was stored.

`python -m bench.reliability_backup [--full]` prints JSON. The harness here (``populate``,
``snapshot``, ``differences``, ``backup_while_writing``) is also what tests/evolve/deploy/test_backup.py
runs, so the figures and the tests check the same thing.

- SQLite: backup → restore into a new file; every row of every table compared field by field (floats
  bit-exact through ``float.hex``): memories, intent keys, recall log, feedback ledger, prompt versions
  and HEAD, adapter records.
- A backup taken while a writer thread keeps adding memories: every memory whose write returned before
  the backup started must be in the restored copy, and the copy passes ``integrity_check``.
- PostgreSQL (the test server of tests/postgres.py, skipped with a note when it cannot start): the same
  through pg_dump/pg_restore.
- JSONL export → import into a fresh store: every memory field compared.
"""

from __future__ import annotations

import json
import math
import tempfile
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
from evolve.deploy.backup import backup, restore
from evolve.deploy.backup_pg import bundled_bin
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
    from memory.schema import intents, memory_items

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
    """The test server's own client tools (tests/postgres.py): the system's pg_dump may be older."""
    return bundled_bin()


def round_trip(source: str, target: str, root: Path, *, n: int) -> dict[str, Any]:
    """populate → backup → restore into ``target``; counts, differing fields and seconds."""
    populate(source, n=n, root=root)
    before = snapshot(source)
    tools = None if source.startswith("sqlite") else pg_bin()
    made = backup(source, root / "backup.bin", pg_bin=tools)
    back = restore(made.path, target, pg_bin=tools)
    return {
        "items": back.counts.get("memory_items", 0),
        "differing": differences(before, snapshot(target)),
        "replayed": replayed_feedback(target),
        "seconds": made.seconds + back.seconds,
        "size": made.size,
    }


def export_round_trip(root: Path, *, n: int) -> dict[str, Any]:
    """populate → ``export`` → ``import_`` into a fresh store; memories and differing fields."""
    source, target = f"sqlite:///{root / 'export-src.db'}", f"sqlite:///{root / 'export-dst.db'}"
    populate(source, n=n, root=root / "export")
    with MemoryStore(source, embedder=embedder()) as store:
        store.export(root / "memories.jsonl")
    with MemoryStore(target, embedder=embedder()) as store:
        added = store.import_(root / "memories.jsonl")
    return {"items": added, "differing": field_differences(item_fields(source), item_fields(target))}


def live_backup(root: Path) -> dict[str, Any]:
    url = f"sqlite:///{root / 'live.db'}"
    populate(url, n=200, root=root / "live")
    before, _ = backup_while_writing(url, root / "live-backup.db")
    restored = f"sqlite:///{root / 'live-restored.db'}"
    restore(root / "live-backup.db", restored)  # raises when integrity_check or the store checks fail
    return {"committed": len(before), "missing": len(before - set(item_fields(restored)))}


def postgres_round_trip(root: Path, *, n: int) -> dict[str, Any] | str:
    """The PostgreSQL round trip on the test server, or why it could not run."""
    from tests.postgres import PostgresUnavailable, create_database, start_postgres, stop_postgres

    data = Path(tempfile.mkdtemp(prefix="evolve-pg-")) / "data"
    try:
        admin = start_postgres(data)
    except PostgresUnavailable as e:
        return f"PostgreSQL skipped: {str(e).splitlines()[0]}"
    try:
        return round_trip(create_database(admin, "backup_src"), create_database(admin, "backup_dst"), root, n=n)
    finally:
        stop_postgres(data)


def run(quick: bool = True) -> dict[str, Any]:
    """The figures for bench/results/RELIABILITY.md (``bench/reliability.py`` collects them)."""
    n = 2000 if quick else 10000
    with tempfile.TemporaryDirectory(prefix="evolve-backup-") as tmp:
        root = Path(tmp)
        lite = round_trip(f"sqlite:///{root / 'src.db'}", f"sqlite:///{root / 'dst.db'}", root / "sqlite", n=n)
        live = live_backup(root)
        pg = postgres_round_trip(root / "pg", n=n)
        exp = export_round_trip(root, n=n)
    rows: list[list[Any]] = [
        ["SQLite backup/restore: items", lite["items"]],
        ["SQLite: fields differing after restore (all tables)", lite["differing"]],
        ["SQLite: memories changed by replaying old feedback ids after restore", lite["replayed"]],
        ["SQLite: seconds per 10k items (backup + restore)", round(lite["seconds"] / n * 10_000, 3)],
        ["backup while writing: items committed before it started", live["committed"]],
        ["backup while writing: committed items missing", live["missing"]],
    ]
    if isinstance(pg, dict):
        rows += [
            ["PostgreSQL pg_dump/pg_restore: items", pg["items"]],
            ["PostgreSQL: fields differing after restore (all tables)", pg["differing"]],
            ["PostgreSQL: memories changed by replaying old feedback ids after restore", pg["replayed"]],
            ["PostgreSQL: seconds per 10k items (pg_dump + pg_restore)", round(pg["seconds"] / n * 10_000, 3)],
        ]
    rows += [["export/import: items", exp["items"]], ["export/import: fields differing", exp["differing"]]]
    notes = (
        f"{n} memories plus recalls, feedback, prompt versions and adapter records; floats compared bit-exactly "
        "(float.hex). The saved FAISS index is derived data: not backed up, rebuilt on open. "
        + ("" if isinstance(pg, dict) else pg)
    )
    return {"title": "Backups and exports", "rows": rows, "notes": notes.strip()}


if __name__ == "__main__":
    import sys

    print(json.dumps(run(quick="--full" not in sys.argv[1:]), indent=2))
