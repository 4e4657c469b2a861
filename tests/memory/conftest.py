"""Fixtures for the memory tests: a deterministic embedder, and stores on every backend.

``db_url`` runs each store test twice: on a temporary SQLite file (FAISS flat index in the process)
and on a fresh PostgreSQL database (pgvector, the default index there) from the session's test
server (``tests/support/postgres.py``). Tests about SQLite files or saved FAISS index files say so with
``@sqlite_only``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from connectors.embedders import HashEmbedder
from memory.config import MemoryConfig
from memory.store import MemoryStore

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
"""For tests of SQLite itself: its file, its columns, or FAISS index files saved beside it."""


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder(dim=64)


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'memory.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def open_store(db_url: str, embedder: HashEmbedder) -> Iterator[Callable[..., MemoryStore]]:
    """Open stores on the test's database (more than once to simulate reopening); all closed after."""
    opened: list[MemoryStore] = []

    def make(config: MemoryConfig | None = None, **kwargs: Any) -> MemoryStore:
        kwargs.setdefault("embedder", embedder)
        store = MemoryStore(kwargs.pop("url", db_url), config=config, **kwargs)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: Callable[..., MemoryStore]) -> MemoryStore:
    return open_store()
