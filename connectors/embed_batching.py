"""Concurrent embedding calls share one model call, without waiting for company.

A served team embeds every request's query before it recalls; on a local embedder (MiniLM on the CPU)
sixteen requests at once are sixteen small forward passes that queue for the same cores, where one pass
over the sixteen texts costs little more than one. ``BatchingEmbedder`` wraps an embedder: a call that
finds the model idle runs at once (a lone request waits for nothing); calls that arrive while it runs
queue up and go as one batch when it ends, led by the first of them. Each caller gets its own rows, in
order; a failure reaches every caller of the batch that failed.

Example:
    >>> from connectors.embedders import HashEmbedder
    >>> shared = BatchingEmbedder(HashEmbedder(dim=8))
    >>> shared.embed(["a door code", "an alarm code"]).shape, shared.name
    ((2, 8), 'hash-8')
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_TEXTS = 256
"""The most texts one model call takes; a longer queue goes in several calls."""


@dataclass
class _Call:
    texts: list[str]
    done: threading.Event = field(default_factory=threading.Event)
    lead: bool = False
    rows: np.ndarray | None = None
    error: BaseException | None = None


class BatchingEmbedder:
    """An embedder whose concurrent ``embed`` calls are batched (module docstring); ``name`` and ``dim`` are
    the wrapped one's, so a store sees the same embedder.

    Args:
        embedder: anything with ``embed(texts) -> (n, dim) array``, ``name`` and ``dim``.
        max_texts: the most texts one model call takes.
    """

    def __init__(self, embedder: Any, *, max_texts: int = MAX_TEXTS) -> None:
        self.embedder = embedder
        self.max_texts = max_texts
        self.batches: list[int] = []  # calls per model call, most recent last (kept short)
        self._lock = threading.Lock()
        self._queue: list[_Call] = []
        self._busy = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.embedder, name)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        call = _Call(list(texts))
        with self._lock:
            self._queue.append(call)
            call.lead, self._busy = not self._busy, True
        if not call.lead:
            call.done.wait()
        if call.lead:  # idle when it came, or handed the lead by the call before
            self._run()
        if call.error is not None:
            raise call.error
        assert call.rows is not None
        return call.rows

    def _run(self) -> None:
        """Embed the queue as it stands (one model call), then hand the lead to the first call that came since."""
        with self._lock:
            batch: list[_Call] = []
            taken = 0
            while self._queue and (not batch or taken + len(self._queue[0].texts) <= self.max_texts):
                batch.append(self._queue.pop(0))
                taken += len(batch[-1].texts)
        try:
            rows = self.embedder.embed([t for c in batch for t in c.texts])
            start = 0
            for c in batch:
                c.rows, start = rows[start : start + len(c.texts)], start + len(c.texts)
        except BaseException as e:  # every caller of this batch sees its failure
            for c in batch:
                c.error = e
        self.batches = [*self.batches[-63:], len(batch)]
        with self._lock:
            following = self._queue[0] if self._queue else None
            if following is None:
                self._busy = False
            else:
                following.lead = True
        for c in batch:
            c.lead = False
            c.done.set()
        if following is not None:
            following.done.set()


__all__ = ["BatchingEmbedder"]
