"""``MemoryStore``: Q-valued episodic memory (MemRL), durable in SQL and fast in memory.

SQL is the source of truth; each process mirrors what it uses in NumPy (Q-values, embeddings) next
to a vector index, so a recall costs one index search plus microseconds of scoring. A reward is one
``UPDATE … SET q = q + α·(r − q)`` per batch, computed by the database, so several processes sharing a
store never lose an update; a feedback id makes it idempotent.

``MemoryStore`` is one class whose methods hand the work to the rooms of the package: ``memory.write`` (adding,
writing, importing, removing), ``memory.recall`` (retrieving, the recall log), ``memory.learn`` (rewards),
``memory.upkeep`` (consolidating, pruning, restoring), ``memory.defences`` (the quarantine, distrust) and
``memory.storage`` (the database and reading memories back).

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

from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine

from connectors.chat import ChatModel
from connectors.db import default_url
from connectors.embedders import Embedder
from connectors.errors import StoreError
from connectors.redact import redact_url
from memory.config import FailureKeeps, ForgetConfig, MemoryConfig, RetrievalConfig
from memory.defences import distrust as distrusting
from memory.defences import quarantine
from memory.defences.trust import LOCAL_WRITER
from memory.learn import rewards
from memory.learn.rewards import Reinforcement
from memory.recall import log as recall_log
from memory.recall import retrieving
from memory.recall.context_cache import ContextQCache
from memory.storage import items as stored
from memory.storage import jsonl
from memory.storage.database import OpenStore, mirror_set, open_database
from memory.storage.records import ItemCache, MemoryItem, Recall, ScoredItem
from memory.upkeep import pruning, restoring, strategies
from memory.write import adding, checks
from memory.write.writer import WriteEntry

__all__ = ["MemoryItem", "MemoryStore", "Recall", "ScoredItem", "WriteEntry"]


class MemoryStore:
    """Episodic memory whose items carry a learned utility Q (docs/design/decisions.md, "Memory and Q").

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
        self.config = checks.check_store_args(embedder, config)
        self.url, self.embedder, self.dim = url or default_url(), embedder, int(embedder.dim)
        name = getattr(embedder, "name", type(embedder).__name__)
        self._db, self.config = open_database(self.url, self.config, embedder=name, dim=self.dim)
        self._rng = np.random.default_rng(seed)
        self._mirrors = mirror_set(self._db, dim=self.dim, kind=self.config.index, index_path=index_path)
        self._open = OpenStore(self._db, self._mirrors, log_delay=self.config.log_delay)
        self._texts, self._folded = ItemCache(self.config.item_cache), ContextQCache()

    # -- writing (memory.write) ----------------------------------------------------------------
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
        ``writer`` (``"<kind>:<name>"``, ``memory.defences.trust``) is stored as ``meta["writer"]``, and
        ``MemoryConfig.trust`` decides by it (an untrusted writer's ``q`` may be ignored, its memory held)."""
        return adding.add(self._open, self.config, self._embed, intent, experience, namespace=namespace,
                          success=success, q=q, meta=meta, id=id, writer=writer)  # fmt: skip

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
        """Store many ``(intent, experience)`` rows; returns the ``MemoryItem``s stored, in row order.

        ``embeddings`` (n, dim) may be given to skip the embedder (rows are L2-normalised). ``meta`` is one
        mapping for all rows or one per row. ``group=False`` skips intent grouping: every row becomes its own
        intent key (a bulk load of distinct tasks avoids the O(n²) comparison). ``writer``: as ``add``'s.
        Every row is checked before anything is written; a large load commits in chunks of about a second
        each, so other processes sharing the database wait at most about that long for a turn.
        """
        return adding.add_many(self._open, self.config, self._embed, self.dim, rows, namespace=namespace,
                               embeddings=embeddings, meta=meta, group=group, writer=writer)  # fmt: skip

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
        """Turn one attempt into one memory (``memory.write.writer``): cheap text, or an LLM-written lesson. A
        deterministic ``id`` makes writing idempotent; ``failure_keeps`` overrides the config's for it. With
        ``MemoryConfig.supersede`` it supersedes the memories of its group it contradicts
        (``memory.upkeep.supersession``). ``writer``: as ``add``'s (``WriteEntry.writer``)."""
        entry = WriteEntry(
            intent, trajectory=trajectory, feedback=feedback, success=success, namespace=namespace,
            provenance=provenance, id=id, failure_keeps=failure_keeps, writer=writer,
        )  # fmt: skip
        return self.write_many([entry], llm=llm)[0]

    def write_many(self, entries: Sequence[WriteEntry], *, llm: ChatModel | None = None) -> list[MemoryItem]:
        """``write`` for many attempts: one embedding call, one transaction, one index update per namespace.

        Returns one memory per entry, in order. An entry whose ``id`` is already stored in its namespace gets
        the stored memory back (no model call); entries repeating an id within the batch are written once and
        all get that memory. Every entry is checked before anything is written; an id taken in another namespace
        is a ``StoreError``. With ``MemoryConfig.supersede`` the batch supersedes what it contradicts as the
        same writes one after another would, in the same transaction."""
        return adding.write_many(self._open, self.config, self._embed, entries, llm=llm, folded=self._folded,
                                 texts=self._texts)  # fmt: skip

    def remove(self, memory_ids: Sequence[str], *, namespace: str = "default") -> int:
        """Delete memories of ``namespace`` by id (ids unknown there are skipped); returns how many were
        removed. Other processes drop them when they catch up; the recall log keeps its rows for ``explain``."""
        return adding.remove(self._open, memory_ids, namespace)

    def import_(self, path: str | Path, *, writer: str | None = None) -> int:
        """Read an ``export`` file (memories already stored in their namespace are skipped); returns how
        many were added. Every record is checked before anything is written (a ``ConfigError`` names the
        line and field; nothing is imported); an import stopped half way completes when run again. With
        the exporting store's embedder the vectors are reused bit for bit (``memory.storage.jsonl``).

        ``writer`` None keeps each record's own ``meta["writer"]`` (a restore of an export is bit-exact), or
        gives one without it ``import:<file name>``; a ``writer`` stamps every memory, a record's claimed
        writer kept as ``meta["claimed_writer"]``. ``MemoryConfig.trust`` decides by the result."""
        return adding.import_file(self._open, self.config, self.embedder, self.dim, path, writer=writer)

    # -- recalling (memory.recall) -------------------------------------------------------------
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
        checks.check_text("query", query)
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
        by ``namespace``'s overlay Q (``memory.recall.context_q``); rewards never move the shared memories.

        A recall finds only valid memories (none superseded, ``memory.upkeep.supersession``). ``as_of`` (Unix
        time), for audits: the memories that were valid then, superseded since or not, ranked with today's Q
        (Q has no history), searched exactly in a copy read from SQL (slower: the whole namespace is read)."""
        return retrieving.retrieve(
            self._open, self._embed, queries, config=self.config, recall_config=config, namespace=namespace,
            contexts=contexts, shared=shared, as_of=as_of, record=record, rng=self._rng, texts=self._texts,
            folded=self._folded,
        )  # fmt: skip

    # -- learning (memory.learn) ---------------------------------------------------------------
    def reinforce(
        self, recall: Recall | str, reward: float, *, feedback_id: str | None = None, namespace: str | None = None
    ) -> int:
        """Apply a reward to the memories of one recall: ``Q ← Q + α·w·(r − Q)``, ``visits += 1``.

        ``recall`` is the ``Recall`` that ``retrieve`` returned (it carries its namespace, and is checked
        against the recall log) or its id, looked up among the recalls of ``namespace`` (default
        ``"default"``). A recall only ever reinforces memories of the namespace it was made in.

        Returns how many items were updated: 0 when ``feedback_id`` was applied before (nothing changes).
        Raises ``ConfigError`` for a non-finite or out-of-range reward and ``StoreError`` for a recall unknown
        in the namespace, in both cases before anything is written.
        """
        return self.reinforce_many([Reinforcement(recall, reward, feedback_id)], namespace=namespace)

    def reinforce_many(self, items: Sequence[Reinforcement], *, namespace: str | None = None) -> int:
        """Many ``reinforce`` calls in one transaction and one UPDATE statement; returns items updated.

        Each entry is a ``Reinforcement(recall, reward, feedback_id, namespace)`` (``reinforcements`` builds
        them for one answer's recalls); the feedback id may be None, and so may the namespace: a recall id is
        looked up in the entry's namespace, else in ``namespace``, else in ``"default"``; a ``Recall`` object
        in its own. Plain tuples in that order still work, with a DeprecationWarning, until 0.3.0.
        """
        return rewards.reinforce(self._open, self.config, items, namespace=namespace, folded=self._folded)

    # -- reading (memory.storage, memory.recall.log) ---------------------------------------------------
    def get(self, memory_id: str, *, namespace: str = "default") -> MemoryItem:
        """One memory of ``namespace`` by id, superseded or not (``StoreError`` when that namespace holds none)."""
        checks.check_id("memory_id", memory_id)
        found = self._open.read(
            partial(stored.fetch_items, ids=[memory_id], namespace=checks.check_namespace(namespace))
        )
        if not found:
            raise StoreError(f"unknown memory id {memory_id!r} in namespace {namespace!r}")
        return found[0]

    def items(self, namespace: str | None = None, *, include_superseded: bool = True) -> list[MemoryItem]:
        """Every memory (of one namespace, or all), oldest first; ``include_superseded=False`` leaves out
        those a newer memory superseded (``MemoryItem.valid``: the ones recalls can find)."""
        namespace = None if namespace is None else checks.check_namespace(namespace)
        return self._open.read(partial(stored.all_items, namespace=namespace, valid_only=not include_superseded))

    def explain(self, recall_id: str, *, namespace: str = "default") -> dict[str, Any]:
        """The logged recall of ``namespace``: query, config, every candidate's sim, Q, z-scores, score,
        whether it was selected or filtered by δ, whether a newer memory has superseded it since
        (``superseded``, ``superseded_by``), and the feedback applied to it since."""
        checks.check_id("recall_id", recall_id)
        return self._open.read(
            partial(recall_log.explain, recall_id=recall_id, namespace=checks.check_namespace(namespace))
        )

    def stats(self, namespace: str | None = None) -> dict[str, Any]:
        """Counts and the Q distribution: count, q mean/std/min/max/histogram, visits, intents, and how many
        memories are superseded (counted in ``count`` too)."""
        namespace = None if namespace is None else checks.check_namespace(namespace)
        return self._open.read(partial(stored.stats, namespace=namespace))

    def export(self, path: str | Path, *, namespace: str | None = None) -> int:
        """Write memories as JSONL (ids, Q, visits, timestamps, validity, meta, embeddings kept); returns the
        count. Atomic: a complete file replaces ``path``, or ``path`` is left as it was (``memory.storage.jsonl``)."""
        target = jsonl.as_path(path, "export")
        return self._open.read(lambda conn: jsonl.export_jsonl(conn, target, namespace, self.embedder, self.dim))

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine behind the store; other tables (runs, prompts) may share its database."""
        return self._db.engine

    # -- upkeep between rounds (memory.upkeep; docs/design/decisions.md, "A memory that matures") -------------
    def consolidate(
        self, namespace: str = "default", *, llm: ChatModel | None = None, min_size: int = 3
    ) -> strategies.Consolidation:
        """Distil a strategy from each intent group of ``namespace`` with at least ``min_size`` valid episodes,
        successes and failures together (``memory.upkeep.strategies``): by ``llm`` (one call per group that
        changed since its last strategy) or, without one, by rule. Strategies are memories of kind
        ``"strategy"`` with their own Q, recalled as ``RetrievalConfig.draw_from`` says.

        Idempotent: a group whose episodes are the ones its stored strategy came from costs nothing; a group
        that changed gets a new strategy superseding the old one (which hands over its Q and visits); a
        group's first strategy starts as ``MemoryConfig.strategy_start`` says. Killed midway, the store is as
        before or complete (one write transaction after the model calls).
        """
        return strategies.consolidate(self._open, self.config, namespace, llm=llm, min_size=min_size)

    def prune(
        self,
        namespace: str | None = None,
        *,
        config: ForgetConfig | None = None,
        now: float | None = None,
        dry_run: bool = False,
    ) -> pruning.PruneReport:
        """Forget under a budget (``memory.upkeep.pruning``): merge near-duplicates, evict the namespace down to
        ``config.capacity`` (default ``MemoryConfig.forget``, which forgets nothing), purge removal records
        older than ``config.retention``; every removal is recorded and can be undone with ``restore``.

        ``namespace`` None prunes every namespace; ``now`` (Unix time, default the clock) is when staleness
        is measured and the removals are stamped; ``dry_run`` reports what would go and changes nothing.
        One write transaction: killed midway, the store is as before. Run again, it removes nothing more.

        Example:
            >>> from connectors import HashEmbedder
            >>> with MemoryStore("sqlite://", embedder=HashEmbedder()) as store:
            ...     _ = store.add_many([("Torcode Lager Nord?", "4471")] * 3)
            ...     store.prune(config=ForgetConfig(merge_similarity=0.99)).counts
            {'merged': 2}
        """
        return pruning.prune_store(
            self._open, self.config, self.dim, namespace, forget=config, now=now, dry_run=dry_run
        )

    def restore(
        self, ids: Sequence[str], *, namespace: str = "default", now: float | None = None
    ) -> restoring.RestoreReport:
        """Put removed memories of ``namespace`` back from the removal log (``memory.upkeep.restoring``): ``ids``
        are removal ids (``history``) or memory ids (their latest removal). A merged memory's keeper hands
        back what the merge gave it. Restoring twice changes nothing; records past
        ``MemoryConfig.forget.retention`` (at ``now``, default the clock) are refused, as are unknown ids (both
        listed in the report)."""
        return restoring.restore_store(self._open, self.config, ids, namespace=namespace, now=now)

    def history(
        self, namespace: str | None = None, *, limit: int = 100, since: float | None = None
    ) -> list[restoring.LoggedRemoval]:
        """The removal log, newest first (of ``namespace``, or every namespace): what went, why, when, whether
        it was restored and whether it still can be. ``since``: removed at or after it."""
        return restoring.read_history(self._open, self.config, namespace, limit=limit, since=since)

    # -- defences against a writer (memory.defences) ----------------------------------------------------------
    def quarantined(self, namespace: str | None = None, writer: str | None = None) -> list[MemoryItem]:
        """The memories ``MemoryConfig.trust`` (mode ``"quarantine"``) holds back from every recall, oldest first:
        of ``namespace`` and ``writer`` (None: all). Each is as ``release`` would store it (``q_init``, no visits)."""
        return quarantine.quarantined(self._open, namespace, writer)

    def release(
        self, *, writer: str | None = None, ids: Sequence[str] | None = None, namespace: str | None = None
    ) -> int:
        """Move held memories into the memory (those of ``writer``, ``ids`` and ``namespace``; at least one
        given): at ``q_init`` with no visits, grouped with the intents they meet; returns how many. Released,
        they are memories like any other; releasing again moves nothing."""
        return adding.release(self._open, self.config, self.dim, writer=writer, ids=ids, namespace=namespace)

    def distrust(
        self, writer: str, *, namespace: str | None = None, action: str = "remove", now: float | None = None
    ) -> distrusting.DistrustReport:
        """Stop trusting ``writer`` after the fact (``memory.defences.distrust``): ``action="remove"`` removes its
        memories (of ``namespace``, or all) through the removal log, so ``history`` lists them and ``restore``
        puts them back, and drops its held ones; ``"reset"`` sets their Q to ``q_init`` and their visits to 0,
        logged for ``undo_distrust``. Twice is a no-op (zeros). A writer the store never recorded is a
        ``ConfigError``."""
        return distrusting.distrust(self._open, self.config, writer, namespace=namespace, action=action, now=now)

    def undo_distrust(
        self, writer: str, *, namespace: str | None = None, now: float | None = None
    ) -> distrusting.DistrustReport:
        """Undo ``distrust`` of ``writer`` (of ``namespace``, or all): removed memories restored (within
        ``ForgetConfig.retention``), reset ones given their Q and visits back unless rewarded since, dropped
        ones held again. The report counts what came back; a second undo brings back nothing."""
        return distrusting.undo_distrust(self._open, self.config, writer, namespace=namespace, now=now)

    # -- the vector index (memory.mirror) ---------------------------------------------------------------------
    def index_status(self, namespace: str = "default") -> str:
        """How the namespace's vector index was obtained: ``loaded`` (saved file, current), ``caught_up``
        (saved, updated from SQL), ``rebuilt``, ``built`` (no file) or ``database`` (``index="pgvector"``)."""
        return self._open.index_status(checks.check_namespace(namespace))

    def mirror_status(self, namespace: str = "default") -> str:
        """The same for the namespace's mirror (ids, Q, visits, vectors): ``loaded`` is its mapped snapshot."""
        return self._open.index_status(checks.check_namespace(namespace), of="mirror")

    def index_details(self, namespace: str = "default") -> dict[str, Any]:
        """What the namespace's index holds now: ``holds`` (``"exact"`` or ``"graph"``), items in the graph
        (``distinct_vectors``: the vectors it holds) and in the exact part, ``ef_search`` (pgvector's too) and its
        measured recall@10 (``measured_recall_at_10``), whether background work runs (``working``), its ``error``."""
        return self._open.index_details(checks.check_namespace(namespace))

    def wait_for_index(self, timeout: float | None = None) -> bool:
        """Wait until background index work (``index="auto"``: the switch to a graph, merges, tuning) is done; false
        when ``timeout`` seconds passed first. Recalls never need this: they are answered exactly meanwhile."""
        return self._open.wait_for_index(timeout)

    def save_index(self) -> int:
        """Save changed vector indexes and mirror snapshots beside the database now (``close`` does it too)."""
        with self._open.locked():
            return self._mirrors.save()

    # -- open and closed ------------------------------------------------------------------------------------
    def flush(self) -> int:
        """Commit the recall log rows that wait for their group commit (``MemoryConfig.recall_log_delay``) now;
        returns how many: before SQL of your own reads the log. Every transaction of the store does it too."""
        with self._open.locked():
            return self._open.db.flush()

    def close(self) -> None:
        """Commit the recall log rows that wait, save changed indexes and release the database. Idempotent."""
        self._open.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        name = getattr(self.embedder, "name", "?")
        return f"MemoryStore({redact_url(self.url)!r}, embedder={name!r}, index={self.config.index!r})"

    def _embed(self, texts: list[str]) -> np.ndarray:
        vecs = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        return checks.check_embeddings(vecs, len(texts), self.dim, source=f"embedder {self.embedder!r}")
