"""Reliability: backups and exports give back exactly what was stored.

`python -m bench.reliability_backup [--full]` prints JSON. The harness (``populate``, ``snapshot``,
``differences``, ``backup_while_writing``, ...) is ``tests/reliability/backup.py``'s, which
tests/evolve/backup/test_backup.py runs too, so the figures and the tests check the same thing.

- SQLite: backup → restore into a new file; every row of every table compared field by field (floats
  bit-exact through ``float.hex``): memories, intent keys, recall log, feedback ledger, prompt versions
  and HEAD, adapter records.
- A backup taken while a writer thread keeps adding memories: every memory whose write returned before
  the backup started must be in the restored copy, and the copy passes ``integrity_check``.
- PostgreSQL (the test server of tests/support/postgres.py, skipped with a note when it cannot start): the
  same through pg_dump/pg_restore.
- JSONL export → import into a fresh store: every memory field compared.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from evolve.backup.database import backup, restore
from memory.store import MemoryStore
from tests.reliability.backup import (
    backup_while_writing,
    differences,
    embedder,
    field_differences,
    item_fields,
    pg_bin,
    populate,
    replayed_feedback,
    snapshot,
)


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
    from tests.support.postgres import PostgresUnavailable, create_database, start_postgres, stop_postgres

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
