"""The memory store's tables (SQLAlchemy Core) and the few statements every writer shares.

SQL is the source of truth. Every write transaction bumps ``memory_state.generation`` and stamps the
rows it touched with it (``updated_gen``), so a process can tell from one tiny SELECT whether another
process wrote, and read back exactly what changed. Table names carry a ``memory_`` prefix because
the prompt store and the jobs share the same database file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Connection,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    and_,
    bindparam,
    func,
    insert,
    inspect,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeEngine

from connectors.db import for_reads, opened_read_only, storage_error, storage_fault
from connectors.errors import StoreError
from connectors.redact import redact, redact_url
from memory.storage.statements import returning

log = logging.getLogger(__name__)
metadata = MetaData()


class Embedding(TypeDecorator[bytes]):
    """An intent key's vector as little-endian float32 bytes: a BLOB on SQLite, a pgvector ``vector``
    on PostgreSQL (``memory.mirror.pgvector``, where the column also gets its dimension and an HNSW index)."""

    impl = LargeBinary
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            from memory.mirror.pgvector import VectorBytes

            return dialect.type_descriptor(VectorBytes())
        return dialect.type_descriptor(LargeBinary())


memory_items = Table(
    "memory_items",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("seq", BigInteger, nullable=False, unique=True),  # vector-index id; ascending = older first
    Column("namespace", String(200), nullable=False),
    Column("intent_id", String(64), nullable=False),
    Column("intent", Text, nullable=False),
    Column("experience", Text, nullable=False),
    Column("q", Float, nullable=False),
    Column("visits", Integer, nullable=False, default=0),
    Column("success", Boolean, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("updated_gen", BigInteger, nullable=False),
    Column("meta", JSON, nullable=False),
    # Validity (``memory.upkeep.supersession``): from valid_from (NULL: created_at) until valid_to (NULL: still valid).
    Column("valid_from", Float, nullable=True),
    Column("valid_to", Float, nullable=True),
    Column("superseded_by", String(64), nullable=True),  # the memory that replaced this one
    # What the item is (``memory.upkeep.strategies``): NULL or "episode" (one attempt) or "strategy" (distilled).
    Column("kind", String(16), nullable=True),
    # No embedding: an item's vector is its intent key's, stored once in memory_intents.
    Index("ix_memory_items_namespace_seq", "namespace", "seq"),
    Index("ix_memory_items_updated_gen", "updated_gen"),
    Index("ix_memory_items_namespace_intent", "namespace", "intent_id"),  # an intent key's items (eviction, restore)
)

intents = Table(
    "memory_intents",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("seq", BigInteger, nullable=False, unique=True),
    Column("namespace", String(200), nullable=False, index=True),
    Column("text", Text, nullable=False),
    Column("embedding", Embedding, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("gen", BigInteger, nullable=False, index=True),
)

recalls = Table(
    "memory_recalls",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("namespace", String(200), nullable=False, index=True),
    Column("query", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("config", JSON, nullable=False),
    Column("pool_size", Integer, nullable=False),
    Column("filtered", Integer, nullable=False),
    Column("explored", Boolean, nullable=False),
    Column("generation", BigInteger, nullable=False),
    Column("context", String(200), nullable=True),  # what the recall was for (a task id), when the caller said
    Column("shared", String(200), nullable=True),  # the shared namespace searched too (a served tenant's run)
    # Every candidate, packed (``memory.recall.log``); NULL: logged before, in memory_recall_items.
    Column("candidates", LargeBinary, nullable=True),
    Index("ix_memory_recalls_context", "namespace", "context"),
)

# The older layout of the log (``memory_recalls.candidates`` NULL): every candidate of a recall as a row, the pool
# (ranked or not) and the near items phase A dropped (in_pool false). Read, no longer written. No foreign
# key to memory_items: the log outlives evicted memories.
recall_items = Table(
    "memory_recall_items",
    metadata,
    Column("recall_id", String(64), ForeignKey("memory_recalls.id", ondelete="CASCADE"), primary_key=True),
    Column("item_id", String(64), primary_key=True),
    Column("position", Integer, nullable=False),  # rank by similarity among the k1 nearest
    Column("rank", Integer, nullable=True),  # rank in the selection; NULL when not selected
    Column("in_pool", Boolean, nullable=False),
    Column("sim", Float, nullable=False),
    Column("q", Float, nullable=False),
    Column("z_sim", Float, nullable=True),
    Column("z_q", Float, nullable=True),
    Column("score", Float, nullable=True),
    Column("shared", Boolean, nullable=True),  # true: from the recall's shared namespace (NULL: older logs)
)

# What expired recalls left behind (``memory.recall.expiry``), per namespace: ``kind`` "context" and
# "overlay" hold the Q a memory had earned in a context or a tenant's overlay (``key``: the context, the
# shared namespace) from the rewards folded so far; "recalled" when a memory was last selected; "expired"
# (item "" and key "") the time up to which recalls and their feedback were folded here and removed.
recall_summary = Table(
    "memory_recall_summary",
    metadata,
    Column("namespace", String(200), primary_key=True),
    Column("kind", String(16), primary_key=True),
    Column("key", String(200), primary_key=True),
    Column("item_id", String(64), primary_key=True),
    Column("value", Float, nullable=False),
)

feedback = Table(
    "memory_feedback",
    metadata,
    Column("id", String(128), primary_key=True),  # the idempotency key
    Column("recall_id", String(64), nullable=False, index=True),
    Column("reward", Float, nullable=False),
    Column("applied_at", Float, nullable=False),
    Column("items", Integer, nullable=False),
)

# Provenance (``memory.learn.credit``): child -> parent. relation "context": the parent was recalled for the
# attempt that wrote the child (credit flows back along these); "source": the child, a strategy, was
# distilled from the parent episode.
links = Table(
    "memory_links",
    metadata,
    Column("child_id", String(64), primary_key=True),
    Column("parent_id", String(64), primary_key=True),
    Column("relation", String(16), primary_key=True),
    Column("namespace", String(200), nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_memory_links_parent", "parent_id"),
)

# Every removed memory (evicted, merged, removed by a caller), enough to put it back until the
# retention period passes (``memory.upkeep.forgetting.Removal``, ``memory.upkeep.pruning``).
removals = Table(
    "memory_removals",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("item_id", String(64), nullable=False, index=True),
    Column("namespace", String(200), nullable=False),
    Column("reason", Text, nullable=False),
    Column("removed_at", Float, nullable=False),
    Column("record", JSON, nullable=False),  # the row as it was: every memory_items column but seq
    Column("intent_id", String(64), nullable=False),
    Column("vector", LargeBinary, nullable=True),  # its intent key's vector, float32 bytes, when the key went too
    Column("merged_into", String(64), nullable=True),
    Column("kept_q", Float, nullable=True),  # the kept memory's Q and visits before the merge
    Column("kept_visits", Integer, nullable=True),
    Column("restored_at", Float, nullable=True),
    Index("ix_memory_removals_namespace_at", "namespace", "removed_at"),
)

# Memories of untrusted writers held back under TrustPolicy(mode="quarantine") (``memory.defences.quarantine``): no
# recall finds them until MemoryStore.release moves them into memory_items. A distrusted writer's are
# dropped (``dropped_at``, ``dropped_by``: the distrust's reason), kept so undo_distrust can put them back.
quarantine = Table(
    "memory_quarantine",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("namespace", String(200), nullable=False),
    Column("writer", String(200), nullable=False),
    Column("held_at", Float, nullable=False),
    Column("task", Text, nullable=True),  # WriteEntry.task: the intent group it joins when released
    Column("record", JSON, nullable=False),  # the memory as it would be stored: intent, experience, q, meta...
    Column("vector", LargeBinary, nullable=False),  # its intent's vector, float32 bytes: released without embedding
    Column("dropped_at", Float, nullable=True),
    Column("dropped_by", Text, nullable=True),
    Index("ix_memory_quarantine_writer", "writer", "namespace"),
    Index("ix_memory_quarantine_namespace", "namespace", "held_at"),
)

# MemoryStore.distrust(action="reset"): each reset memory's Q and visits before, so undo_distrust can put them
# back (``memory.defences.distrust``).
resets = Table(
    "memory_resets",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("item_id", String(64), nullable=False, index=True),
    Column("namespace", String(200), nullable=False),
    Column("writer", String(200), nullable=False, index=True),
    Column("q", Float, nullable=False),
    Column("visits", Integer, nullable=False),
    Column("reset_at", Float, nullable=False),
    Column("undone_at", Float, nullable=True),
)

# Evicted items, so that other processes drop them from their mirrors when they catch up.
tombstones = Table(
    "memory_tombstones",
    metadata,
    Column("seq", BigInteger, primary_key=True),
    Column("namespace", String(200), nullable=False),
    Column("gen", BigInteger, nullable=False, index=True),
)

state = Table(
    "memory_state",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("generation", BigInteger, nullable=False),
    Column("next_seq", BigInteger, nullable=False),
    Column("embedder", String(200), nullable=True),
    Column("dim", Integer, nullable=True),
)


@dataclass(frozen=True)
class StoreState:
    """The one state row: where the store's history stands and which embedder built it."""

    generation: int
    next_seq: int
    embedder: str | None
    dim: int | None


def create_schema(engine: Engine, *, dim: int | None = None, vector_index: bool = False) -> None:
    """Create the tables and the state row if they are missing (safe when several processes race).

    On PostgreSQL the pgvector extension is created first, the vector column gets dimension ``dim``
    and, with ``vector_index``, its HNSW index (``memory.mirror.pgvector``). A database that cannot be
    written (read-only media, a read-only server) is used as it is when it holds a memory store: reads
    work and writes raise ``StoreError`` naming read-only. Other storage faults (disk full, locked)
    are a ``StoreError`` naming them.
    """
    for attempt in range(3):
        try:
            _create(engine, dim, vector_index)
            return
        except DBAPIError as e:
            fault = storage_fault(e)
            if fault == "read-only" or (fault is not None and opened_read_only(engine)):
                _check_readable(engine, e)
                return
            error = storage_error(e, engine.url)
            if error is not None:
                raise error from e
            if not isinstance(e, (OperationalError, IntegrityError, ProgrammingError)) or attempt == 2:
                raise StoreError(f"cannot create the memory tables in {redact_url(engine.url)!r}: {e}") from e
            # else another process created them first: look again


def _create(engine: Engine, dim: int | None, vector_index: bool) -> None:
    postgres = engine.dialect.name == "postgresql"
    with engine.begin() as conn:
        if postgres:
            from memory.mirror import pgvector

            pgvector.before_tables(conn)
        metadata.create_all(conn, checkfirst=True)
        if conn.execute(select(state.c.id)).first() is None:
            conn.execute(insert(state).values(id=1, generation=0, next_seq=1))
        upgrade(conn)
        if postgres:
            pgvector.after_tables(conn, dim, hnsw=vector_index)


def _check_readable(engine: Engine, error: DBAPIError) -> None:
    """A database that cannot be written: fine for reads when it already holds a memory store."""
    url = redact_url(engine.url)
    try:
        with for_reads(engine).begin() as conn:
            read_state(conn)
    except (DBAPIError, StoreError) as e:
        raise StoreError(
            f"read-only: the database {url!r} cannot be written and holds no memory store to read "
            f"({redact(getattr(e, 'orig', e))}). Open it writable once to create the tables, or check the path"
        ) from error
    with for_reads(engine).connect() as conn:
        missing = {c.name for c in memory_items.c} - {c["name"] for c in inspect(conn).get_columns("memory_items")}
    if missing:
        raise StoreError(
            f"read-only: the memory store in {url!r} was written by an older version (memory_items lacks "
            f"{sorted(missing)}) and a read-only database cannot be upgraded. Open it writable once (the "
            "upgrade adds empty columns), or use a copy"
        ) from error
    log.info("memory database %s cannot be written: opened for reading (%s)", url, redact(error.orig))


VALIDITY_COLUMNS = {
    "valid_from": "ALTER TABLE memory_items ADD COLUMN valid_from FLOAT",
    "valid_to": "ALTER TABLE memory_items ADD COLUMN valid_to FLOAT",
    "superseded_by": "ALTER TABLE memory_items ADD COLUMN superseded_by VARCHAR(64)",
    "kind": "ALTER TABLE memory_items ADD COLUMN kind VARCHAR(16)",
}
"""The lifecycle columns (facts that change, kinds), added to a database made before them (written out:
no SQL from values). New tables (links, removals) are created by ``create_all``."""


ADD_CANDIDATES = "ALTER TABLE memory_recalls ADD COLUMN candidates BLOB"
ADD_CANDIDATES_POSTGRES = "ALTER TABLE memory_recalls ADD COLUMN candidates BYTEA"


def upgrade(conn: Connection) -> None:
    """Bring a store written by an older version to the current layout (inside the caller's transaction).

        Earlier stores kept a copy of the intent key's vector in every ``memory_items`` row; it is
        dropped (the vector stays in ``memory_intents``), which halves the bytes per item. Stores older
        than recall contexts get the (empty) ``memory_recalls.context`` column and its index; stores older
    than shared recalls get ``memory_recalls.shared`` and ``memory_recall_items.shared`` (empty: own items);
        stores older than the packed log get ``memory_recalls.candidates`` (empty: candidates stay where they were
        logged, in ``memory_recall_items``; nothing is rewritten);
        stores older than supersession get ``memory_items.valid_from``, ``valid_to`` and ``superseded_by``
        (empty: every memory valid since it was written; nothing is rewritten), and ``kind`` (empty: episodes);
        every store gets the index of an intent key's items (built once, on the first open after the upgrade).
    """
    if "embedding" in {c["name"] for c in inspect(conn).get_columns("memory_items")}:
        log.info("memory store: dropping memory_items.embedding (vectors live in memory_intents)")
        conn.execute(text("ALTER TABLE memory_items DROP COLUMN embedding"))
    if "context" not in {c["name"] for c in inspect(conn).get_columns("memory_recalls")}:
        log.info("memory store: adding memory_recalls.context (recalls made for a task)")
        conn.execute(text("ALTER TABLE memory_recalls ADD COLUMN context VARCHAR(200)"))
        next(i for i in recalls.indexes if i.name == "ix_memory_recalls_context").create(conn, checkfirst=True)
    if "shared" not in {c["name"] for c in inspect(conn).get_columns("memory_recalls")}:
        log.info("memory store: adding memory_recalls.shared and memory_recall_items.shared (shared recalls)")
        conn.execute(text("ALTER TABLE memory_recalls ADD COLUMN shared VARCHAR(200)"))
        conn.execute(text("ALTER TABLE memory_recall_items ADD COLUMN shared BOOLEAN"))
    if "candidates" not in {c["name"] for c in inspect(conn).get_columns("memory_recalls")}:
        log.info("memory store: adding memory_recalls.candidates (a recall's candidates packed in its row)")
        postgres = conn.dialect.name == "postgresql"
        conn.execute(text(ADD_CANDIDATES_POSTGRES if postgres else ADD_CANDIDATES))
    next(i for i in memory_items.indexes if i.name == "ix_memory_items_namespace_intent").create(conn, checkfirst=True)
    have = {c["name"] for c in inspect(conn).get_columns("memory_items")}
    for name, statement in VALIDITY_COLUMNS.items():
        if name not in have:
            log.info("memory store: adding memory_items.%s (memory lifecycle)", name)
            conn.execute(text(statement))


def valid_at(when: float) -> ColumnElement[bool]:
    """The memories valid at Unix time ``when``: ``valid_from <= when < valid_to`` (``valid_from`` NULL:
    since ``created_at``; ``valid_to`` NULL: still valid)."""
    c = memory_items.c
    return and_(func.coalesce(c.valid_from, c.created_at) <= when, or_(c.valid_to.is_(None), c.valid_to > when))


def read_state(conn: Connection) -> StoreState:
    row = conn.execute(select(state)).mappings().first()
    if row is None:
        raise StoreError("the memory_state row is missing; the database was not created by MemoryStore")
    return StoreState(row["generation"], row["next_seq"], row["embedder"], row["dim"])


_BUMP = (
    update(state)
    .where(state.c.id == 1)
    .values(generation=state.c.generation + 1, next_seq=state.c.next_seq + bindparam("seqs", type_=Integer))
    .returning(state.c.generation, state.c.next_seq)
)  # built once: every write runs it, and building it cost more than running it


def bump(conn: Connection, *, seqs: int = 0) -> tuple[int, int]:
    """Advance the generation (and reserve ``seqs`` sequence numbers) inside the caller's transaction.

    Returns the new generation and the first reserved sequence number.
    """
    row = next(iter(returning(conn, _BUMP, [{"seqs": seqs}])), None)
    if row is None:
        raise StoreError("the memory_state row is missing; the database was not created by MemoryStore")
    return int(row[0]), int(row[1]) - seqs


def record_embedder(conn: Connection, name: str, dim: int) -> None:
    conn.execute(update(state).where(state.c.id == 1).values(embedder=name, dim=dim))


def to_blob(vec: np.ndarray) -> bytes:
    """One embedding as little-endian float32 bytes."""
    return np.ascontiguousarray(vec, dtype="<f4").tobytes()


def from_blobs(blobs: Iterable[bytes], dim: int) -> np.ndarray:
    """Stack stored embeddings into an (n, dim) float32 matrix, checking every row's size."""
    data = b"".join(blobs)
    if len(data) % (4 * dim):
        raise StoreError(
            f"stored embeddings do not have dimension {dim} ({len(data)} bytes); was the embedder changed?"
        )
    return np.frombuffer(data, dtype="<f4").astype(np.float32).reshape(-1, dim)
