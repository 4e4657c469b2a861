"""The memory store on PostgreSQL: intents' vectors in a pgvector column, phase A served by its HNSW index.

Schema: ``memory_intents.embedding`` is ``schema.Embedding``, which is a BLOB on SQLite and a pgvector
``vector`` on PostgreSQL (``VectorBytes`` below); the rest of the package keeps handling vectors as
little-endian float32 bytes. The metadata is module-level and cannot know a store's dimension, so
``before_tables`` creates the extension and ``after_tables`` gives the column its dimension
(``vector(dim)``), adds an index on ``memory_items (intent_id, seq)`` for the join from keys to
items and, for ``index="pgvector"`` stores, the HNSW index (``vector_ip_ops``: vectors are unit
length, so the inner product is the cosine). Both run inside ``create_schema``'s transaction under a
transaction-level advisory lock, so processes opening a new database at once create it once.

Search: ``PgVectorIndex`` is the index of a ``MemoryConfig(index="pgvector")`` store (the default on
PostgreSQL). A mirror's index is per item while vectors are per intent key, so one statement asks
the HNSW index for the nearest keys of the namespace that still have items, joins their items and
returns item ``seq``s best first (older first within a key), which is exactly what every other
index returns; the mirror then re-scores the candidates exactly (float64, from its copy of the key
vectors), and phase B reads Q from the mirror. ``hnsw.ef_search`` is raised to at least the number
of keys asked for, and the iterative scan of pgvector >= 0.8 keeps walking the graph while the
namespace filter drops other namespaces' keys (older pgvector ignores the setting and may then
return fewer candidates in a namespace crowded out by another). No index is built, loaded or saved
in the process; the mirror still reads the key vectors once when it loads a namespace.

Depth: pgvector's default ``ef_search`` (40) found 0.984 of the ten nearest at 100k items and 0.653 at a
million (``bench.memory_pgvector``). So a namespace of ``TUNE_FROM`` items or more has its depth measured
as the in-process graph's is (``memory.mirror.graph.tuned_ef``): sampled queries near stored keys, their
exact ten nearest from the mirror's key vectors, searched at rising ``ef_search`` until the candidates
hold ``TUNE_RECALL`` of them. It runs in a background thread (recalls use the depth known so far), is kept
in ``memory_pgvector_tuning`` for every process, and runs again when the namespace has doubled.

psycopg is imported by SQLAlchemy when a ``postgresql+psycopg://`` engine is made
(``connectors.db`` names the ``pg`` extra when it is missing); this module needs no other package.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Connection, text
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import func
from sqlalchemy.types import LargeBinary, TypeDecorator, UserDefinedType

from connectors.errors import StoreError
from connectors.pglock import advisory_key
from memory.mirror.graph import CANDIDATES, TUNE_K, Tuning, near, recall_at, tuned_ef

if TYPE_CHECKING:
    from memory.mirror.nearest import Mirror

log = logging.getLogger(__name__)

HNSW_MAX_DIM = 2000  # pgvector's limit for an HNSW index on ``vector``
EF_SEARCH_MIN = 40  # pgvector's default
EF_SEARCH_MAX = 1000  # pgvector's maximum
SCHEMA_LOCK = advisory_key("memory.storage.schema")
HNSW_INDEX = "ix_memory_intents_embedding_hnsw"
INTENT_ID_INDEX = "ix_memory_items_intent_seq"
TUNE_FROM = 20_000  # live items from which a namespace's depth is measured (below it the default finds ~all)
TUNE_QUERIES = 200  # sampled queries: one statement of them per depth tried (seconds each at a million keys)
TUNE_SEED = 20_260_101
EXACT_CHUNK = 65_536  # key vectors compared with the queries at a time when finding the exact answers

# Each namespace's measured depth, for every process (``PgVectorIndex.follow``); created with the HNSW index.
TUNING_TABLE = "memory_pgvector_tuning"
TUNING_DDL = """CREATE TABLE IF NOT EXISTS memory_pgvector_tuning (
    namespace varchar(200) PRIMARY KEY, ef_search integer NOT NULL, recall double precision NOT NULL,
    items bigint NOT NULL, queries integer NOT NULL, tuned_at double precision NOT NULL)"""
TUNING_SQL = text("SELECT ef_search, recall, items, queries FROM memory_pgvector_tuning WHERE namespace = :ns")
KEEP_TUNING_SQL = text("""
INSERT INTO memory_pgvector_tuning (namespace, ef_search, recall, items, queries, tuned_at)
VALUES (:ns, :ef, :recall, :items, :queries, :at)
ON CONFLICT (namespace) DO UPDATE SET ef_search = EXCLUDED.ef_search, recall = EXCLUDED.recall,
    items = EXCLUDED.items, queries = EXCLUDED.queries, tuned_at = EXCLUDED.tuned_at
""")

# For each query (one row of the unnested array) the nearest keys that still have valid items, then at
# most k of each key's valid items (superseded ones are never recalled: ``memory.upkeep.supersession``), oldest
# first (an index range scan on (intent_id, seq)), best first overall; equal similarity (one key's
# items) keeps the older item. ORDER BY repeats the indexed expression so
# the planner can walk the HNSW index.
SEARCH_SQL = text("""
SELECT q.n, near.seq, near.sim
FROM unnest(CAST(:queries AS text[])) WITH ORDINALITY AS q(v, n)
CROSS JOIN LATERAL (
    SELECT i.seq, -k.d AS sim
    FROM (
        SELECT t.id, t.embedding <#> CAST(q.v AS vector) AS d
        FROM memory_intents t
        WHERE t.namespace = :ns
          AND EXISTS (SELECT 1 FROM memory_items m WHERE m.intent_id = t.id AND m.valid_to IS NULL)
        ORDER BY t.embedding <#> CAST(q.v AS vector)
        LIMIT :k
    ) k
    CROSS JOIN LATERAL (
        SELECT m.seq FROM memory_items m WHERE m.intent_id = k.id AND m.valid_to IS NULL ORDER BY m.seq LIMIT :k
    ) i
    ORDER BY k.d, i.seq
    LIMIT :k
) near
ORDER BY q.n, near.sim DESC, near.seq
""")

# SET LOCAL: the settings end with the search's transaction, so pooled connections stay clean.
SEARCH_SETTINGS = "SET LOCAL hnsw.ef_search = {ef}; SET LOCAL hnsw.iterative_scan = strict_order"
OLD_SEARCH_SETTINGS = "SET LOCAL hnsw.ef_search = {ef}"  # pgvector before 0.8: no iterative scans
ITERATIVE_SCAN_SINCE = (0, 8)
# Rows written since the planner's statistics were refreshed, beyond which this process refreshes
# them: until autovacuum's ANALYZE runs (up to a minute), a freshly filled namespace looks like a
# handful of keys and the planner scans them all instead of walking the HNSW index (measured: 41 ms
# against 3 ms for 3,000 keys).
ANALYZE_AFTER = 1000


class VectorBytes(UserDefinedType[bytes]):
    """pgvector's ``vector`` seen from Python as little-endian float32 bytes (what SQLite stores).

    Values go in as text (``[0.25,-1.5,…]``, each float32 printed exactly) and are selected through
    ``vector_send`` as binary (``SentVector``), so reading many vectors costs no text parsing.
    """

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "vector"

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], str | None]:
        def process(value: Any) -> str | None:
            return None if value is None else vector_text(np.frombuffer(value, dtype="<f4"))

        return process

    def column_expression(self, colexpr: ColumnElement[Any]) -> ColumnElement[Any]:
        return func.vector_send(colexpr, type_=SentVector())


class SentVector(TypeDecorator[bytes]):
    """The result of ``vector_send``: a uint16 dimension, a uint16 zero, then big-endian float32s."""

    impl = LargeBinary
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Dialect) -> bytes | None:
        if value is None:
            return None
        return np.frombuffer(bytes(value), dtype=">f4", offset=4).astype("<f4").tobytes()


def vector_text(vec: np.ndarray) -> str:
    """pgvector's text form of one vector; ``repr`` of each float32 (as a double) reads back exactly."""
    return "[" + ",".join(map(repr, np.asarray(vec, dtype=np.float32).astype(np.float64).tolist())) + "]"


def before_tables(conn: Connection) -> None:
    """Serialise schema creation and make sure the ``vector`` type exists (inside the caller's transaction)."""
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": SCHEMA_LOCK})
    if conn.exec_driver_sql("SELECT 1 FROM pg_extension WHERE extname = 'vector'").first() is not None:
        return
    try:
        with conn.begin_nested():
            conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS vector")
    except DBAPIError as e:
        database = conn.exec_driver_sql("SELECT current_database()").scalar_one()
        raise StoreError(
            f"the memory store needs the pgvector extension in PostgreSQL database {database!r}, and "
            f"CREATE EXTENSION vector failed: {e.orig}. Install pgvector on the server "
            "(https://github.com/pgvector/pgvector) or have an administrator run CREATE EXTENSION vector there."
        ) from e


def after_tables(conn: Connection, dim: int | None, *, hnsw: bool = True) -> None:
    """Give the vector column its dimension and create the indexes phase A (``hnsw``) and the join
    from keys to items use (stores with an in-process index skip the HNSW index and its upkeep).

    The dimension is the store's recorded one, else ``dim`` (a new store); a column that already has
    a dimension is left alone (opening with another embedder is refused later, with a clear message).
    """
    recorded = conn.exec_driver_sql("SELECT dim FROM memory_state WHERE id = 1").scalar()
    dim = int(recorded) if recorded is not None else dim
    column = conn.exec_driver_sql(
        "SELECT format_type(atttypid, atttypmod), atttypmod FROM pg_attribute"
        " WHERE attrelid = 'memory_intents'::regclass AND attname = 'embedding'"
    ).one()
    if column[0] == "bytea":
        upgrade_bytea(conn, dim)
    elif column[1] == -1 and dim is not None:
        conn.exec_driver_sql(f"ALTER TABLE memory_intents ALTER COLUMN embedding TYPE vector({int(dim)})")
        log.info("memory store: memory_intents.embedding is vector(%d)", dim)
    conn.exec_driver_sql(f"CREATE INDEX IF NOT EXISTS {INTENT_ID_INDEX} ON memory_items (intent_id, seq)")
    if dim is None or not hnsw:
        return
    if dim > HNSW_MAX_DIM:
        log.warning(
            "memory store: pgvector cannot build an HNSW index on %d-dimensional vectors (at most %d); "
            "phase A will scan the namespace exactly",
            dim,
            HNSW_MAX_DIM,
        )
        return
    conn.exec_driver_sql(
        f"CREATE INDEX IF NOT EXISTS {HNSW_INDEX} ON memory_intents USING hnsw (embedding vector_ip_ops)"
    )
    conn.exec_driver_sql(TUNING_DDL)


def upgrade_bytea(conn: Connection, dim: int | None) -> None:
    """Move a store written before pgvector support (float32 bytes in ``bytea``) to a vector column."""
    log.info("memory store: converting memory_intents.embedding from bytea to vector")
    rows = conn.exec_driver_sql("SELECT id, embedding FROM memory_intents").all()
    if dim is None and rows:
        dim = len(rows[0][1]) // 4
    typed = "vector" if dim is None else f"vector({int(dim)})"
    conn.exec_driver_sql(f"ALTER TABLE memory_intents ADD COLUMN embedding_new {typed}")
    if rows:
        conn.execute(
            text("UPDATE memory_intents SET embedding_new = CAST(:v AS vector) WHERE id = :id"),
            [{"id": r[0], "v": vector_text(np.frombuffer(bytes(r[1]), dtype="<f4"))} for r in rows],
        )
    conn.exec_driver_sql("ALTER TABLE memory_intents DROP COLUMN embedding")
    conn.exec_driver_sql("ALTER TABLE memory_intents RENAME COLUMN embedding_new TO embedding")
    conn.exec_driver_sql("ALTER TABLE memory_intents ALTER COLUMN embedding SET NOT NULL")


class PgVectorIndex:
    """One namespace's phase A, answered by PostgreSQL through the HNSW index (``SEARCH_SQL``).

    It holds nothing: the rows are already in SQL when the mirror calls ``add`` and ``remove``, so
    ``add`` only counts them (to refresh the planner's statistics after a bulk load, and to tune the
    depth again once the namespace has doubled), ``remove`` does nothing and ``save`` writes no file.
    ``tuning`` is the depth searched (``follow``); ``wait`` and ``close`` are for its background work.

    Args:
        connect: opens a transaction on the store's database (``Database.transaction``).
        namespace: the namespace searched.
        dim: the vectors' dimension.
        read: opens a read transaction that takes no part in the store's writes, for the tuning's searches
            (default ``connect``).

    Example:
        >>> index = PgVectorIndex(store_db.transaction, "default", dim=384)  # doctest: +SKIP
        >>> sims, seqs = index.search(query_vectors, 10)  # doctest: +SKIP
    """

    kind = "pgvector"
    approximate = True

    def __init__(
        self,
        connect: Callable[[], AbstractContextManager[Connection]],
        namespace: str,
        *,
        dim: int,
        read: Callable[[], AbstractContextManager[Connection]] | None = None,
    ) -> None:
        self.connect = connect
        self.read = read or connect
        self.namespace = namespace
        self.dim = dim
        self._unanalysed = 0
        self._settings: str | None = None
        self.tuning = Tuning(EF_SEARCH_MIN)
        self.error: str | None = None  # why the last tuning failed (the depth known before stays)
        self._mirror: Mirror | None = None
        self._worker: threading.Thread | None = None
        self._closed = False

    def __len__(self) -> int:
        with self.connect() as conn:
            return int(
                conn.execute(
                    text("SELECT count(*) FROM memory_items WHERE namespace = :ns"), {"ns": self.namespace}
                ).scalar_one()
            )

    def add(self, ids: np.ndarray, vecs: np.ndarray, *, expect: int = 0) -> None:
        """Count rows already written to SQL; after ``ANALYZE_AFTER`` of them, refresh the statistics."""
        self._unanalysed += len(ids)
        if self._unanalysed >= ANALYZE_AFTER:
            with self.connect() as conn:
                conn.exec_driver_sql("ANALYZE memory_intents, memory_items")
            self._unanalysed = 0
        self._kick()

    def remove(self, ids: np.ndarray) -> None:
        """Nothing to do: deleted items leave the search with their rows."""

    def save(self, path: Path, generation: int) -> bool:
        return False

    def search(self, queries: np.ndarray, k: int, *, ef: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest items (``seq``s) of the namespace per query row, best first (-1 pads), searched at
        the tuned depth (``ef``: this depth instead), at least k and pgvector's default."""
        return self._search(queries, k, ef, self.connect)

    def _search(
        self, queries: np.ndarray, k: int, ef: int | None, connect: Callable[[], AbstractContextManager[Connection]]
    ) -> tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, self.dim)
        m = queries.shape[0]
        sims = np.full((m, k), -np.inf, dtype=np.float32)
        ids = np.full((m, k), -1, dtype=np.int64)
        if m == 0 or k == 0:
            return sims, ids
        ef = min(EF_SEARCH_MAX, max(ef or self.tuning.ef, k, EF_SEARCH_MIN))
        with connect() as conn:
            conn.exec_driver_sql(self._search_settings(conn).format(ef=ef))
            rows = conn.execute(
                SEARCH_SQL, {"queries": [vector_text(q) for q in queries], "ns": self.namespace, "k": k}
            ).all()
        filled = np.zeros(m, dtype=np.int64)
        for n, seq, sim in rows:
            row = int(n) - 1
            sims[row, filled[row]] = sim
            ids[row, filled[row]] = seq
            filled[row] += 1
        return sims, ids

    # -- depth ---------------------------------------------------------------------------------
    def follow(self, mirror: Mirror, conn: Connection) -> None:
        """Take the namespace's depth kept in the database (read on ``conn``, the loading transaction) and tune
        it in the background when it is missing or the namespace has doubled since (``mirror``: the
        namespace's mirror, whose key vectors give the exact answers; called under the store's lock)."""
        self._mirror = mirror
        if conn.execute(text("SELECT to_regclass(:t)"), {"t": TUNING_TABLE}).scalar() is not None:
            row = conn.execute(TUNING_SQL, {"ns": self.namespace}).first()
            if row is not None:
                self.tuning = Tuning(int(row[0]), float(row[1]), int(row[2]), int(row[3]))
        self._kick()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a tuning that runs is done; false when ``timeout`` seconds passed first."""
        worker = self._worker
        if worker is not None:
            worker.join(timeout)
            return not worker.is_alive()
        return True

    def close(self) -> None:
        """Stop a tuning at its next depth (nothing is kept of it)."""
        self._closed = True

    def _kick(self) -> None:
        """Start a tuning when one is due (under the store's lock: the live keys are taken now)."""
        mirror, items = self._mirror, len(self._mirror) if self._mirror is not None else 0
        if mirror is None or self._closed or self.error is not None or self._worker is not None:
            return
        if self.dim > HNSW_MAX_DIM or items < TUNE_FROM or items < 2 * self.tuning.at:
            return
        codes = np.unique(mirror.intent_codes)
        self._worker = threading.Thread(
            target=self._tune, args=(mirror, codes, items), name="evolve-pgvector-tuning", daemon=True
        )
        self._worker.start()

    def _tune(self, mirror: Mirror, codes: np.ndarray, items: int) -> None:
        """Measure recall@10 at rising depths (``tuned_ef``) and keep the depth chosen, here and in the database."""
        try:
            rng = np.random.default_rng(TUNE_SEED)
            queries = near(mirror.key_rows(rng.choice(codes, size=min(TUNE_QUERIES, len(codes)), replace=False)), rng)
            truth = exact_nearest(mirror.key_rows, codes, queries, TUNE_K)

            def recall_of(ef: int) -> float:
                if self._closed:
                    raise InterruptedError("the store closed")
                seqs = self._search(queries, CANDIDATES, ef, self.read)[1].ravel()
                rows = mirror.rows_of_seqs(seqs)
                found = np.where(rows >= 0, mirror.intent_codes[np.maximum(rows, 0)], -1)
                return recall_at(found.reshape(len(queries), -1), truth)

            ef, recall = tuned_ef(recall_of)
            tuning = Tuning(min(max(ef, CANDIDATES, EF_SEARCH_MIN), EF_SEARCH_MAX), recall, items, len(queries))
            self.tuning = tuning  # used here at once; kept for the other processes below (not on a read-only database)
            with self.connect() as conn:
                conn.execute(KEEP_TUNING_SQL, {"ns": self.namespace, "ef": tuning.ef, "recall": recall, "items": items,
                                               "queries": tuning.queries, "at": time.time()})  # fmt: skip
            log.info("memory index (pgvector) of namespace %r: ef_search %d, recall@10 %.3f on %d queries at %d items",
                     self.namespace, tuning.ef, recall, tuning.queries, items)  # fmt: skip
        except Exception as e:  # the depth known before stays, or the one measured when only keeping it failed
            if not self._closed:
                self.error = f"{type(e).__name__}: {e}"
                log.warning("memory index (pgvector) of namespace %r: tuning failed (%s); ef_search is %d",
                            self.namespace, self.error, self.tuning.ef)  # fmt: skip
        finally:
            self._worker = None

    def status(self) -> dict[str, Any]:
        """The depth searched and what it was measured to find (``MemoryStore.index_details``)."""
        t = self.tuning
        return {"ef_search": t.ef, "measured_recall_at_10": t.recall, "tuned_at": t.at, "tune_queries": t.queries,
                "working": self._worker is not None, "error": self.error}  # fmt: skip

    def _search_settings(self, conn: Connection) -> str:
        """``SEARCH_SETTINGS``, without the iterative scan where pgvector is older than 0.8 (asked once)."""
        if self._settings is None:
            version = conn.exec_driver_sql("SELECT extversion FROM pg_extension WHERE extname = 'vector'").scalar()
            parts = tuple(int(p) for p in str(version or "0").split(".")[:2] if p.isdigit())
            self._settings = SEARCH_SETTINGS if parts >= ITERATIVE_SCAN_SINCE else OLD_SEARCH_SETTINGS
            if self._settings is OLD_SEARCH_SETTINGS:
                log.warning(
                    "pgvector %s has no iterative index scans (0.8 has): a namespace crowded out by another "
                    "may get fewer than k1 candidates from phase A; upgrade the extension",
                    version,
                )
        return self._settings

    def __repr__(self) -> str:
        return f"PgVectorIndex(namespace={self.namespace!r}, dim={self.dim})"


def exact_nearest(
    rows_of: Callable[[np.ndarray], np.ndarray], codes: np.ndarray, queries: np.ndarray, k: int
) -> np.ndarray:
    """The ``k`` keys among ``codes`` nearest each query (their codes, in no order): ``rows_of`` reads key vectors,
    ``EXACT_CHUNK`` at a time.

    Example:
        >>> keys = np.eye(4, dtype=np.float32)
        >>> sorted(exact_nearest(keys.__getitem__, np.arange(4), keys[[2]] + keys[[3]] * 0.5, 2)[0].tolist())
        [2, 3]
    """
    m = len(queries)
    best_sims, best = np.full((m, 0), -np.inf, np.float32), np.zeros((m, 0), np.int64)
    for lo in range(0, len(codes), EXACT_CHUNK):
        part = codes[lo : lo + EXACT_CHUNK]
        sims = np.concatenate([best_sims, queries @ rows_of(part).T], axis=1)
        ids = np.concatenate([best, np.broadcast_to(part, (m, len(part)))], axis=1)
        keep = np.argpartition(-sims, min(k, sims.shape[1]) - 1, axis=1)[:, :k]
        best_sims, best = np.take_along_axis(sims, keep, axis=1), np.take_along_axis(ids, keep, axis=1)
    return best
