"""One thread for the process's torch work.

torch on the CPU runs each call on a team of OpenMP threads, and every Python thread that calls into it
gets its own team; calls made from many threads (a server's worker threads, a stream's generation thread,
an embedder beside a chat model) keep several teams competing for the cores. SmolLM2 answering 32 tokens
took 1.4-1.6 s on the thread that loaded it and 2.4-2.7 s from any other thread once a second one had used
torch (2 CPU cores). ``ModelThread.shared()`` is one long-lived thread on which every local model and
embedder runs (``LocalChat``, ``SentenceTransformerEmbedder``): one team in all. Behind ``evolve serve`` it
took one answer from 1.58 to 1.21 s, 16 at once from 6.4 to 3.9 s (p95) and a streamed answer from 4.3 to
1.2 s; alternating MiniLM embeddings and SmolLM2 answers, as the loop does, went from 1.9-2.2 s to
1.05-1.17 s an answer (``python -m bench.serve_concurrency``; the same machine, before and after).

Example:
    >>> worker = ModelThread("doc-example")
    >>> worker.run(lambda: threading.current_thread().name).startswith("doc-example")
    True
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
_SHARED: dict[str, ModelThread] = {}
_SHARED_LOCK = threading.Lock()


class ModelThread:
    """Runs callables on one dedicated thread (a call from that thread runs at once, so work may nest);
    ``shared()`` is the process's torch thread.

    Args:
        name: the thread's name prefix.
        threads: torch CPU threads on it (None: torch's default).
    """

    def __init__(self, name: str, *, threads: int | None = None) -> None:
        self.name = name
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._ident: int | None = None
        self._lock = threading.Lock()

    @classmethod
    def shared(cls) -> ModelThread:
        """The process's torch thread, shared by every local model and embedder: one OpenMP team in all."""
        with _SHARED_LOCK:
            if "torch" not in _SHARED:
                _SHARED["torch"] = cls("torch")
            return _SHARED["torch"]

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the model's thread; its result, or its exception raised here."""
        if threading.get_ident() == self._ident:
            return fn(*args, **kwargs)
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix=self.name, initializer=self._start)
            pool = self._pool
        return pool.submit(fn, *args, **kwargs).result()

    def _start(self) -> None:
        self._ident = threading.get_ident()
        if self.threads is not None:
            import torch

            torch.set_num_threads(self.threads)


__all__ = ["ModelThread"]
