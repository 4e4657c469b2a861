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

psycopg is imported by SQLAlchemy when a ``postgresql+psycopg://`` engine is made
(``connectors.db`` names the ``pg`` extra when it is missing); this module needs no other package.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Connection, text
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import func
from sqlalchemy.types import LargeBinary, TypeDecorator, UserDefinedType

from connectors.errors import StoreError
from connectors.pglock import advisory_key

log = logging.getLogger(__name__)

HNSW_MAX_DIM = 2000  # pgvector's limit for an HNSW index on ``vector``
EF_SEARCH_MIN = 40  # pgvector's default
EF_SEARCH_MAX = 1000  # pgvector's maximum
SCHEMA_LOCK = advisory_key("memory.storage.schema")
HNSW_INDEX = "ix_memory_intents_embedding_hnsw"
INTENT_ID_INDEX = "ix_memory_items_intent_seq"

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
    ``add`` only counts them (to refresh the planner's statistics after a bulk load), ``remove``
    does nothing and ``save`` writes no file.

    Args:
        connect: opens a transaction on the store's database (``Database.transaction``).
        namespace: the namespace searched.
        dim: the vectors' dimension.

    Example:
        >>> index = PgVectorIndex(store_db.transaction, "default", dim=384)  # doctest: +SKIP
        >>> sims, seqs = index.search(query_vectors, 10)  # doctest: +SKIP
    """

    kind = "pgvector"
    approximate = True

    def __init__(self, connect: Callable[[], AbstractContextManager[Connection]], namespace: str, *, dim: int) -> None:
        self.connect = connect
        self.namespace = namespace
        self.dim = dim
        self._unanalysed = 0
        self._settings: str | None = None

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

    def remove(self, ids: np.ndarray) -> None:
        """Nothing to do: deleted items leave the search with their rows."""

    def save(self, path: Path, generation: int) -> bool:
        return False

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest items (``seq``s) of the namespace per query row, best first (-1 pads)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, self.dim)
        m = queries.shape[0]
        sims = np.full((m, k), -np.inf, dtype=np.float32)
        ids = np.full((m, k), -1, dtype=np.int64)
        if m == 0 or k == 0:
            return sims, ids
        ef = min(EF_SEARCH_MAX, max(EF_SEARCH_MIN, k))
        with self.connect() as conn:
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
