"""The vectors of recent texts, kept: a repeated query is not embedded again.

A served app's users ask alike, often word for word ("reset my password"), and each request embeds its
query before it recalls. ``CachedEmbedder`` wraps an embedder with a small least-recently-used table keyed
by the exact text: a text seen lately gets its stored row, the others go to the wrapped embedder in one
call. An embedder is a pure function of the text, so a stored row is the row the model would give.

Example:
    >>> from connectors.embedders import HashEmbedder
    >>> cached = CachedEmbedder(HashEmbedder(dim=8), size=2)
    >>> _ = cached.embed(["a door code", "a door code", "an alarm code"])
    >>> cached.hits, cached.misses, cached.name
    (1, 2, 'hash-8')
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from connectors.embedders import check_texts
from connectors.errors import ConfigError

SIZE = 1024
"""Texts kept by default: 1.5 MB of MiniLM rows, more than a server's distinct queries in a busy minute."""


class CachedEmbedder:
    """An embedder whose rows for the ``size`` most recently used texts are kept (module docstring); ``name``
    and ``dim`` are the wrapped one's, so a store sees the same embedder. Safe to call from many threads.

    Args:
        embedder: anything with ``embed(texts) -> (n, dim) array``, ``name`` and ``dim``.
        size: the most texts kept.
    """

    hits: int
    """Texts answered from the table."""
    misses: int
    """Texts the wrapped embedder embedded."""

    def __init__(self, embedder: Any, *, size: int = SIZE) -> None:
        if size < 1:
            raise ConfigError(f"CachedEmbedder size must be >= 1, got {size}")
        self.embedder = embedder
        self.size = size
        self.hits = 0
        self.misses = 0
        self._rows: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.embedder, name)

    def __len__(self) -> int:
        return len(self._rows)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        found = self._take(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in found))  # each new text once
        with self._lock:
            self.hits, self.misses = self.hits + len(texts) - len(missing), self.misses + len(missing)
        if missing:
            rows = np.asarray(self.embedder.embed(missing), dtype=np.float32)
            found.update(zip(missing, rows, strict=True))
            self._keep(missing, rows)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[t] for t in texts])  # a new array: the caller may change it, the kept rows stay

    def _take(self, texts: list[str]) -> dict[str, np.ndarray]:
        with self._lock:
            found = {t: self._rows[t] for t in texts if t in self._rows}
            for t in found:
                self._rows.move_to_end(t)
        return found

    def _keep(self, texts: list[str], rows: np.ndarray) -> None:
        with self._lock:
            for text, row in zip(texts, rows, strict=True):
                self._rows[text] = row.copy()
                self._rows.move_to_end(text)
            while len(self._rows) > self.size:
                self._rows.popitem(last=False)


__all__ = ["CachedEmbedder"]
