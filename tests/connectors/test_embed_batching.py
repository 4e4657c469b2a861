"""``BatchingEmbedder``: calls that arrive while the model is busy go together in its next call, each caller
gets exactly its own rows, a lone call waits for nothing, and a failure reaches the callers it concerns."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

from connectors.embed_batching import BatchingEmbedder
from connectors.embedders import HashEmbedder
from connectors.errors import ConnectorError


class GatedEmbedder:
    """A hash embedder whose first call blocks until the test opens the gate; it records every call."""

    def __init__(self) -> None:
        self.inner = HashEmbedder(dim=16)
        self.name, self.dim = self.inner.name, self.inner.dim
        self.calls: list[list[str]] = []
        self.entered, self.gate = threading.Event(), threading.Event()
        self.fail_on: str | None = None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        if len(self.calls) == 1:
            self.entered.set()
            assert self.gate.wait(10)
        if self.fail_on is not None and self.fail_on in texts:
            raise ConnectorError("the embedding server is down")
        return self.inner.embed(texts)


def in_threads(shared: BatchingEmbedder, batches: list[list[str]]) -> list[np.ndarray | BaseException]:
    out: list[np.ndarray | BaseException] = [np.zeros(0)] * len(batches)

    def run(i: int) -> None:
        try:
            out[i] = shared.embed(batches[i])
        except BaseException as e:
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(batches))]
    threads[0].start()
    assert shared.embedder.entered.wait(10)  # the first call holds the model
    for t in threads[1:]:
        t.start()
    while len(shared._queue) < len(batches) - 1:  # the others have queued behind it
        threading.Event().wait(0.005)
    shared.embedder.gate.set()
    for t in threads:
        t.join(10)
    return out


def test_calls_that_arrive_while_the_model_is_busy_share_its_next_call() -> None:
    shared = BatchingEmbedder(GatedEmbedder())
    batches = [["the Harbor door"], ["Zürich archive", "São Paulo office"], ["cold store"], ["roof access"]]
    out = in_threads(shared, batches)
    assert shared.embedder.calls[0] == ["the Harbor door"]
    assert len(shared.embedder.calls) == 2  # the three that queued: one model call
    assert sorted(shared.embedder.calls[1]) == sorted(t for b in batches[1:] for t in b)
    for texts, rows in zip(batches, out, strict=True):
        assert isinstance(rows, np.ndarray)
        np.testing.assert_allclose(rows, HashEmbedder(dim=16).embed(texts))  # each caller: its own rows, in order
    assert shared.batches[-2:] == [1, 3]


def test_a_lone_call_runs_at_once_and_keeps_the_embedders_name_and_dim() -> None:
    inner = HashEmbedder(dim=16)
    shared = BatchingEmbedder(inner)
    np.testing.assert_allclose(shared.embed(["a"]), inner.embed(["a"]))
    assert (shared.name, shared.dim) == (inner.name, inner.dim) and shared.batches == [1]
    assert shared.embed([]).shape == (0, 16)


def test_a_failure_reaches_every_caller_of_its_batch_and_the_model_recovers() -> None:
    gated = GatedEmbedder()
    gated.fail_on = "poison"
    shared = BatchingEmbedder(gated)
    out = in_threads(shared, [["first"], ["poison"], ["innocent bystander"]])
    assert isinstance(out[0], np.ndarray)
    assert all(isinstance(o, ConnectorError) and "down" in str(o) for o in out[1:])
    gated.fail_on = None
    assert shared.embed(["again"]).shape == (1, 16)  # the lead was released: nothing hangs


def test_a_queue_longer_than_one_call_takes_goes_in_several() -> None:
    shared = BatchingEmbedder(GatedEmbedder(), max_texts=2)
    out = in_threads(shared, [["a"], ["b", "c"], ["d"], ["e"]])
    assert all(isinstance(o, np.ndarray) for o in out)
    assert all(len(call) <= 2 for call in shared.embedder.calls[1:])
    assert sorted(t for call in shared.embedder.calls for t in call) == ["a", "b", "c", "d", "e"]


@pytest.mark.parametrize("n", [1, 16])
def test_a_store_behind_it_recalls_as_before(n: int) -> None:
    from memory import MemoryStore

    with MemoryStore("sqlite://", embedder=BatchingEmbedder(HashEmbedder(dim=32))) as store:
        ids = [m.id for m in store.add_many([(f"door code of site {i}", f"code {i}") for i in range(n)])]
        assert store.retrieve("door code of site 0").ids[0] == ids[0]
