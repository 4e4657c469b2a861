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

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from connectors.chat import ChatModel
from connectors.db import default_url
from connectors.embedders import Embedder
from connectors.errors import ConfigError
from connectors.redact import redact_url
from memory import checks, jsonl, quarantine, reads
from memory.checks import (
    check_id,
    check_namespace,
    check_owner,
    check_reward,
    check_rows,
    check_text,
    check_texts,
    new_id,
)
from memory.config import FailureKeeps, MemoryConfig, RetrievalConfig
from memory.context_q import check_contexts, q_in_context
from memory.database import Database, OpenStore, mirror_set, resolve_index
from memory.inserts import BULK_CHUNK, NewItems, chunk_size, insert_batches, remove_items
from memory.learning import Reinforcement, apply_updates, check_entries, plan_updates
from memory.records import ItemCache, MemoryItem, Recall, ScoredItem
from memory.retrieval import Planner, to_recall
from memory.schema import create_schema
from memory.trust import LOCAL_WRITER
from memory.upkeep import StoreUpkeep
from memory.writer import WriteEntry, check_write_entries, compose_experiences, entry_ids, new_batches

__all__ = ["MemoryItem", "MemoryStore", "Recall", "ScoredItem", "WriteEntry"]

T = TypeVar("T")


class MemoryStore(StoreUpkeep):
    """Episodic memory whose items carry a learned utility Q (docs/design/decisions.md, "Memory and Q");
    its reading methods (``get``, ``items``, ``explain``, ``stats``, ``export``) are ``memory.reading``'s,
    its lifecycle ones (``consolidate``, ``prune``, ``restore``, ``history``) ``memory.upkeep``'s.

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
                checks.check_embedder(conn, getattr(embedder, "name", type(embedder).__name__), self.dim, self.url)
            self._db.keep_connection()  # every use is under the store's lock
        except BaseException:
            self._db.close()
            raise
        self._rng = np.random.default_rng(seed)
        self._mirrors = mirror_set(self._db, dim=self.dim, kind=self.config.index, index_path=index_path)
        self._open = OpenStore(self._db, self._mirrors)
        self._texts = ItemCache(self.config.item_cache)

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
        writer: str = LOCAL_WRITER,
    ) -> MemoryItem:
        """Store one experience for ``intent``; it starts at ``q`` (default ``config.q_init``).

        With an ``id`` the call is idempotent: when that id is already stored in ``namespace``, the
        stored item is returned and nothing is written (a resumed run re-writing an attempt adds no
        duplicate). Ids are unique across the store: an id taken in another namespace is a ``StoreError``.
        ``writer`` (``"<kind>:<name>"``, ``memory.trust``) is stored as ``meta["writer"]``, and ``MemoryConfig.trust``
        decides by it (an untrusted writer's ``q`` may be ignored, its memory held in quarantine).
        """
        check_text("intent", intent)
        check_text("experience", experience)
        namespace, meta = check_namespace(namespace), checks.with_writer(meta, writer)
        if id is not None:
            check_id("id", id)
            existing = self._find_many([id], None)
            if existing:
                return check_owner(existing[0], namespace)
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
        writer: str = LOCAL_WRITER,
    ) -> list[MemoryItem]:
        """Store many ``(intent, experience)`` rows; returns the ``MemoryItem``s stored, in row order (what
        ``add`` returns, for each row).

        ``embeddings`` (n, dim) may be given to skip the embedder (rows are L2-normalised). ``meta`` is
        one mapping for all rows or one per row. ``group=False`` skips intent grouping: every row
        becomes its own intent key (a bulk load of distinct tasks avoids the O(n²) comparison). ``writer``: as ``add``'s.

        Every row is checked before anything is written. Up to ``BULK_CHUNK`` rows are one
        transaction; a larger load commits in chunks of about ``BULK_SECONDS`` each, so other processes
        sharing the database wait at most about a second for a turn instead of the whole load (a load
        stopped half way keeps its committed chunks).
        """
        rows = check_rows(rows)
        namespace, meta = check_namespace(namespace), checks.with_writer(meta, writer)
        if not rows:
            return []
        intents_ = [r[0] for r in rows]
        given = embeddings is not None
        vecs = checks.check_embeddings(embeddings, len(rows), self.dim) if given else self._embed(intents_)
        batch = NewItems.build(
            intents_, [r[1] for r in rows], vecs, q=self._q0(None), success=[None] * len(rows), meta=meta
        )
        lo, size = 0, BULK_CHUNK
        stored: dict[str, MemoryItem] = {}
        while lo < len(batch):
            if lo:
                self._open.yield_to_writers()
            start = time.perf_counter()
            stored.update(self._insert({namespace: batch.take(slice(lo, lo + size))}, group=group))
            lo, size = lo + size, chunk_size(size, time.perf_counter() - start)
        return [stored[i] for i in batch.ids]

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
        failure_keeps: FailureKeeps | None = None,
        writer: str = LOCAL_WRITER,
    ) -> MemoryItem:
        """Turn one attempt into one memory (``memory.writer``): cheap text, or an LLM-written lesson. A
        deterministic ``id`` makes writing idempotent; ``failure_keeps`` overrides the config's for it. With
        ``MemoryConfig.supersede`` it supersedes the memories of its group it contradicts (``memory.lifecycle``).
        ``writer``: as ``add``'s (``WriteEntry.writer``)."""
        entry = WriteEntry(
            intent, trajectory=trajectory, feedback=feedback, success=success, namespace=namespace,
            provenance=provenance, id=id, failure_keeps=failure_keeps, writer=writer,
        )  # fmt: skip
        return self.write_many([entry], llm=llm)[0]

    def write_many(self, entries: Sequence[WriteEntry], *, llm: ChatModel | None = None) -> list[MemoryItem]:
        """``write`` for many attempts: one embedding call, one transaction, one index update per namespace.

        Returns one memory per entry, in order. An entry whose ``id`` is already stored in its namespace
        gets the stored memory back (and costs no model call); entries repeating an id within the batch
        are written once and all get that memory. Every entry is checked before anything is written,
        and an id taken in another namespace is a ``StoreError``. With ``MemoryConfig.supersede``, the
        batch supersedes what it contradicts as the same writes one after another would, in the same
        transaction; an id already stored supersedes nothing again.
        """
        entries = check_write_entries(entries)
        ids, firsts = entry_ids(entries)
        given = [e.id for e in entries if e.id is not None]
        known = {item.id: item for item in self._find_many(given, None)} if given else {}
        for e in entries:
            if e.id in known:
                check_owner(known[e.id], e.namespace)
        todo = [entries[i] for i in firsts if ids[i] not in known]
        if todo:
            written = compose_experiences(todo, llm, keeps=self.config.failure_keeps)
            vecs = self._embed([e.intent for e in todo])
            todo_ids = [ids[i] for i in firsts if ids[i] not in known]
            batches = new_batches(
                todo, todo_ids, written, vecs, q_init=self.config.q_init, supersede=self.config.supersede
            )
            known.update(self._insert(batches, skip_existing=bool(given)))
        return [known[item_id] for item_id in ids]

    def _insert(
        self, batches: Mapping[str, NewItems], *, group: bool = True, skip_existing: bool = False
    ) -> dict[str, MemoryItem]:
        """Insert per-namespace batches in one transaction; the stored memories by id.

        With ``skip_existing`` the ids are checked again inside the write transaction: a row another
        process stored since the caller looked is returned as stored, not written twice (and one it
        stored in another namespace fails the whole transaction). ``MemoryConfig.trust`` is applied first
        (``memory.quarantine.screen``): held memories come back as stored, in no mirror.
        """
        with self._open.locked():
            with self._open.write() as conn:
                batches, out = quarantine.screen(conn, batches, self.config, skip_existing=skip_existing)
                stored, done = insert_batches(
                    conn, self._mirrors, batches, config=self.config, group=group, skip_existing=skip_existing
                )
            out.update(stored)
            for _, d in done:
                out.update((item.id, item) for item in d.items)
            if not self._mirrors.apply_inserts(done):
                self._open.resync()
            return out

    def remove(self, memory_ids: Sequence[str], *, namespace: str = "default") -> int:
        """Delete memories of ``namespace`` by id (ids unknown there are skipped); returns how many were
        removed. Other processes drop them when they catch up; the recall log keeps its rows for ``explain``."""
        ids = check_texts(memory_ids, "memory_ids", single="wrap it in a list")
        namespace = check_namespace(namespace)
        if not ids:
            return 0
        with self._open.locked():
            with self._open.write() as conn:
                generation, removed = remove_items(conn, ids, namespace)
            if generation is not None and not self._mirrors.apply_removal(generation, removed):
                self._open.resync()
            return sum(len(seqs) for seqs in removed.values())

    # -- recalling -----------------------------------------------------------------------------
    def retrieve(
        self,
        query: str,
        *,
        namespace: str = "default",
        config: RetrievalConfig | None = None,
        record: bool = True,
        context: str | None = None,
        shared: str | None = None,
        as_of: float | None = None,
    ) -> Recall:
        """The memories to use for ``query``: phase A by similarity, phase B by similarity and Q.

        With ``record=True`` the recall and every candidate's numbers are logged, so ``reinforce`` can
        take its id and ``explain`` can show why each memory was (not) chosen. ``context`` says what the
        recall is for (a task id): it is logged, and with ``RetrievalConfig.context_q`` it ranks memories
        by the Q they earned in that context. ``shared`` and ``as_of``: see ``retrieve_many``.
        """
        check_text("query", query)
        many = partial(self.retrieve_many, namespace=namespace, config=config, record=record, shared=shared)
        return many([query], contexts=[context], as_of=as_of)[0]

    def retrieve_many(
        self,
        queries: Sequence[str],
        *,
        namespace: str = "default",
        config: RetrievalConfig | None = None,
        record: bool = True,
        contexts: Sequence[str | None] | None = None,
        shared: str | None = None,
        as_of: float | None = None,
    ) -> list[Recall]:
        """``retrieve`` for many queries (``contexts``: each one's ``context`` or None), batched. With ``shared``
        (another namespace) both meet in one two-phase recall, logged in ``namespace``, shared memories ranked
        by ``namespace``'s overlay Q (``memory.context_q``); rewards never move the shared memories themselves.

        A recall finds only valid memories (none superseded, ``memory.lifecycle``). ``as_of`` (Unix time),
        for audits: the memories that were valid then, superseded since or not, ranked with today's Q (Q
        has no history), searched exactly in a copy read from SQL (slower: the whole namespace is read)."""
        cfg = checks.check_retrieval(config if config is not None else self.config.retrieval)
        queries = check_texts(queries, "queries", single="use retrieve")
        namespace, contexts = check_namespace(namespace), check_contexts(contexts, len(queries))
        shared, as_of = checks.check_shared(shared, namespace), checks.check_time(as_of, "as_of")
        if not queries:
            return []
        vecs = self._embed(queries)
        with self._open.locked():
            names, plans, view, texts = (namespace, shared), None, None, self._texts
            own = q_in_context(
                self._db, namespace, contexts, cfg, alpha=self.config.alpha, shared=shared, q_init=self.config.q_init,
                schedule=self.config.alpha_schedule, floor=self.config.alpha_floor,
            )  # fmt: skip
            planner = Planner(vecs, cfg, self._rng, own)
            if as_of is None:  # optimistic: search the mirrors as this process last saw them, check in the
                # transaction that logs the recall (read-only if none); repeated only if another process wrote
                plans = planner(*[self._open.mirror(n) for n in names if n is not None])
            else:  # an audit: exactly the memories valid then, read from SQL, never from the item cache
                view, texts = partial(self._mirrors.snapshot, as_of=as_of), ItemCache(0)
            with self._db.transaction(write=record) as conn:
                plans, found = reads.select_memories(conn, self._mirrors, names, planner, plans, texts, view=view)
                out = [
                    to_recall(new_id(), namespace, q, p, found, c, shared)
                    for q, p, c in zip(queries, plans, contexts, strict=True)
                ]
                if record:
                    reads.log_recalls(conn, out, plans, cfg, self._mirrors.generation, as_of=as_of)
            return out

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
        return self.reinforce_many([Reinforcement(recall, reward, feedback_id)], namespace=namespace)

    def reinforce_many(self, items: Sequence[Reinforcement], *, namespace: str | None = None) -> int:
        """Many ``reinforce`` calls in one transaction and one UPDATE statement; returns items updated.

        Each entry is a ``Reinforcement(recall, reward, feedback_id, namespace)`` (``reinforcements``
        builds them for one answer's recalls); the feedback id may be None, and so may the namespace: a
        recall id is looked up in the entry's namespace, else in ``namespace``, else in ``"default"``; a
        ``Recall`` object in its own. Plain tuples in that order still work, with a DeprecationWarning,
        until 0.3.0.
        """
        entries = check_entries(items)
        namespace = None if namespace is None else check_namespace(namespace)
        if not entries:
            return 0
        with self._open.locked():
            with self._open.write() as conn:
                cfg = self.config
                plan = plan_updates(
                    conn, entries, alpha=cfg.alpha, credit=cfg.credit, namespace=namespace,
                    depth=cfg.credit_depth, decay=cfg.credit_decay, schedule=cfg.alpha_schedule, floor=cfg.alpha_floor,
                )  # fmt: skip
                generation, after, updated = apply_updates(conn, plan)
            if generation is not None:
                if self._mirrors.advance(generation):
                    self._mirrors.apply_values(after)
                else:
                    self._open.resync()
            return updated

    # -- moving memories ---------------------------------------------------------------------
    def import_(self, path: str | Path, *, writer: str | None = None) -> int:
        """Read an ``export`` file (memories already stored in their namespace are skipped); returns how
        many were added. Every record is checked before anything is written (a ``ConfigError`` names the
        line and field; nothing is imported); an import stopped half way completes when run again. With
        the exporting store's embedder the vectors are reused bit for bit (``memory.jsonl``).

        ``writer`` None keeps each record's own ``meta["writer"]`` (a restore of an export is bit-exact), or
        gives one without it ``import:<file name>``; a ``writer`` stamps every memory, a record's claimed
        writer kept as ``meta["claimed_writer"]``. ``MemoryConfig.trust`` decides by the result."""
        source = jsonl.as_path(path, "import")
        stamp = partial(checks.imported_meta, writer=None if writer is None else checks.check_writer(writer),
                        fallback=checks.writer_name("import", source.name))  # fmt: skip
        checked = jsonl.check_file(source)
        skip = self._open.read(partial(jsonl.already_stored, checked=checked))
        reuse = jsonl.same_embedder(checked.header, self.embedder, self.dim)
        added = 0
        for namespace, records in jsonl.records(checked, skip):
            if added // BULK_CHUNK != (added + len(records)) // BULK_CHUNK:
                self._open.yield_to_writers()  # a turn for other writers about every BULK_CHUNK rows
            batch, reused = jsonl.to_batch(records, self.embedder, self.dim, reuse=reuse, stamp=stamp)
            self._insert({namespace: batch}, group=not reused, skip_existing=True)
            added += len(batch)
        return added

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Save changed indexes and release the database. Idempotent."""
        self._open.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        name = getattr(self.embedder, "name", "?")
        return f"MemoryStore({redact_url(self.url)!r}, embedder={name!r}, index={self.config.index!r})"

    # -- helpers -------------------------------------------------------------------------------
    def _q0(self, q: float | None) -> float:
        return self.config.q_init if q is None else check_reward(q, "add", what="q")

    def _embed(self, texts: list[str]) -> np.ndarray:
        vecs = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        return checks.check_embeddings(vecs, len(texts), self.dim, source=f"embedder {self.embedder!r}")
