"""A recall on current mirrors runs no SQL transaction (``memory.recall.retrieving.retrieve``).

When the mirrors are current (one autocommit read of the generation says nobody wrote since) and every
selected memory's texts are in the item cache, a recall on a SQLite file runs that one statement and no
transaction; memories not in the cache are read in one more autocommit statement. Its log row goes to the
group commit as before, so it can be rated. Another store's write (another connection, as another process)
is seen by the next recall; a memory removed between the generation's read and the memories' read sends the
recall to a transaction that plans again; and a memory this process wrote is cached as reading it back from
SQL gives it, whatever its caller does to the object it got back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from connectors.embedders import HashEmbedder
from memory import MemoryConfig, MemoryStore
from memory.recall import retrieving
from memory.storage.statements import GENERATION_SQL

TASKS = [
    "Wie buche ich die Lieferung nach Zürich Nordhafen, Halle 7, für Donnerstag früh?",
    "Which loading dock takes refrigerated pallets at the Basel Rheinhafen terminal?",
    "Qui signe le bon de livraison au dépôt de Genève Cornavin le samedi matin ?",
]
QUERY = "Lieferung nach Zürich Nordhafen Halle 7 buchen"


@contextmanager
def statements(store: MemoryStore) -> Iterator[list[str]]:
    """Every statement SQLite runs on the store's kept connection inside the block (driver calls too)."""
    raw = store._db._conn.connection.dbapi_connection  # type: ignore[union-attr]
    seen: list[str] = []
    raw.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        raw.set_trace_callback(None)


def written(store: MemoryStore) -> list[str]:
    return [
        store.write(task, trajectory=f"Answer given: code {i}", feedback="Correct.", success=True).id
        for i, task in enumerate(TASKS)
    ]


def test_a_recall_of_cached_memories_runs_one_statement_and_no_transaction(tmp_path: Path) -> None:
    with MemoryStore(f"sqlite:///{tmp_path / 'Lager Zürich – Erinnerungen.db'}", embedder=HashEmbedder(64)) as store:
        written(store)
        first = store.retrieve(QUERY)
        with statements(store) as seen:
            again = store.retrieve(QUERY)
        assert seen == [GENERATION_SQL]
        assert again.ids == first.ids and [m.experience for m in again.items] == [m.experience for m in first.items]
        assert store.reinforce(again, 1.0) == len(again)  # its log row was committed for the rating


def test_uncached_memories_are_read_in_one_autocommit_statement_and_no_transaction(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'Lager Zürich – ohne Zwischenspeicher.db'}"
    with MemoryStore(url, embedder=HashEmbedder(64), config=MemoryConfig(item_cache=0)) as store:
        written(store)
        first = store.retrieve(QUERY)
        with statements(store) as seen:
            again = store.retrieve(QUERY)
        assert seen[0] == GENERATION_SQL and len(seen) == 2 and "FROM memory_items" in seen[1]
        assert not any("BEGIN" in s or "COMMIT" in s for s in seen)
        assert not store._db._conn.in_transaction()  # type: ignore[union-attr]
        assert again.ids == first.ids and [m.experience for m in again.items] == [m.experience for m in first.items]
        assert [m.q for m in again.items] == [m.q for m in first.items]
        assert store.reinforce(again, 1.0) == len(again)  # its log row was committed for the rating
        rated = store.retrieve(QUERY)
        assert [m.q for m in rated.items] != [m.q for m in first.items]  # Q from the mirror, after the rating


def test_a_memory_removed_before_the_autocommit_read_is_planned_again_in_a_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'shared store, no cache.db'}"
    config = MemoryConfig(item_cache=0)
    with (
        MemoryStore(url, embedder=HashEmbedder(64), config=config) as mine,
        MemoryStore(url, embedder=HashEmbedder(64), config=config) as other,
    ):
        written(mine)
        before = mine.retrieve(QUERY)
        stale = mine._db.generation_now()
        other.remove([before.ids[0]])
        # as if the removal committed after this recall read the generation, before it read the memories
        monkeypatch.setattr(mine._db, "generation_now", lambda: stale)
        outside: list[object] = []
        read = retrieving.read_outside
        monkeypatch.setattr(retrieving, "read_outside", lambda *a: outside.append(read(*a)) or outside[-1])
        with statements(mine) as seen:
            after = mine.retrieve(QUERY)
        assert outside == [None]  # the autocommit read missed the removed memory: not used
        assert "BEGIN DEFERRED" in seen
        assert before.ids[0] not in after.ids and set(after.ids) <= set(before.ids)


def test_another_connections_write_and_removal_reach_the_next_recall(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared store.db'}"
    with MemoryStore(url, embedder=HashEmbedder(64)) as mine, MemoryStore(url, embedder=HashEmbedder(64)) as other:
        ids = written(mine)
        assert mine.retrieve(QUERY).ids  # mirrors current, memories cached
        newer = other.write(QUERY, trajectory="Answer given: Halle 7, Tor 3", feedback="Correct.", success=True)
        with statements(mine) as seen:
            recalled = mine.retrieve(QUERY)
        assert "BEGIN DEFERRED" in seen
        assert newer.id in recalled.ids
        other.remove(ids + [newer.id])
        assert mine.retrieve(QUERY).ids == ()


def test_a_written_memory_is_cached_as_sql_gives_it_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    provenance = {"episode": "Lieferung Zürich #7", "stations": ("Nordhafen", "Halle 7")}
    with MemoryStore(url, embedder=HashEmbedder(64)) as store:
        item = store.write(TASKS[0], trajectory="Answer: Tor 3", feedback="Correct.", success=True,
                           provenance=provenance)  # fmt: skip
        item.meta["provenance"]["stations"] = "changed by the caller afterwards"
        with statements(store) as seen:
            cached = store.retrieve(TASKS[0]).items[0]
        assert seen == [GENERATION_SQL]  # the written memory came from the cache
    with MemoryStore(url, embedder=HashEmbedder(64)) as fresh:
        from_sql = fresh.retrieve(TASKS[0]).items[0]
    assert cached == from_sql
    assert cached.meta["provenance"]["stations"] == ["Nordhafen", "Halle 7"]
