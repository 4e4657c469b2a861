"""The vector index: FAISS and the NumPy fallback agree; saved indexes are loaded, caught up or rebuilt."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import memory.mirror.backend
import memory.mirror.index
from connectors.embedders import HashEmbedder
from connectors.errors import ConfigError
from memory.config import MemoryConfig, RetrievalConfig
from memory.mirror.index import VectorIndex
from memory.mirror.sync import index_file
from memory.store import MemoryStore
from tests.memory.conftest import sqlite_only

Open = Callable[..., MemoryStore]
QUERIES = ["deploy the web service", "rotate the api keys", "task 18 about billing", "backup the database"]


def fill(store: MemoryStore, n: int = 60, start: int = 0) -> None:
    topics = ["billing", "deploy", "database", "keys", "web service", "backup"]
    store.add_many([(f"task {i} about {topics[i % 6]}", f"experience {i}") for i in range(start, start + n)])


def recalls(store: MemoryStore) -> list[tuple[tuple[str, ...], tuple[float, ...]]]:
    return [(r.ids, r.scores) for r in (store.retrieve(q, record=False) for q in QUERIES)]


@pytest.fixture
def numpy_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory.mirror.backend, "load_faiss", lambda: None)


def test_faiss_and_numpy_search_return_the_same_neighbours() -> None:
    pytest.importorskip("faiss")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((500, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ids = np.arange(1000, 1500)
    fast, slow = VectorIndex(32, backend="faiss"), VectorIndex(32, backend="numpy")
    for ix in (fast, slow):
        ix.add(ids, x)
        ix.remove(ids[:10])
    assert fast.search(x[:5], 7)[1].tolist() == slow.search(x[:5], 7)[1].tolist()
    assert sorted(fast.ids().tolist()) == sorted(slow.ids().tolist()) == list(range(1010, 1500))
    assert np.array_equal(fast.reconstruct(1200), slow.reconstruct(1200))


def test_store_without_faiss_returns_the_same_recalls(
    open_store: Open, tmp_path: Path, embedder: HashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("faiss")
    with_faiss = open_store()
    fill(with_faiss)
    expected = recalls(with_faiss)
    monkeypatch.setattr(memory.mirror.backend, "load_faiss", lambda: None)
    without = MemoryStore(f"sqlite:///{tmp_path / 'np.db'}", embedder=embedder)
    fill(without)
    assert without._mirrors.loaded("default").index.backend == "numpy"  # type: ignore[union-attr]
    got = recalls(without)
    assert [len(ids) for ids, _ in got] == [5, 5, 5, 5]
    assert [s for _, s in got] == [s for _, s in expected]  # same scores (ids differ: two databases)
    same_texts = [[without.get(i).intent for i in ids] for ids, _ in got]
    assert same_texts == [[with_faiss.get(i).intent for i in ids] for ids, _ in expected]
    without.close()


def test_hnsw_needs_faiss(numpy_only: None, embedder: HashEmbedder) -> None:
    with pytest.raises(Exception, match="local"):
        MemoryStore("sqlite://", embedder=embedder, config=MemoryConfig(index="hnsw")).retrieve("x")


def test_pgvector_index_needs_postgres(embedder: HashEmbedder) -> None:
    with pytest.raises(ConfigError, match=r"index='pgvector' needs a PostgreSQL database"):
        MemoryStore("sqlite://", embedder=embedder, config=MemoryConfig(index="pgvector"))


@pytest.mark.parametrize(("version", "iterative"), [("0.8.5", True), ("0.10.0", True), ("0.7.4", False)])
def test_pgvector_index_asks_for_iterative_scans_only_where_pgvector_has_them(version: str, iterative: bool) -> None:
    from memory.mirror import pgvector

    class Conn:
        def exec_driver_sql(self, sql: str) -> Any:
            return type("Result", (), {"scalar": lambda _: version})()

    index = pgvector.PgVectorIndex(lambda: None, "default", dim=4)  # type: ignore[arg-type,return-value]
    settings = index._search_settings(Conn())  # type: ignore[arg-type]
    assert ("iterative_scan" in settings) is iterative and "ef_search" in settings


def test_a_big_tied_group_yields_its_oldest_members(open_store: Open) -> None:
    store = open_store(MemoryConfig(retrieval=RetrievalConfig(k1=10, k2=10, lam=0.0)))
    ids = [
        m.id for m in store.add_many([("restart the server", f"attempt {i}") for i in range(80)])
    ]  # one intent group
    store.add("water plants daily", "unrelated")
    recall = store.retrieve("restart the server")
    assert recall.ids == tuple(ids[:10])  # 80 exact ties: the index may return any; the oldest win


@sqlite_only
def test_saved_index_is_loaded_then_caught_up_when_stale(open_store: Open, db_url: str, tmp_path: Path) -> None:
    pytest.importorskip("faiss")
    first = open_store()
    fill(first)
    assert first.index_status() == "built"
    first.close()
    path = index_file(Path(db_url.removeprefix("sqlite:///") + ".faiss"), "default")
    assert path.exists() and path.with_name(path.name + ".json").exists()
    second = open_store()
    assert second.index_status() == "loaded"
    expected = recalls(second)
    shutil.copy(path, tmp_path / "old.faiss")
    shutil.copy(path.with_name(path.name + ".json"), tmp_path / "old.json")
    fill(second, n=30, start=60)
    expected = recalls(second)
    second.close()
    shutil.copy(tmp_path / "old.faiss", path)  # put the stale index back
    shutil.copy(tmp_path / "old.json", path.with_name(path.name + ".json"))
    third = open_store()
    assert third.index_status() == "caught_up"
    assert recalls(third) == expected
    assert len(third._mirrors.loaded("default").index) == 90  # type: ignore[union-attr]


@sqlite_only
@pytest.mark.parametrize("damage", ["delete", "garbage", "truncate", "foreign"])
def test_damaged_index_is_rebuilt_and_agrees_with_the_database(
    open_store: Open, db_url: str, damage: str, embedder: HashEmbedder, tmp_path: Path
) -> None:
    pytest.importorskip("faiss")
    first = open_store()
    fill(first)
    expected = recalls(first)
    first.close()
    path = index_file(Path(db_url.removeprefix("sqlite:///") + ".faiss"), "default")
    if damage == "delete":
        path.unlink()
    elif damage == "garbage":
        path.write_bytes(b"not an index at all" * 100)
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[:200])
    else:  # an index of another database whose ids happen to match, with different vectors
        other = MemoryStore(f"sqlite:///{tmp_path / 'other.db'}", embedder=embedder)
        other.add_many([(f"unrelated thing {i}", "x") for i in range(60)])
        other.close()
        shutil.copy(index_file(tmp_path / "other.db.faiss", "default"), path)
    again = open_store()
    assert again.index_status() == ("built" if damage == "delete" else "rebuilt")
    assert recalls(again) == expected
    again.close()
    assert open_store().index_status() == "loaded"  # the rebuilt index was saved


def test_in_memory_store_writes_no_index_file(
    embedder: HashEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with MemoryStore("sqlite://", embedder=embedder) as store:
        fill(store, 10)
        assert store.save_index() == 0
    assert list(tmp_path.iterdir()) == []


def test_hnsw_store_recalls_and_reloads(open_store: Open, db_url: str) -> None:
    """FAISS HNSW in the process, on either backend (a server database saves no index file)."""
    pytest.importorskip("faiss")
    cfg = MemoryConfig(index="hnsw", capacity=50)
    store = open_store(cfg)
    fill(store)
    fill(store, n=10, start=60)  # over capacity: the 20 oldest leave the HNSW graph
    assert len(store._mirrors.loaded("default").index) == store.stats()["count"] == 50  # type: ignore[union-attr]
    got = store.retrieve("task 48 about billing")
    assert got.items[0].intent == "task 48 about billing"
    store.close()
    again = open_store(cfg)
    assert again.index_status() == ("loaded" if db_url.startswith("sqlite") else "built")
    assert again.retrieve("task 48 about billing").ids == got.ids


def unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_ivf_index_is_exact_until_trained_then_finds_most_true_neighbours() -> None:
    pytest.importorskip("faiss")
    dim, n = 32, memory.mirror.index.IVF_TRAIN_AT + 500
    x = unit_rows(n, dim, 1)
    ivf, flat = VectorIndex(dim, kind="ivf"), VectorIndex(dim, kind="flat")
    ids = np.arange(n, dtype=np.int64) * 3 + 7
    ivf.add(ids[:1000], x[:1000])
    assert ivf.trained_lists == 0  # small: still an exact flat index
    ivf.add(ids[1000:], x[1000:])
    flat.add(ids, x)
    assert ivf.trained_lists >= 16 and len(ivf) == n
    assert sorted(ivf.ids().tolist()) == ids.tolist()
    queries = x[:200] + 0.1 * unit_rows(200, dim, 2)  # each near one stored vector
    assert np.array_equal(flat.search(queries, 1)[1][:, 0], ids[:200])
    assert np.mean(ivf.search(queries, 1)[1][:, 0] == ids[:200]) >= 0.95  # approximate, not far off
    ivf.remove(ids[:10])
    assert len(ivf) == n - 10 and not set(ids[:10].tolist()) & set(ivf.ids().tolist())


@sqlite_only  # 20,000 rows; the IVF index itself does not depend on the database
def test_ivf_store_groups_through_the_index_and_reloads(open_store: Open) -> None:
    pytest.importorskip("faiss")
    cfg = MemoryConfig(index="ivf")
    store = open_store(cfg)
    dim = store.dim
    n = memory.mirror.index.IVF_TRAIN_AT + 100
    vecs = unit_rows(n, dim, 3)
    store.add_many([(f"task {i}", f"experience {i}") for i in range(n)], embeddings=vecs, group=False)
    index = store._mirrors.loaded("default").index  # type: ignore[union-attr]
    assert index.trained_lists > 0
    # A near-duplicate of stored task 5 joins its group (found through the index, not a scan).
    store.add_many([("task 5 again", "more")], embeddings=vecs[5:6] * 1.0001)
    stats = store.stats()
    assert (stats["count"], stats["intents"]) == (n + 1, n)
    store.close()
    again = open_store(cfg)
    assert again.index_status() == "loaded"
    assert again._mirrors.loaded("default").index.trained_lists == index.trained_lists  # type: ignore[union-attr]
