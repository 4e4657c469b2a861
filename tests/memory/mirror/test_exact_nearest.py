"""The exact answers a pgvector tuning measures its recall against (``memory.mirror.pgvector.exact_nearest``)."""

from __future__ import annotations

import numpy as np
import pytest

from memory.mirror import pgvector


@pytest.mark.parametrize("chunk", [7, 64, 65_536])
def test_the_exact_nearest_keys_are_found_whatever_the_chunks(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(pgvector, "EXACT_CHUNK", chunk)
    rng = np.random.default_rng(3)
    keys = rng.standard_normal((500, 16)).astype(np.float32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    codes = np.sort(rng.choice(500, size=300, replace=False))  # live keys only: the others must never come back
    queries = keys[:20] + 0.1 * rng.standard_normal((20, 16)).astype(np.float32)
    found = pgvector.exact_nearest(keys.__getitem__, codes, queries, 10)
    truth = codes[np.argsort(-(queries @ keys[codes].T), axis=1)[:, :10]]
    assert found.shape == (20, 10)
    assert [set(f) for f in found.tolist()] == [set(t) for t in truth.tolist()]


def test_fewer_keys_than_asked_come_back_all() -> None:
    keys = np.eye(4, dtype=np.float32)
    found = pgvector.exact_nearest(keys.__getitem__, np.array([1, 3]), keys[:2], 10)
    assert [sorted(f) for f in found.tolist()] == [[1, 3], [1, 3]]
