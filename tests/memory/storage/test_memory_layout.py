"""The stored layout: one copy of each vector, stores from before the change upgraded on open, and the
fast statement path writing exactly what SQLAlchemy Core writes."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, insert, select

import memory.storage.statements
from connectors.embedders import HashEmbedder
from memory.storage.schema import memory_items, metadata, recalls
from memory.storage.statements import execute_many, read_generation
from memory.store import MemoryStore
from tests.memory.conftest import sqlite_only

Open = Callable[..., MemoryStore]


def columns(db: Path, table: str) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


@sqlite_only
def test_items_hold_no_vector_of_their_own(store: MemoryStore, tmp_path: Path) -> None:
    store.add("sort a list", "use sorted()")
    assert "embedding" not in columns(tmp_path / "memory.db", "memory_items")
    assert "embedding" in columns(tmp_path / "memory.db", "memory_intents")


@sqlite_only
def test_a_store_with_per_item_vectors_is_upgraded_on_open(open_store: Open, tmp_path: Path) -> None:
    first = open_store()
    ids = [m.id for m in first.add_many([("sort a list", "use sorted()"), ("parse a date", "use fromisoformat")])]
    first.close()
    with sqlite3.connect(tmp_path / "memory.db") as conn:  # the layout written before the change
        conn.execute("ALTER TABLE memory_items ADD COLUMN embedding BLOB NOT NULL DEFAULT x''")
    again = open_store()
    assert "embedding" not in columns(tmp_path / "memory.db", "memory_items")
    assert again.retrieve("parse a date").ids[0] == ids[1]
    assert again.add("water the plants", "every monday").intent == "water the plants"
    assert again.stats()["count"] == 3


@sqlite_only
def test_intent_vectors_fill_their_pages(open_store: Open, tmp_path: Path) -> None:
    """An intent key's row (a 384-d float32 vector, 1,536 bytes, plus its id and text) fits twice in a 4 KiB page,
    a fifth of the table left empty; the database's pages (``connectors.db.PAGE_SIZE``) hold five."""
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((2000, 384)).astype(np.float32)
    store = open_store(embedder=HashEmbedder(dim=384))
    store.add_many([(f"intent {i}", f"experience {i}") for i in range(2000)], embeddings=vecs, group=False)
    with sqlite3.connect(tmp_path / "memory.db") as conn:  # dbstat: in the SQLite Python ships on every platform we run
        used, payload = conn.execute(
            "SELECT SUM(pgsize), SUM(payload) FROM dbstat WHERE name = 'memory_intents' AND pagetype = 'leaf'"
        ).fetchone()
    assert payload / used > 0.95


@pytest.fixture(params=[True, False], ids=["fast", "core"])
def both_paths(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An in-memory database with the schema; ``execute_many`` on its fast path, or through SQLAlchemy Core."""
    if not request.param:
        monkeypatch.setattr(memory.storage.statements, "_fast", lambda conn: False)
    engine = create_engine("sqlite://")
    metadata.create_all(engine)
    return engine


def test_execute_many_writes_what_core_writes(both_paths: Any) -> None:
    engine = both_paths
    row = {"id": "r1", "namespace": "default", "query": "q", "created_at": 1.5, "config": {"k1": 10, "lam": 0.5},
           "pool_size": 3, "filtered": 0, "explored": True, "generation": 7, "context": "badge Quartz — täsk",
           "shared": "facility codes — trained/solver", "candidates": b"\x01\x00\x00"}  # fmt: skip
    other = {**row, "id": "r2", "explored": False, "context": None, "shared": None, "candidates": None}
    with engine.begin() as conn:
        execute_many(conn, insert(recalls), [row, other])
        conn.execute(insert(memory.storage.schema.state).values(id=1, generation=4, next_seq=1))
        assert read_generation(conn) == 4
        got = conn.execute(select(recalls).order_by(recalls.c.id)).mappings().all()
    assert [dict(r) for r in got] == [row, other]


def test_execute_many_raises_sqlalchemy_errors() -> None:
    from sqlalchemy.exc import IntegrityError

    engine = create_engine("sqlite://")
    metadata.create_all(engine)
    item = {"id": "a", "seq": 1, "namespace": "d", "intent_id": "k", "intent": "i", "experience": "e", "q": 0.0,
            "visits": 0, "success": None, "created_at": 0.0, "updated_at": 0.0, "updated_gen": 1, "meta": {}}  # fmt: skip
    with pytest.raises(IntegrityError), engine.begin() as conn:
        execute_many(conn, insert(memory_items), [item, item])


def test_execute_many_writes_each_rows_own_json(both_paths: Any) -> None:
    # A bulk add's rows share one meta mapping (the fast path dumps it once); others bring their own.
    engine = both_paths
    shared = {"writer": "user:local", "tags": ["a", "ü"]}
    own = [shared, shared, {"writer": "run:r1", "n": 1}, {}, shared]
    rows = [
        {"id": f"m{i}", "seq": i, "namespace": "d", "intent_id": "k", "intent": "i", "experience": "e", "q": 0.5,
         "visits": 0, "success": None, "created_at": 0.0, "updated_at": 0.0, "updated_gen": 1, "meta": meta}
        for i, meta in enumerate(own)
    ]  # fmt: skip
    with engine.begin() as conn:
        execute_many(conn, insert(memory_items), rows)
        got = conn.execute(select(memory_items.c.meta).order_by(memory_items.c.seq)).scalars().all()
    assert got == own
