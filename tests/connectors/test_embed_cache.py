"""CachedEmbedder: a repeated text gets the row the model gave it, without the model; the table is bounded."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

from connectors import ConfigError, Embedder, HashEmbedder
from connectors.embed_cache import CachedEmbedder


class Counting(HashEmbedder):
    """A HashEmbedder that records every text it is asked to embed."""

    def __init__(self) -> None:
        super().__init__(dim=32)
        self.seen: list[str] = []
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self.seen.extend(texts)
        return super().embed(texts)


def test_a_repeated_text_gets_the_same_row_without_the_model() -> None:
    model = Counting()
    cached = CachedEmbedder(model, size=8)
    first = cached.embed(["door code", "alarm code"])
    again = cached.embed(["alarm code", "door code", "door code"])
    assert np.array_equal(first, HashEmbedder(dim=32).embed(["door code", "alarm code"]))
    assert np.array_equal(again, first[[1, 0, 0]]) and model.seen == ["door code", "alarm code"]
    assert (cached.hits, cached.misses, cached.name, cached.dim) == (3, 2, "hash-32", 32)
    assert isinstance(cached, Embedder)


def test_a_text_twice_in_one_call_is_embedded_once_and_rows_handed_out_are_the_callers() -> None:
    model = Counting()
    cached = CachedEmbedder(model)
    rows = cached.embed(["gate", "gate", "badge"])
    assert model.seen == ["gate", "badge"] and np.array_equal(rows[0], rows[1])
    rows[0] = 0.0  # the caller's copy: the kept row stays
    assert np.array_equal(cached.embed(["gate"])[0], rows[1])
    assert cached.embed([]).shape == (0, 32)


def test_the_table_is_bounded_and_forgets_the_least_recently_used() -> None:
    model = Counting()
    cached = CachedEmbedder(model, size=2)
    cached.embed(["a", "b"])
    cached.embed(["a"])  # a is now the more recent
    cached.embed(["c"])  # b goes
    assert len(cached) == 2
    model.seen.clear()
    cached.embed(["a", "c", "b"])
    assert model.seen == ["b"] and len(cached) == 2


def test_many_threads_at_once_get_the_models_rows() -> None:
    model = Counting()
    cached = CachedEmbedder(model, size=16)
    texts = [f"question {i % 24}" for i in range(200)]
    expected = HashEmbedder(dim=32).embed(texts)
    got: dict[int, np.ndarray] = {}

    def ask(i: int) -> None:
        got[i] = cached.embed([texts[i]])[0]

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(got[i], expected[i]) for i in range(len(texts)))
    assert len(cached) <= 16 and cached.hits + cached.misses == len(texts) == cached.hits + len(model.seen)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ConfigError, match="size"):
        CachedEmbedder(HashEmbedder(), size=0)
    with pytest.raises(ConfigError, match="single string"):
        CachedEmbedder(HashEmbedder()).embed("not a list")  # type: ignore[arg-type]
