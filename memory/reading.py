"""The reading half of ``MemoryStore``: one memory, every memory, a logged recall, statistics, export, and
the state of the vector indexes.

A mixin, so ``memory.store`` stays one readable file: each method checks its arguments and runs one
function of ``memory.reads`` (or ``memory.jsonl``) in a read transaction under the store's lock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from connectors.embedders import Embedder
from connectors.errors import StoreError
from memory import jsonl, reads
from memory.checks import check_id, check_namespace
from memory.database import Database, OpenStore
from memory.mirror.sync import MirrorSet
from memory.records import MemoryItem


class StoreReading:
    """``get``, ``items``, ``explain``, ``stats``, ``export`` and the index's state (``index_status``,
    ``mirror_status``, ``index_details``, ``wait_for_index``, ``save_index``) of ``MemoryStore`` (which sets
    the attributes declared here).

    Example:
        >>> from connectors import HashEmbedder
        >>> from memory import MemoryStore
        >>> with MemoryStore("sqlite://", embedder=HashEmbedder()) as store:
        ...     item = store.add("sort a list", "use sorted()")
        ...     store.get(item.id).experience, len(store.items())
        ('use sorted()', 1)
    """

    embedder: Embedder
    dim: int
    _db: Database
    _open: OpenStore
    _mirrors: MirrorSet

    def get(self, memory_id: str, *, namespace: str = "default") -> MemoryItem:
        """One memory of ``namespace`` by id, superseded or not (``StoreError`` when that namespace holds no
        such id)."""
        check_id("memory_id", memory_id)
        found = self._find_many([memory_id], check_namespace(namespace))
        if not found:
            raise StoreError(f"unknown memory id {memory_id!r} in namespace {namespace!r}")
        return found[0]

    def _find_many(self, memory_ids: list[str], namespace: str | None) -> list[MemoryItem]:
        return self._open.read(lambda conn: reads.fetch_items(conn, memory_ids, namespace))

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine behind the store; other tables (runs, prompts) may share its database."""
        return self._db.engine

    def items(self, namespace: str | None = None, *, include_superseded: bool = True) -> list[MemoryItem]:
        """Every memory (of one namespace, or all), oldest first; ``include_superseded=False`` leaves out
        those a newer memory superseded (``MemoryItem.valid``: the ones recalls can find)."""
        namespace = None if namespace is None else check_namespace(namespace)
        return self._open.read(lambda conn: reads.all_items(conn, namespace, valid_only=not include_superseded))

    def explain(self, recall_id: str, *, namespace: str = "default") -> dict[str, Any]:
        """The logged recall of ``namespace``: query, config, every candidate's sim, Q, z-scores, score,
        whether it was selected or filtered by δ, whether a newer memory has superseded it since
        (``superseded``, ``superseded_by``), and the feedback applied to it since."""
        check_id("recall_id", recall_id)
        namespace = check_namespace(namespace)
        return self._open.read(lambda conn: reads.explain(conn, recall_id, namespace))

    def stats(self, namespace: str | None = None) -> dict[str, Any]:
        """Counts and the Q distribution: count, q mean/std/min/max/histogram, visits, intents, and how many
        memories are superseded (counted in ``count`` too)."""
        namespace = None if namespace is None else check_namespace(namespace)
        return self._open.read(lambda conn: reads.stats(conn, namespace))

    def export(self, path: str | Path, *, namespace: str | None = None) -> int:
        """Write memories as JSONL (ids, Q, visits, timestamps, validity, meta, embeddings kept); returns the
        count. Atomic: a complete file replaces ``path``, or ``path`` is left as it was (``memory.jsonl``)."""
        target = jsonl.as_path(path, "export")
        return self._open.read(lambda conn: jsonl.export_jsonl(conn, target, namespace, self.embedder, self.dim))

    # -- the vector index -----------------------------------------------------------------------
    def index_status(self, namespace: str = "default") -> str:
        """How the namespace's vector index was obtained: ``loaded`` (saved file, current), ``caught_up``
        (saved, updated from SQL), ``rebuilt``, ``built`` (no file) or ``database`` (``index="pgvector"``)."""
        return self._open.index_status(check_namespace(namespace))

    def mirror_status(self, namespace: str = "default") -> str:
        """The same for the namespace's mirror (ids, Q, visits, vectors): ``loaded`` is its mapped snapshot."""
        return self._open.index_status(check_namespace(namespace), of="mirror")

    def index_details(self, namespace: str = "default") -> dict[str, Any]:
        """What the namespace's index holds now: for ``index="auto"``, ``holds`` (``"exact"`` or ``"graph"``),
        items in the graph (``distinct_vectors``: the vectors it holds) and in the exact part, ``ef_search`` and the recall@10 measured for it
        (``measured_recall_at_10``), whether background work runs (``working``) and its last ``error``."""
        return self._open.index_details(check_namespace(namespace))

    def wait_for_index(self, timeout: float | None = None) -> bool:
        """Wait until background index work (``index="auto"``: the switch to a graph, merges, tuning) is
        done; false when ``timeout`` seconds passed first. Recalls never need this: they are answered
        exactly meanwhile."""
        return self._open.wait_for_index(timeout)

    def save_index(self) -> int:
        """Save changed vector indexes and mirror snapshots beside the database now (``close`` does it too)."""
        with self._open.locked():
            return self._mirrors.save()
