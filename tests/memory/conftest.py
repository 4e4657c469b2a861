"""Fixtures for the memory tests: a deterministic embedder and stores on temporary SQLite files."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from connectors.embedders import HashEmbedder
from memory.config import MemoryConfig
from memory.store import MemoryStore


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder(dim=64)


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'memory.db'}"


@pytest.fixture
def open_store(db_url: str, embedder: HashEmbedder) -> Iterator[Callable[..., MemoryStore]]:
    """Open stores on the test's database file (more than once to simulate reopening); all closed after."""
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
