"""What only PostgreSQL has: the pgvector column, its HNSW index answering phase A, and the upgrade of
stores written before it. The behaviour shared with SQLite is the conformance suite (``db_url``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from sqlalchemy import Engine, event, select, text

from connectors.embedders import HashEmbedder
from memory.config import MemoryConfig, RetrievalConfig
from memory.mirror import pgvector
from memory.mirror.pgvector import PgVectorIndex
from memory.storage.schema import intents
from memory.store import MemoryStore
from memory.write.checks import check_embeddings

pytestmark = pytest.mark.postgres
Open = Callable[..., MemoryStore]
DIM = 64


@pytest.fixture
def open_pg(pg_url: str) -> Iterator[Open]:
    opened: list[MemoryStore] = []

    def make(config: MemoryConfig | None = None) -> MemoryStore:
        opened.append(MemoryStore(pg_url, embedder=HashEmbedder(dim=DIM), config=config))
        return opened[-1]

    yield make
    for store in opened:
        store.close()


def unit_rows(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def indexes(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return {r[0] for r in conn.execute(text("SELECT indexname FROM pg_indexes WHERE tablename LIKE 'memory_%'"))}


def column_type(engine: Engine) -> str:
    with engine.connect() as conn:
        return str(
            conn.execute(
                text(
                    "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
                    " WHERE attrelid = 'memory_intents'::regclass AND attname = 'embedding'"
                )
            ).scalar_one()
        )


def test_pgvector_is_the_default_and_the_column_is_a_typed_vector_with_an_hnsw_index(open_pg: Open) -> None:
    store = open_pg()
    assert store.config.index == "pgvector" and "index='pgvector'" in repr(store)
    store.add("sort a list", "sorted()")
    assert store.index_status() == "database"
    assert isinstance(store._mirrors.loaded("default").index, PgVectorIndex)  # type: ignore[union-attr]
    assert column_type(store.engine) == f"vector({DIM})"
    assert {pgvector.HNSW_INDEX, pgvector.INTENT_ID_INDEX} <= indexes(store.engine)


def test_a_faiss_index_on_postgres_keeps_its_own_mirror_and_no_hnsw_index(open_pg: Open) -> None:
    store = open_pg(MemoryConfig(index="flat"))
    store.add_many([("sort a list", "sorted()"), ("parse a date", "fromisoformat")])
    assert store.index_status() == "built" and column_type(store.engine) == f"vector({DIM})"
    assert pgvector.HNSW_INDEX not in indexes(store.engine)  # no upkeep for an index nobody searches
    served = open_pg()  # a pgvector process joining later builds it over what is there
    assert pgvector.HNSW_INDEX in indexes(store.engine)
    assert served.retrieve("parse a date").ids == store.retrieve("parse a date").ids


def test_vectors_read_back_bit_for_bit(open_pg: Open) -> None:
    store = open_pg()
    vecs = unit_rows(20, 0)
    store.add_many([(f"task {i}", f"exp {i}") for i in range(20)], embeddings=vecs, group=False)
    with store.engine.connect() as conn:
        stored = conn.execute(select(intents.c.embedding).order_by(intents.c.seq)).scalars().all()
    kept = check_embeddings(vecs, 20, DIM)  # unit rows as given, others normalised: what the store keeps
    assert np.array_equal(np.frombuffer(b"".join(stored), dtype="<f4").reshape(20, DIM), kept)


def test_phase_a_is_answered_through_the_hnsw_index_and_finds_the_true_neighbours(open_pg: Open) -> None:
    store = open_pg()
    n = pgvector.ANALYZE_AFTER + 200  # a bulk load: the store refreshes the planner's statistics itself
    vecs = unit_rows(n, 1)
    store.add_many([(f"task {i}", f"exp {i}") for i in range(n)], embeddings=vecs, group=False)
    queries = unit_rows(5, 2)
    with store.engine.begin() as conn:
        conn.exec_driver_sql(pgvector.SEARCH_SETTINGS.format(ef=pgvector.EF_SEARCH_MIN))
        plan = conn.execute(
            text("EXPLAIN " + pgvector.SEARCH_SQL.text),
            {"queries": [pgvector.vector_text(q) for q in queries], "ns": "default", "k": 36},
        ).all()
    assert f"Index Scan using {pgvector.HNSW_INDEX}" in "\n".join(r[0] for r in plan)
    mirror = store._mirrors.loaded("default")
    assert mirror is not None
    sims, seqs = mirror.index.search(queries, 10)
    exact = queries @ vecs.T
    truth = mirror.seqs[np.argsort(-exact, axis=1)[:, :10]]
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(seqs, truth, strict=True)]) >= 0.9
    assert np.allclose(sims, np.sort(exact, axis=1)[:, ::-1][:, :10], atol=1e-5)


def test_another_process_recalls_the_same_without_building_an_index(open_pg: Open) -> None:
    first = open_pg()
    first.add_many([(f"deploy service {i} to staging", f"runbook {i}") for i in range(30)])
    first.reinforce(first.retrieve("deploy service 3 to staging"), 1.0)
    queries = ["deploy service 3 to staging", "service 12", "staging deploy"]
    expected = [first.retrieve(q, record=False).ids for q in queries]
    elsewhere = open_pg()  # another machine: a fresh process on the same database
    assert [elsewhere.retrieve(q, record=False).ids for q in queries] == expected
    assert elsewhere.index_status() == "database"
    exact = open_pg(MemoryConfig(index="flat"))  # FAISS flat, exact, on the same data
    assert [exact.retrieve(q, record=False).ids for q in queries] == expected


def test_a_namespace_is_found_through_the_graph_behind_another_namespaces_nearer_keys(open_pg: Open) -> None:
    store = open_pg()
    query = unit_rows(1, 3)[0]
    nearer = query + 0.05 * unit_rows(300, 4)  # every one nearer the query than any key of "far"
    store.add_many([(f"a {i}", "x") for i in range(300)], embeddings=nearer, namespace="near", group=False)
    farther = query + 0.6 * unit_rows(300, 5)
    ids = [
        m.id
        for m in store.add_many([(f"b {i}", "y") for i in range(300)], embeddings=farther, namespace="far", group=False)
    ]
    with store.engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE memory_intents, memory_items")

    def search(iterative: str) -> tuple[str, list[int]]:
        params = {"queries": [pgvector.vector_text(query)], "ns": "far", "k": 10}
        with store.engine.begin() as conn:
            conn.exec_driver_sql(pgvector.SEARCH_SETTINGS.format(ef=pgvector.EF_SEARCH_MIN))
            conn.exec_driver_sql(f"SET LOCAL hnsw.iterative_scan = {iterative}; SET LOCAL enable_seqscan = off")
            plan = "\n".join(r[0] for r in conn.execute(text("EXPLAIN " + pgvector.SEARCH_SQL.text), params))
            return plan, [int(r[1]) for r in conn.execute(pgvector.SEARCH_SQL, params)]

    plan, found = search("strict_order")  # what PgVectorIndex sets
    assert f"Index Scan using {pgvector.HNSW_INDEX}" in plan
    mirror = store._mirrors.loaded("far")
    assert mirror is not None
    truth = mirror.seqs[np.argsort(-(mirror.vectors() @ query))[:10]]
    assert len(set(found) & set(truth.tolist())) >= 9
    assert search("off")[1] == []  # one pass of ef_search = 40 candidates holds only the nearer namespace
    recall = store.retrieve("anything", namespace="far", config=RetrievalConfig(k1=10, k2=3, delta=-1.0))
    assert len(recall.ids) == 3 and set(recall.ids) <= set(ids)


def test_keys_left_without_items_do_not_shorten_phase_a(open_pg: Open) -> None:
    store = open_pg()
    vecs = unit_rows(12, 6)
    ids = [m.id for m in store.add_many([(f"task {i}", "x") for i in range(12)], embeddings=vecs, group=False)]
    query = vecs[0]
    order = np.argsort(-(vecs @ query))
    store.remove([ids[i] for i in order[:4]])  # their keys stay, with no items
    mirror = store._mirrors.loaded("default")
    assert mirror is not None
    sims, seqs = mirror.index.search(query[None, :], 5)
    assert [mirror.ids[mirror.rows_of_seqs(seqs[0])][j] for j in range(5)] == [ids[i] for i in order[4:9]]


def test_opening_a_new_database_from_many_threads_at_once_creates_it_once(pg_url: str) -> None:
    errors: list[BaseException] = []
    stores: list[MemoryStore] = []

    def open_one() -> None:
        try:
            stores.append(MemoryStore(pg_url, embedder=HashEmbedder(dim=DIM)))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and len(stores) == 4
    stores[0].add("sort a list", "sorted()")
    assert [s.retrieve("sort a list").items[0].experience for s in stores] == ["sorted()"] * 4
    for s in stores:
        s.close()


def test_a_store_written_with_bytea_vectors_is_upgraded_on_open(open_pg: Open) -> None:
    first = open_pg()
    ids = [m.id for m in first.add_many([("sort a list", "sorted()"), ("parse a date", "fromisoformat")])]
    before = [first.retrieve(q).ids for q in ("sort a list", "parse a date")]
    with first.engine.begin() as conn:  # the layout PostgreSQL stores had before pgvector support
        blobs = conn.execute(select(intents.c.id, intents.c.embedding)).all()
        conn.exec_driver_sql("ALTER TABLE memory_intents DROP COLUMN embedding")
        conn.exec_driver_sql("ALTER TABLE memory_intents ADD COLUMN embedding bytea")
        for key_id, blob in blobs:
            conn.execute(text("UPDATE memory_intents SET embedding = :b WHERE id = :i"), {"b": blob, "i": key_id})
    first.close()
    again = open_pg()
    assert column_type(again.engine) == f"vector({DIM})"
    assert [again.retrieve(q).ids for q in ("sort a list", "parse a date")] == before
    assert before[0][0] == ids[0]


def test_a_large_namespace_has_its_depth_measured_once_and_kept_for_every_process(
    open_pg: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pgvector, "TUNE_FROM", 1000)
    store = open_pg()
    n = 1500
    store.add_many([(f"task {i}", f"exp {i}") for i in range(n)], embeddings=unit_rows(n, 3), group=False)
    assert store.wait_for_index(120)
    tuned = store.index_details()
    assert tuned["error"] is None and not tuned["working"]
    assert tuned["tuned_at"] == n and tuned["tune_queries"] == pgvector.TUNE_QUERIES
    assert tuned["measured_recall_at_10"] >= 0.97 and tuned["ef_search"] >= 36
    kept = "SELECT ef_search, items, tuned_at FROM memory_pgvector_tuning WHERE namespace = 'default'"
    with store.engine.connect() as conn:
        ef, items, at = conn.execute(text(kept)).one()
        assert (ef, items) == (tuned["ef_search"], n)
        conn.execute(text("UPDATE memory_pgvector_tuning SET ef_search = 123"))
        conn.commit()
    other = open_pg()  # another process: the depth kept is read, not measured again (the namespace has not doubled)
    said: list[str] = []
    event.listen(other.engine, "before_cursor_execute", lambda *a: said.append(a[2]))
    other.retrieve("task 7", record=False)
    assert any("hnsw.ef_search = 123" in s for s in said)
    said.clear()  # a write's grouping asks for the one nearest key: a short walk, not the recall's depth
    other.write("task 7 once more", trajectory="tried", feedback="ok", success=True)
    assert any(f"hnsw.ef_search = {pgvector.EF_SEARCH_MIN};" in s for s in said)
    assert not any("hnsw.ef_search = 123" in s for s in said)
    assert other.index_details()["ef_search"] == 123 and not other.index_details()["working"]
    with other.engine.connect() as conn:
        assert conn.execute(text(kept)).one()[2] == at


def test_a_tuning_that_fails_leaves_the_depth_as_it_was_and_says_why(
    open_pg: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> np.ndarray:
        raise MemoryError("no room for the exact answers")

    monkeypatch.setattr(pgvector, "TUNE_FROM", 1000)
    monkeypatch.setattr(pgvector, "exact_nearest", broken)
    store = open_pg()
    store.add_many([(f"task {i}", f"exp {i}") for i in range(1200)], embeddings=unit_rows(1200, 4), group=False)
    assert store.wait_for_index(60)
    details = store.index_details()
    assert details["ef_search"] == pgvector.EF_SEARCH_MIN and details["measured_recall_at_10"] is None
    assert details["error"] == "MemoryError: no room for the exact answers"
    assert len(store.retrieve("task 3", record=False).items) > 0
