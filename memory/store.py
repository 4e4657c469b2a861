"""``MemoryStore``: Q-valued episodic memory (MemRL), durable in SQL and fast in memory.

SQL is the source of truth; each process mirrors what it uses in NumPy (Q-values, embeddings) next
to a vector index, so a recall costs one index search plus microseconds of scoring. A reward is one
``UPDATE … SET q = q + α·(r − q)`` per batch, computed by the database, so several processes sharing a
store never lose an update; a feedback id makes it idempotent.

Example:
    >>> from connectors import HashEmbedder
    >>> with MemoryStore("sqlite://", embedder=HashEmbedder()) as store:
    ...     _ = store.add("sort a list of numbers", "use sorted(xs)")
    ...     recall = store.retrieve("sort numbers")
    ...     store.reinforce(recall, 1.0)
    ...     round(store.get(recall.items[0].id).q, 2)
    1
    0.3
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from sqlalchemy import Connection, Engine

from connectors.chat import ChatModel
from connectors.db import default_url
from connectors.embedders import Embedder
from connectors.errors import ConfigError, StoreError
from connectors.redact import redact_url
from memory import portable, report
from memory.batch import (
    NewItems,
    check_id,
    check_namespace,
    check_reward,
    check_rows,
    check_text,
    check_texts,
    insert_items,
    new_id,
    remove_items,
)
from memory.config import MemoryConfig, RetrievalConfig
from memory.database import Database, mirror_set, resolve_index
from memory.learning import apply_updates, check_entries, plan_updates
from memory.mirror import NamespaceMirror
from memory.records import ItemCache, MemoryItem, Recall, ScoredItem
from memory.retrieval import Plan, plan_recall, search_width, to_recall
from memory.schema import create_schema
from memory.writer import WriteEntry, check_write_entries, compose_experience, entry_meta

__all__ = ["MemoryItem", "MemoryStore", "Recall", "ScoredItem", "WriteEntry"]

log = logging.getLogger(__name__)
T = TypeVar("T")
SELECT_ATTEMPTS = 3  # catch-ups before a recall whose memories keep disappearing gives up
BULK_CHUNK = 10_000  # rows of a bulk load's first transaction; later ones are sized to take BULK_SECONDS
BULK_SECONDS = 0.8  # how long one chunk of a bulk load may hold the write lock
BULK_PAUSE = 0.05  # seconds the write lock stays free between two chunks on SQLite (waiters poll every few ms)


class MemoryStore:
    """Episodic memory whose items carry a learned utility Q (DESIGN §4).

    Args:
        url: SQLAlchemy URL; default ``sqlite:///<EVOLVE_HOME>/evolve.db``; ``"sqlite://"`` is in memory.
        embedder: turns intents and queries into unit vectors; a store keeps the embedder it was
            built with (opening it with another one is refused).
        config: retrieval defaults, the learning rule, grouping, index kind and capacity.
        index_path: the folder for saved vector indexes; default ``<db file>.faiss`` beside a SQLite
            file, none for in-memory or server databases (the index is rebuilt from SQL on open; on
            PostgreSQL the default ``index="pgvector"`` builds none).
        seed: seeds the ε-exploration draws, for reproducible runs.

    Example:
        >>> from connectors import HashEmbedder
        >>> store = MemoryStore("sqlite://", embedder=HashEmbedder())
        >>> store.add("book a flight", "search by date first").visits
        0
        >>> store.close()
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        embedder: Embedder,
        config: MemoryConfig | None = None,
        index_path: str | Path | None = None,
        seed: int | None = None,
    ) -> None:
        if not callable(getattr(embedder, "embed", None)) or not isinstance(getattr(embedder, "dim", None), int):
            raise ConfigError(f"MemoryStore needs an embedder with .embed(texts) and an int .dim, got {embedder!r}")
        self.config = config if config is not None else MemoryConfig()
        if not isinstance(self.config, MemoryConfig):
            raise ConfigError(f"MemoryStore config must be a MemoryConfig, got {type(self.config).__name__}")
        self.url, self.embedder, self.dim = url or default_url(), embedder, int(embedder.dim)
        self._db = Database(self.url, durability=self.config.durability)
        try:
            self.config = replace(self.config, index=resolve_index(self.config.index, self._db))
            create_schema(self._db.engine, dim=self.dim, vector_index=self.config.index == "pgvector")
            with self._db.transaction() as conn:
                portable.check_embedder(conn, getattr(embedder, "name", type(embedder).__name__), self.dim, self.url)
            self._db.keep_connection()  # every use is under the store's lock
        except BaseException:
            self._db.close()
            raise
        self._lock = threading.RLock()
        self._rng = np.random.default_rng(seed)
        self._mirrors = mirror_set(self._db, dim=self.dim, kind=self.config.index, index_path=index_path)
        self._texts = ItemCache(self.config.item_cache)
        self._closed = False

    # -- writing -------------------------------------------------------------------------------
    def add(
        self,
        intent: str,
        experience: str,
        *,
        namespace: str = "default",
        success: bool | None = None,
        q: float | None = None,
        meta: Mapping[str, Any] | None = None,
        id: str | None = None,
    ) -> MemoryItem:
        """Store one experience for ``intent``; it starts at ``q`` (default ``config.q_init``).

        With an ``id`` the call is idempotent: when that id is already stored in ``namespace``, the
        stored item is returned and nothing is written (a resumed run re-writing an attempt adds no
        duplicate). Ids are unique across the store: an id taken in another namespace is a ``StoreError``.
        """
        check_text("intent", intent)
        check_text("experience", experience)
        namespace = check_namespace(namespace)
        if id is not None:
            check_id("id", id)
            existing = self._find(id, None)
            if existing is not None:
                return self._same_namespace(existing, namespace)
        vecs, ids = self._embed([intent]), None if id is None else [id]
        batch = NewItems.build([intent], [experience], vecs, q=self._q0(q), success=[success], meta=meta, ids=ids)
        stored = self._insert({namespace: batch}, skip_existing=id is not None)
        return stored[batch.ids[0]]

    def add_many(
        self,
        rows: Sequence[tuple[str, str]],
        *,
        namespace: str = "default",
        embeddings: np.ndarray | None = None,
        meta: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        group: bool = True,
    ) -> list[str]:
        """Store many ``(intent, experience)`` rows; returns their ids.

        ``embeddings`` (n, dim) may be given to skip the embedder (rows are L2-normalised). ``meta`` is
        one mapping for all rows or one per row. ``group=False`` skips intent grouping: every row
        becomes its own intent key (a bulk load of distinct tasks avoids the O(n²) comparison).

        Every row is checked before anything is written. Up to ``BULK_CHUNK`` rows are one
        transaction; a larger load commits in chunks of about ``BULK_SECONDS`` each, so other processes
        sharing the database wait at most about a second for a turn instead of the whole load (a load
        stopped half way keeps its committed chunks).
        """
        rows = check_rows(rows)
        namespace = check_namespace(namespace)
        if not rows:
            return []
        intents_ = [r[0] for r in rows]
        given = embeddings is not None
        vecs = portable.check_embeddings(embeddings, len(rows), self.dim) if given else self._embed(intents_)
        batch = NewItems.build(
            intents_, [r[1] for r in rows], vecs, q=self._q0(None), success=[None] * len(rows), meta=meta
        )
        lo, size = 0, BULK_CHUNK
        while lo < len(batch):
            if lo:
                self._yield_to_writers()
            start = time.perf_counter()
            self._insert({namespace: batch.take(slice(lo, lo + size))}, group=group)
            lo, size = lo + size, chunk_size(size, time.perf_counter() - start)
        return batch.ids

    def write(
        self,
        intent: str,
        *,
        trajectory: str,
        feedback: str,
        success: bool,
        namespace: str = "default",
        llm: ChatModel | None = None,
        provenance: Mapping[str, Any] | None = None,
        id: str | None = None,
    ) -> MemoryItem:
        """Turn one attempt into one memory (``memory.writer``): cheap text, or an LLM-written lesson.

        Pass a deterministic ``id`` (e.g. episode id + namespace) to make writing idempotent.
        """
        entry = WriteEntry(
            intent, trajectory=trajectory, feedback=feedback, success=success, namespace=namespace,
            provenance=provenance, id=id,
        )  # fmt: skip
        return self.write_many([entry], llm=llm)[0]

    def write_many(self, entries: Sequence[WriteEntry], *, llm: ChatModel | None = None) -> list[MemoryItem]:
        """``write`` for many attempts: one embedding call, one transaction, one index update per namespace.

        Returns one memory per entry, in order. An entry whose ``id`` is already stored in its namespace
        gets the stored memory back (and costs no model call); entries repeating an id within the batch
        are written once and all get that memory. Every entry is checked before anything is written,
        and an id taken in another namespace is a ``StoreError``.
        """
        entries = check_write_entries(entries)
        ids = [e.id if e.id is not None else new_id() for e in entries]
        first: dict[str, int] = {}
        for i, item_id in enumerate(ids):
            first.setdefault(item_id, i)
            if entries[first[item_id]].namespace != entries[i].namespace:
                raise ConfigError(
                    f"write_many: entries[{first[item_id]}] and entries[{i}] share the id {item_id!r} "
                    "but not the namespace; ids are unique across the store"
                )
        given = [e.id for e in entries if e.id is not None]
        known = {item.id: item for item in self._find_many(given, None)} if given else {}
        for e in entries:
            if e.id in known:
                self._same_namespace(known[e.id], e.namespace)
        todo = [i for i, item_id in enumerate(ids) if first[item_id] == i and item_id not in known]
        if todo:
            written = [
                compose_experience(
                    entries[i].intent, trajectory=entries[i].trajectory, feedback=entries[i].feedback,
                    success=bool(entries[i].success), llm=llm,
                )
                for i in todo
            ]  # fmt: skip
            vecs = self._embed([entries[i].intent for i in todo])
            by_ns: dict[str, list[int]] = {}
            for j, i in enumerate(todo):
                by_ns.setdefault(entries[i].namespace, []).append(j)
            batches = {
                ns: NewItems.build(
                    [entries[todo[j]].intent for j in js], [written[j].experience for j in js], vecs[js],
                    q=self.config.q_init, success=[bool(entries[todo[j]].success) for j in js],
                    meta=[entry_meta(written[j], entries[todo[j]]) for j in js], ids=[ids[todo[j]] for j in js],
                )
                for ns, js in by_ns.items()
            }  # fmt: skip
            known.update(self._insert(batches, skip_existing=bool(given)))
        return [known[item_id] for item_id in ids]

    def _insert(
        self, batches: Mapping[str, NewItems], *, group: bool = True, skip_existing: bool = False
    ) -> dict[str, MemoryItem]:
        """Insert per-namespace batches in one transaction; the stored memories by id.

        With ``skip_existing`` the ids are checked again inside the write transaction: a row another
        process stored since the caller looked is returned as stored, not written twice (and one it
        stored in another namespace fails the whole transaction).
        """
        out: dict[str, MemoryItem] = {}
        with self._lock:
            self._ensure_open()
            with self._db.transaction() as conn:
                self._mirrors.sync(conn, lock=True)
                done = []
                for ns, batch in batches.items():
                    if skip_existing:
                        found = [self._same_namespace(item, ns) for item in report.fetch_items(conn, batch.ids)]
                        out.update((item.id, item) for item in found)
                        if found:
                            batch = batch.take(np.array([i not in out for i in batch.ids], dtype=bool))
                    if len(batch):
                        mirror = self._mirrors.get(conn, check_namespace(ns))
                        cfg = self.config
                        done.append((mirror, insert_items(
                            conn, mirror, batch, threshold=cfg.group_threshold, group=group, capacity=cfg.capacity
                        )))  # fmt: skip
            for _, d in done:
                out.update((item.id, item) for item in d.items)
            if not self._mirrors.apply_inserts(done):
                self._resync()
            return out

    def remove(self, memory_ids: Sequence[str], *, namespace: str = "default") -> int:
        """Delete memories of ``namespace`` by id (ids unknown there are skipped); returns how many
        were removed.

        Other processes drop them when they next catch up, as they do for evicted memories; the
        recall log keeps its rows, so ``explain`` still shows what was recalled.
        """
        ids = check_texts(memory_ids, "memory_ids", single="wrap it in a list")
        namespace = check_namespace(namespace)
        if not ids:
            return 0
        with self._lock:
            self._ensure_open()
            with self._db.transaction() as conn:
                self._mirrors.sync(conn, lock=True)
                generation, removed = remove_items(conn, ids, namespace)
            if generation is not None and not self._mirrors.apply_removal(generation, removed):
                self._resync()
            return sum(len(seqs) for seqs in removed.values())

    # -- recalling -----------------------------------------------------------------------------
    def retrieve(
        self, query: str, *, namespace: str = "default", config: RetrievalConfig | None = None, record: bool = True
    ) -> Recall:
        """The memories to use for ``query``: phase A by similarity, phase B by similarity and Q.

        With ``record=True`` the recall and every candidate's numbers are logged, so ``reinforce`` can
        take its id and ``explain`` can show why each memory was (not) chosen.
        """
        check_text("query", query)
        return self.retrieve_many([query], namespace=namespace, config=config, record=record)[0]

    def retrieve_many(
        self,
        queries: Sequence[str],
        *,
        namespace: str = "default",
        config: RetrievalConfig | None = None,
        record: bool = True,
    ) -> list[Recall]:
        """``retrieve`` for many queries: one embedding call, one index search, one log transaction."""
        cfg = config if config is not None else self.config.retrieval
        if not isinstance(cfg, RetrievalConfig):
            raise ConfigError(f"retrieve: config must be a RetrievalConfig, got {type(cfg).__name__}")
        queries = check_texts(queries, "queries", single="use retrieve")
        namespace = check_namespace(namespace)
        if not queries:
            return []
        vecs = self._embed(queries)
        with self._lock:
            self._ensure_open()
            mirror = self._mirrors.loaded(namespace) or self._load(namespace)
            # Optimistic: search the mirror as this process last saw it, then check in the one
            # transaction that logs the recall (a read transaction when nothing is logged); only when
            # another process wrote in between is the search repeated on the caught-up mirror.
            plans = self._plan(mirror, vecs, cfg)
            with self._db.transaction(write=record) as conn:
                mirror, plans, found = self._select(conn, namespace, mirror, plans, vecs, cfg)
                out = [
                    to_recall(new_id(), namespace, q, p, mirror.ids, found) for q, p in zip(queries, plans, strict=True)
                ]
                if record:
                    report.log_recalls(conn, out, plans, mirror.ids, cfg, self._mirrors.generation)
            return out

    def _select(
        self, conn: Connection, namespace: str, mirror: NamespaceMirror, plans: list[Plan], vecs: np.ndarray,
        cfg: RetrievalConfig,
    ) -> tuple[NamespaceMirror, list[Plan], dict[str, MemoryItem]]:  # fmt: skip
        """Catch the mirror up, re-plan when another process wrote, and read every selected memory.

        A recall returns exactly what it selected: when a selected memory is gone from SQL (removed
        by another process after the catch-up, possible under READ COMMITTED), the mirror catches up
        again and the queries are planned again.
        """
        for attempt in range(SELECT_ATTEMPTS):
            seen = self._mirrors.generation
            self._mirrors.sync(conn)
            if attempt or self._mirrors.generation != seen:
                mirror = self._mirrors.get(conn, namespace)
                plans = self._plan(mirror, vecs, cfg)
            found = report.selected_items(conn, mirror, plans, self._texts)
            if all(str(mirror.ids[row]) in found for p in plans for row in p.selected_rows):
                return mirror, plans, found
        raise StoreError(
            f"recall in namespace {namespace!r}: selected memories kept being removed by other processes "
            f"({SELECT_ATTEMPTS} attempts); try again"
        )

    def _load(self, namespace: str) -> NamespaceMirror:
        with self._db.transaction(write=False) as conn:
            self._mirrors.sync(conn)
            return self._mirrors.get(conn, namespace)

    def _plan(self, mirror: NamespaceMirror, vecs: np.ndarray, cfg: RetrievalConfig) -> list[Plan]:
        """Phase A and B for each query vector, in memory (one index search for the batch)."""
        width = search_width(cfg.k1, len(mirror))
        if width:
            sims, ids = mirror.index.search(vecs, width)
        else:
            sims, ids = np.zeros((len(vecs), 0), dtype=np.float32), np.zeros((len(vecs), 0), dtype=np.int64)
        return [plan_recall(mirror, vecs[i], ids[i], sims[i], cfg, self._rng) for i in range(len(vecs))]

    # -- learning ------------------------------------------------------------------------------
    def reinforce(
        self, recall: Recall | str, reward: float, *, feedback_id: str | None = None, namespace: str | None = None
    ) -> int:
        """Apply a reward to the memories of one recall: ``Q ← Q + α·w·(r − Q)``, ``visits += 1``.

        ``recall`` is the ``Recall`` that ``retrieve`` returned (it carries its namespace, and is
        checked against the recall log) or its id, which is looked up among the recalls of
        ``namespace`` (default ``"default"``). A recall only ever reinforces memories of the namespace
        it was made in.

        Returns how many items were updated: 0 when ``feedback_id`` was applied before (nothing
        changes). Raises ``ConfigError`` for a non-finite or out-of-range reward and ``StoreError``
        for a recall unknown in the namespace, in both cases before anything is written.
        """
        return self.reinforce_many([(recall, reward, feedback_id)], namespace=namespace)

    def reinforce_many(self, items: Sequence[Sequence[Any]], *, namespace: str | None = None) -> int:
        """Many ``reinforce`` calls in one transaction and one UPDATE statement; returns items updated.

        Each entry is ``(recall, reward, feedback_id, namespace)``; the feedback id may be None or left
        out, and so may the namespace: a recall id is looked up in the entry's namespace, else in
        ``namespace``, else in ``"default"``; a ``Recall`` object in its own.
        """
        entries = check_entries(items)
        namespace = None if namespace is None else check_namespace(namespace)
        if not entries:
            return 0
        with self._lock:
            self._ensure_open()
            with self._db.transaction() as conn:
                self._mirrors.sync(conn, lock=True)
                plan = plan_updates(
                    conn, entries, alpha=self.config.alpha, credit=self.config.credit, namespace=namespace
                )
                generation, after, updated = apply_updates(conn, plan)
            if generation is not None:
                if self._mirrors.advance(generation):
                    self._mirrors.apply_values(after)
                else:
                    self._resync()
            return updated

    # -- reading -------------------------------------------------------------------------------
    def get(self, memory_id: str, *, namespace: str = "default") -> MemoryItem:
        """One memory of ``namespace`` by id (``StoreError`` when that namespace holds no such id)."""
        check_id("memory_id", memory_id)
        found = self._find(memory_id, check_namespace(namespace))
        if found is None:
            raise StoreError(f"unknown memory id {memory_id!r} in namespace {namespace!r}")
        return found

    def _find(self, memory_id: str, namespace: str | None) -> MemoryItem | None:
        found = self._find_many([memory_id], namespace)
        return found[0] if found else None

    def _find_many(self, memory_ids: list[str], namespace: str | None) -> list[MemoryItem]:
        """Memories by id, of one namespace (or of any: only to refuse ids taken elsewhere)."""
        return self._read(lambda conn: report.fetch_items(conn, memory_ids, namespace))

    @staticmethod
    def _same_namespace(item: MemoryItem, namespace: str) -> MemoryItem:
        """``item`` when it belongs to ``namespace``; a ``StoreError`` when its id is taken elsewhere."""
        if item.namespace != namespace:
            raise StoreError(
                f"memory id {item.id!r} is taken by a memory outside namespace {namespace!r} "
                "(ids are unique across the store); choose another id"
            )
        return item

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine behind the store; other tables (runs, prompts) may share its database."""
        return self._db.engine

    def items(self, namespace: str | None = None) -> list[MemoryItem]:
        """Every memory (of one namespace, or all), oldest first."""
        namespace = None if namespace is None else check_namespace(namespace)
        return self._read(lambda conn: report.all_items(conn, namespace))

    def explain(self, recall_id: str, *, namespace: str = "default") -> dict[str, Any]:
        """The logged recall of ``namespace``: query, config, every candidate's sim, Q, z-scores, score,
        whether it was selected or filtered by δ, and the feedback applied to it since."""
        check_id("recall_id", recall_id)
        namespace = check_namespace(namespace)
        return self._read(lambda conn: report.explain(conn, recall_id, namespace))

    def stats(self, namespace: str | None = None) -> dict[str, Any]:
        """Counts and the Q distribution: count, q mean/std/min/max/histogram, visits, intents."""
        namespace = None if namespace is None else check_namespace(namespace)
        return self._read(lambda conn: report.stats(conn, namespace))

    def export(self, path: str | Path, *, namespace: str | None = None) -> int:
        """Write memories as JSONL (ids, Q, visits, timestamps, meta, embeddings kept); returns the count.

        Atomic: a complete file replaces ``path``, or ``path`` is left as it was and no temporary file
        remains. A folder at ``path`` or a file in the way of its folder is a ``ConfigError``; a failed
        write (disk full) a ``StoreError``.
        """
        target = portable.as_path(path, "export")
        return self._read(lambda conn: portable.export_jsonl(conn, target, namespace, self.embedder, self.dim))

    def import_(self, path: str | Path) -> int:
        """Read an ``export`` file; memories already stored in their namespace are skipped. Returns how
        many were added.

        Every record is checked before anything is written: a bad field, an id twice in the file or an
        id this store holds in another namespace is a ``ConfigError`` naming the line and field, and
        nothing is imported. The records are then written in runs of ``portable.IMPORT_BATCH`` (a file
        over ``portable.KEEP_BYTES`` is read a second time rather than held), so memory stays bounded;
        an import stopped half way (a killed process) is completed by running it again.

        With the exporting store's embedder the stored vectors are reused bit for bit and not regrouped
        (each memory keeps exactly the vector it had; retrieval ranks memories, so it is unchanged);
        with another embedder the intents are embedded again and grouped like new writes.
        """
        checked = portable.check_file(portable.as_path(path, "import"))
        skip = self._read(partial(portable.already_stored, checked=checked))
        reuse = portable.same_embedder(checked.header, self.embedder, self.dim)
        added = 0
        for namespace, records in portable.records(checked, skip):
            if added // BULK_CHUNK != (added + len(records)) // BULK_CHUNK:
                self._yield_to_writers()  # a turn for other writers about every BULK_CHUNK rows
            batch, reused = portable.to_batch(records, self.embedder, self.dim, reuse=reuse)
            self._insert({namespace: batch}, group=not reused, skip_existing=True)
            added += len(batch)
        return added

    # -- lifecycle -----------------------------------------------------------------------------
    def index_status(self, namespace: str = "default") -> str:
        """How the namespace's vector index was obtained: ``loaded`` (saved file, current), ``caught_up``
        (saved file, updated from SQL), ``rebuilt`` (file unusable), ``built`` (no file) or ``database``
        (the database serves it: ``index="pgvector"``)."""
        with self._lock:
            self._ensure_open()
            with self._db.transaction(write=False) as conn:
                self._mirrors.sync(conn)
                self._mirrors.get(conn, check_namespace(namespace))
            return self._mirrors.index_state[namespace]

    def save_index(self) -> int:
        """Save changed vector indexes beside the database now (``close`` does it too)."""
        with self._lock:
            self._ensure_open()
            return self._mirrors.save()

    def close(self) -> None:
        """Save changed indexes and release the database. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._mirrors.save()
            except Exception as e:  # the index is derived data: losing it costs a rebuild, not memories
                log.warning("memory store: could not save the vector index (%s); it will be rebuilt on open", e)
            finally:
                self._db.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        name = getattr(self.embedder, "name", "?")
        return f"MemoryStore({redact_url(self.url)!r}, embedder={name!r}, index={self.config.index!r})"

    # -- helpers -------------------------------------------------------------------------------
    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreError(f"this MemoryStore ({redact_url(self.url)}) is closed")

    def _read(self, query: Callable[[Connection], T]) -> T:
        """``query`` in one read transaction (no write lock), under the lock, on an open store."""
        with self._lock:
            self._ensure_open()
            with self._db.transaction(write=False) as conn:
                return query(conn)

    def _yield_to_writers(self) -> None:
        """Between two chunks of a bulk load on SQLite, leave the write lock free long enough for the
        other processes waiting for it (``connectors.db.begin_immediate`` polls every few milliseconds)
        to take their turns; PostgreSQL queues lock waiters in order, so it needs no pause."""
        if self._db.engine.dialect.name == "sqlite":
            time.sleep(BULK_PAUSE)

    def _resync(self) -> None:
        with self._db.transaction(write=False) as conn:
            self._mirrors.sync(conn)

    def _q0(self, q: float | None) -> float:
        return self.config.q_init if q is None else check_reward(q, "add", what="q")

    def _embed(self, texts: list[str]) -> np.ndarray:
        vecs = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        return portable.check_embeddings(vecs, len(texts), self.dim, source=f"embedder {self.embedder!r}")


def chunk_size(rows: int, seconds: float) -> int:
    """Rows for the next chunk of a bulk load: as many as take ``BULK_SECONDS`` at the rate the last
    chunk of ``rows`` rows ran at, within [1,000, 200,000]."""
    return int(min(200_000, max(1_000, rows * BULK_SECONDS / max(seconds, 1e-3))))
