"""Keeping the in-process mirrors equal to SQL, across processes, and the saved index files current.

Every write bumps one generation counter. Before reading, a store compares the counter with the
generation its mirrors reflect (one tiny SELECT); when another process wrote, it reads exactly the
rows stamped with a newer generation — new items, changed Q-values, intents, tombstones, memories
superseded (which leave the mirror: only valid memories are recalled) — and applies them. A namespace is
loaded on first use: from its saved snapshot (``memory.mirror.snapshot``, memory-mapped, caught up by the
same delta and checked against SQL) when there is a usable one, else from SQL. Its vector index comes from
the saved file when that file agrees with the mirror (caught up when it is behind), and is rebuilt from the
mirror otherwise. ``save`` writes both files for the namespaces that changed.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Connection, select
from sqlalchemy.sql.elements import ColumnElement

from connectors.errors import StoreError
from memory.mirror import snapshot
from memory.mirror.adaptive import load_index, new_index
from memory.mirror.arrays import NamespaceMirror, Rows, kind_codes
from memory.mirror.index import SearchIndex, VectorIndex
from memory.mirror.pgvector import PgVectorIndex
from memory.storage.schema import from_blobs, intents, memory_items, tombstones, valid_at
from memory.storage.statements import chunks, read_generation

if TYPE_CHECKING:
    from memory.mirror.arrays import Inserted

log = logging.getLogger(__name__)

BUILD_CHUNK = 65536  # rows per call when an index is built from the mirror
ITEM_COLUMNS = (
    memory_items.c.seq,
    memory_items.c.id,
    memory_items.c.namespace,
    memory_items.c.q,
    memory_items.c.visits,
    memory_items.c.created_at,
    memory_items.c.intent_id,
    memory_items.c.kind,
)


def index_file(index_dir: Path, namespace: str) -> Path:
    """The file of one namespace's index: a readable slug plus a hash (namespaces are free text)."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", namespace)[:40]
    digest = hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:10]
    return index_dir / f"{slug}-{digest}.faiss"


class MirrorSet:
    """The mirrors of the namespaces this process has used, and the generation they reflect.

    Every method runs inside the caller's transaction (and under the store's lock). ``served_index``
    makes each namespace's index one that the database serves (``memory.mirror.pgvector``): nothing is
    built, loaded or saved in the process.
    """

    def __init__(
        self,
        *,
        dim: int,
        kind: str,
        index_dir: Path | None,
        served_index: Callable[[str], SearchIndex] | None = None,
        read_only: bool = False,
    ) -> None:
        self.dim = dim
        self.kind = kind
        self.index_dir = index_dir if served_index is None else None
        self.read_only = read_only  # a read-only database: saved indexes are loaded, never written
        self._served_index = served_index
        self.generation = -1  # unknown until the first sync
        self.index_state: dict[str, str] = {}
        self.mirror_state: dict[str, str] = {}  # how each mirror was obtained: as index_state, for the snapshot
        self._mirrors: dict[str, NamespaceMirror] = {}
        self._dirty: set[str] = set()  # index files to write
        self._changed: set[str] = set()  # snapshots to write
        self._saved: dict[str, tuple[str, int]] = {}  # the snapshot file equal to the mirror: (token, generation)

    def sync(self, conn: Connection, *, lock: bool = False) -> int:
        """Catch every loaded mirror up with the database (a no-op when nobody else wrote); returns the
        generation the mirrors now reflect.

        ``lock`` starts a write transaction: on PostgreSQL it locks the state row first (SQLite's
        ``BEGIN IMMEDIATE`` already did), so writers follow each other like on SQLite and this one
        catches up with everything committed before it.
        """
        generation = read_generation(conn, lock=lock)
        if self.generation >= 0 and generation != self.generation and self._mirrors:
            self._changed |= self._catch_up(conn, self.generation, self._mirrors)
        self.generation = generation
        return generation

    def get(self, conn: Connection, namespace: str) -> NamespaceMirror:
        """The namespace's mirror, loaded from SQL on first use (call ``sync`` first)."""
        mirror = self._mirrors.get(namespace)
        if mirror is None:
            mirror = self._load(conn, namespace)
            self._mirrors[namespace] = mirror
        return mirror

    def loaded(self, namespace: str) -> NamespaceMirror | None:
        return self._mirrors.get(namespace)

    def all(self) -> list[NamespaceMirror]:
        """Every mirror loaded in this process."""
        return list(self._mirrors.values())

    def advance(self, generation: int) -> bool:
        """After a committed write: true when it directly follows what the mirrors reflect, so the
        writer may apply its own change locally; false when someone wrote in between (then sync)."""
        if generation == self.generation + 1:
            self.generation = generation
            return True
        return False

    def apply_values(self, rows: Sequence[Any]) -> None:
        """Refresh Q and visits from ``(id, seq, namespace, q, visits)`` rows just written."""
        for ns in {row[2] for row in rows}:
            mirror = self._mirrors.get(ns)
            if mirror is None:
                continue
            part = [row for row in rows if row[2] == ns]
            pos = mirror.rows_of_seqs(np.array([r[1] for r in part], dtype=np.int64))
            ok = pos >= 0
            mirror.set_values(pos[ok], np.array([r[3] for r in part])[ok], np.array([r[4] for r in part])[ok])
            self._changed.add(ns)

    def apply_inserts(self, done: Sequence[tuple[NamespaceMirror, Inserted]]) -> bool:
        """Apply this process's committed inserts to its mirrors (evicted rows out, new keys and rows in).

        False when another process wrote in between: then nothing more is applied and the caller syncs.
        """
        for mirror, d in done:
            if not self.advance(d.generation):
                return False
            mirror.remove(d.evicted_rows)
            gone = mirror.rows_of_seqs(d.superseded)
            mirror.remove(gone[gone >= 0])
            mirror.add_keys(d.key_ids, d.key_seqs, d.key_vecs)
            mirror.append(d.rows)
            self.mark_dirty(mirror.namespace)
        return True

    def apply_removal(self, generation: int, removed: Mapping[str, np.ndarray]) -> bool:
        """Drop this process's committed removals (sequence numbers per namespace) from its mirrors;
        False when another process wrote in between (the caller syncs)."""
        if not self.advance(generation):
            return False
        for ns, seqs in removed.items():
            mirror = self._mirrors.get(ns)
            if mirror is not None:
                rows = mirror.rows_of_seqs(seqs)
                mirror.remove(rows[rows >= 0])
                self.mark_dirty(ns)
        return True

    def mark_dirty(self, namespace: str) -> None:
        self._dirty.add(namespace)
        self._changed.add(namespace)

    def save(self, *, restamp: bool = False) -> int:
        """Write the changed indexes and mirror snapshots beside the database; returns how many files
        were written. ``restamp`` (on close) also records a newer generation beside unchanged snapshots.

        A failed write raises ``StoreError`` naming its cause (disk full, read-only); the namespaces
        not yet written stay marked, so a later ``save`` tries them again.
        """
        if self.index_dir is None or self.read_only:
            self._dirty.clear()
            self._changed.clear()
            return 0
        written = 0
        for ns in sorted(self._dirty):
            mirror = self._mirrors.get(ns)
            if mirror is not None and mirror.index.save(index_file(self.index_dir, ns), self.generation):
                written += 1
            self._dirty.discard(ns)
        for ns in sorted(self._mirrors):
            written += self._save_snapshot(ns, self.index_dir, restamp=restamp)
        return written

    def _save_snapshot(self, ns: str, folder: Path, *, restamp: bool) -> int:
        """Write the namespace's snapshot when its mirror changed since the file was written or mapped;
        when only the generation moved on, restamp the file's sidecar."""
        path = snapshot.mirror_file(index_file(folder, ns))
        saved = self._saved.get(ns)
        if ns in self._changed or saved is None:
            token = snapshot.save(self._mirrors[ns], path, self.generation)
        elif restamp and saved[1] < self.generation:
            token = saved[0]
            snapshot.restamp(path, token, self.generation)
        else:
            return 0
        self._saved[ns] = (token, self.generation)
        self._changed.discard(ns)
        return 1

    # -- loading -------------------------------------------------------------------------------
    def snapshot(self, conn: Connection, namespace: str, *, as_of: float) -> NamespaceMirror:
        """The namespace's memories that were valid at ``as_of`` (superseded ones included), in a mirror of
        their own with an exact index: built from SQL for one recall (an audit), never kept or saved."""
        mirror = NamespaceMirror(namespace, self.dim, VectorIndex(self.dim, kind="flat"))
        self._fill(conn, mirror, valid_at(as_of))
        mirror.index.add(mirror.seqs, mirror.vectors())
        return mirror

    def _load(self, conn: Connection, namespace: str) -> NamespaceMirror:
        mirror = self._mapped(conn, namespace)
        if mirror is None:
            mirror = NamespaceMirror(namespace, self.dim, self._new_index(namespace))
            self._fill(conn, mirror, memory_items.c.valid_to.is_(None))  # superseded memories are never recalled
        self._attach_index(mirror, conn)
        return mirror

    def _mapped(self, conn: Connection, namespace: str) -> NamespaceMirror | None:
        """The namespace's saved snapshot, mapped and caught up; None (read it from SQL) when there is
        none, or when it is unreadable, ahead of the database or disagrees with it once caught up."""
        path = snapshot.mirror_file(index_file(self.index_dir, namespace)) if self.index_dir is not None else None
        saved = snapshot.load(path, namespace=namespace, dim=self.dim) if path is not None else None
        self.mirror_state[namespace] = "built" if path is None or not path.exists() else "rebuilt"
        if saved is None or self.generation < 0:
            return None
        if saved.generation > self.generation or snapshot.forked(conn, saved):  # another database's
            log.warning("memory mirror %s (generation %d) is not this database's (generation %d); it is read "
                        "from the database", path, saved.generation, self.generation)  # fmt: skip
            return None
        mirror = NamespaceMirror(namespace, self.dim, self._new_index(namespace))
        mirror.adopt(saved.columns, saved.rows, saved.keys, keys_file=saved.keys_file)
        try:
            changed = saved.generation < self.generation and bool(
                self._catch_up(conn, saved.generation, {namespace: mirror})
            )
            problem = snapshot.disagreement(conn, mirror)
        except (ValueError, KeyError, IndexError, StoreError) as e:  # a foreign file can fail anywhere
            changed, problem = False, f"catching it up failed: {e}"
        self._dirty.discard(namespace)  # the index is not attached yet: _attach_index decides
        if problem is not None:
            log.warning("memory mirror %s does not agree with the database (%s); it is read from the database",
                        path, problem)  # fmt: skip
            return None
        self.mirror_state[namespace] = "caught_up" if changed else "loaded"
        self._saved[namespace] = (saved.token, saved.generation)
        if changed:
            self._changed.add(namespace)
        return mirror

    def _fill(self, conn: Connection, mirror: NamespaceMirror, valid: ColumnElement[bool]) -> None:
        """Load the namespace's intent keys and its ``valid`` items into an empty mirror (not its index)."""
        namespace = mirror.namespace
        keys = conn.execute(
            select(intents.c.id, intents.c.seq, intents.c.embedding)
            .where(intents.c.namespace == namespace)
            .order_by(intents.c.seq)
        ).all()
        if keys:
            ids, seqs, blobs = zip(*keys, strict=True)
            mirror.add_keys(np.array(ids, dtype=object), np.array(seqs, dtype=np.int64), from_blobs(blobs, self.dim))
        rows = conn.execute(
            select(*ITEM_COLUMNS).where(memory_items.c.namespace == namespace, valid).order_by(memory_items.c.seq)
        ).all()
        self._add_missing_keys(conn, mirror, rows)
        mirror.append(self._rows(mirror, rows, vectors=False), index=False)

    def _rows(self, mirror: NamespaceMirror, rows: Sequence[Any], *, vectors: bool = True) -> Rows:
        """Mirror rows from ``ITEM_COLUMNS`` rows; ``vectors=False`` leaves out the vectors (the caller
        builds the index itself)."""
        if not rows:
            empty = np.zeros(0)
            return Rows(
                empty.astype(np.int64),
                empty.astype(object),
                empty,
                empty.astype(np.int64),
                empty,
                empty.astype(np.int64),
                np.zeros((0, self.dim), np.float32),
            )
        seq, ids, _ns, q, visits, created, intent_ids, kinds = zip(*rows, strict=True)
        codes = mirror.key_codes([str(i) for i in intent_ids])
        if (codes < 0).any():  # callers load the missing keys first (_add_missing_keys)
            raise StoreError(f"memory items of namespace {mirror.namespace!r} point at intent keys not loaded")
        return Rows(
            seqs=np.array(seq, dtype=np.int64),
            ids=np.array(ids, dtype=object),
            q=np.array(q, dtype=np.float64),
            visits=np.array(visits, dtype=np.int64),
            created=np.array(created, dtype=np.float64),
            intent_codes=codes,
            emb=mirror.key_rows(codes) if vectors else np.zeros((0, self.dim), np.float32),
            kinds=kind_codes(kinds),
        )

    def _new_index(self, namespace: str) -> SearchIndex:
        if self._served_index is not None:
            return self._served_index(namespace)
        return new_index(self.dim, self.kind)

    def _attach_index(self, mirror: NamespaceMirror, conn: Connection) -> None:
        ns = mirror.namespace
        if self._served_index is not None:  # the database holds the index: nothing to build here
            self.index_state[ns] = "database"
            if isinstance(mirror.index, PgVectorIndex):  # its depth, kept in the database (or measured)
                mirror.index.follow(mirror, conn)
            return
        path = index_file(self.index_dir, ns) if self.index_dir is not None else None
        loaded = load_index(path, dim=self.dim, kind=self.kind) if path is not None else None
        state = "built" if path is None or not path.exists() else "rebuilt"
        if loaded is not None:
            index, saved_gen = loaded
            fixed = reconcile(mirror, index)
            if fixed is not None:  # vectors never change for an id: equal ids mean a current index
                mirror.index = index
                state = "loaded" if fixed == 0 else "caught_up"
                log.debug("memory index %s saved at generation %d, store at %d", path, saved_gen, self.generation)
        if state in ("built", "rebuilt"):
            mirror.index = new_index(self.dim, self.kind)
            for lo in range(0, len(mirror), BUILD_CHUNK):  # bounded copies of the key vectors
                rows = np.arange(lo, min(lo + BUILD_CHUNK, len(mirror)))
                mirror.index.add(mirror.seqs[rows], mirror.vectors(rows), expect=len(mirror))
        if state != "loaded":
            self._dirty.add(ns)
        self.index_state[ns] = state
        log.info("memory index for namespace %r: %s (%d items)", ns, state, len(mirror))

    # -- catching up ---------------------------------------------------------------------------
    def _catch_up(self, conn: Connection, since: int, mirrors: Mapping[str, NamespaceMirror]) -> set[str]:
        """Apply to ``mirrors`` what was written after generation ``since``; returns the namespaces
        whose mirror changed.

        The namespaces are picked out and the keys ordered here, not in SQL: with ``namespace IN (…)`` in the
        WHERE clause SQLite scans the namespace's index instead of the generation's (120 ms at 100k items for a
        delta of nothing), and with ``ORDER BY seq`` the seq index over every key (87 ms at 145k keys, every
        recall of a process while another one writes).
        """
        touched = set[str]()
        new_keys = conn.execute(
            select(intents.c.id, intents.c.seq, intents.c.namespace, intents.c.embedding).where(intents.c.gen > since)
        ).all()
        new_keys = sorted((row for row in new_keys if row[2] in mirrors), key=lambda row: row[1])
        for ns in {row[2] for row in new_keys}:
            fresh = [row for row in new_keys if row[2] == ns]
            missing = mirrors[ns].key_codes([str(r[0]) for r in fresh]) < 0
            if missing.any():
                keep = [r for r, m in zip(fresh, missing.tolist(), strict=True) if m]
                ids, seqs = np.array([r[0] for r in keep], dtype=object), np.array([r[1] for r in keep])
                mirrors[ns].add_keys(ids, seqs, from_blobs([r[3] for r in keep], self.dim))
                touched.add(ns)
        c = memory_items.c
        changed = conn.execute(select(c.seq, c.namespace, c.q, c.visits, c.valid_to).where(c.updated_gen > since)).all()
        changed = [row for row in changed if row[1] in mirrors]
        touched |= self._drop([(r[0], r[1]) for r in changed if r[4] is not None], mirrors)  # superseded since
        changed = [r for r in changed if r[4] is None]
        unknown: list[int] = []
        for ns in {row[1] for row in changed}:
            part = [row for row in changed if row[1] == ns]
            mirror = mirrors[ns]
            seqs = np.array([r[0] for r in part], dtype=np.int64)
            rows = mirror.rows_of_seqs(seqs)
            known = rows >= 0
            mirror.set_values(rows[known], np.array([r[2] for r in part])[known], np.array([r[3] for r in part])[known])
            unknown.extend(int(s) for s in seqs[~known])
            touched.add(ns)
        touched |= self._append_new(conn, sorted(unknown), mirrors)
        dead = conn.execute(select(tombstones.c.seq, tombstones.c.namespace).where(tombstones.c.gen > since)).all()
        return touched | self._drop([row for row in dead if row[1] in mirrors], mirrors)

    def _drop(self, dead: Sequence[Any], mirrors: Mapping[str, NamespaceMirror]) -> set[str]:
        """Remove ``(seq, namespace)`` rows (deleted or superseded) from the mirrors holding them; returns
        the namespaces that lost rows."""
        touched = set[str]()
        for ns in {row[1] for row in dead}:
            mirror = mirrors[ns]
            rows = mirror.rows_of_seqs(np.array([r[0] for r in dead if r[1] == ns], dtype=np.int64))
            if (rows >= 0).any():
                mirror.remove(rows[rows >= 0])
                self._dirty.add(ns)
                touched.add(ns)
        return touched

    def _append_new(self, conn: Connection, seqs: list[int], mirrors: Mapping[str, NamespaceMirror]) -> set[str]:
        fetched: list[Any] = []
        for part in chunks(seqs):
            fetched.extend(conn.execute(select(*ITEM_COLUMNS).where(memory_items.c.seq.in_(part))).all())
        for ns in {row[2] for row in fetched}:
            mirror = mirrors[ns]
            part = sorted((r for r in fetched if r[2] == ns), key=lambda r: r[0])
            self._add_missing_keys(conn, mirror, part)
            mirror.append(self._rows(mirror, part))
            self._dirty.add(ns)
        return {row[2] for row in fetched}

    def _add_missing_keys(self, conn: Connection, mirror: NamespaceMirror, rows: Sequence[Any]) -> None:
        """Load the intent keys of ``ITEM_COLUMNS`` rows that the mirror lacks.

        On PostgreSQL (READ COMMITTED) each statement sees what was committed when it started, so an
        item read after the keys were read may belong to a key committed in between.
        """
        wanted = sorted({str(r[6]) for r in rows})
        missing = [k for k, code in zip(wanted, mirror.key_codes(wanted).tolist(), strict=True) if code < 0]
        for part in chunks(missing):
            keys = conn.execute(
                select(intents.c.id, intents.c.seq, intents.c.embedding).where(intents.c.id.in_(part))
            ).all()
            for key_id, seq, blob in keys:
                mirror.add_keys(np.array([key_id], dtype=object), np.array([seq]), from_blobs([blob], self.dim))


def reconcile(mirror: NamespaceMirror, index: Any, *, spot_checks: int = 8) -> int | None:
    """Bring a loaded index in line with the mirror; the number of ids added or removed, or None
    when the index cannot be trusted (duplicate ids, or vectors that differ from SQL's)."""
    ids, seqs = index.ids(), mirror.seqs  # the mirror's seqs ascend
    if len(ids) == len(seqs) and np.array_equal(ids, seqs):  # the usual case: saved from this mirror
        present, extra, missing = seqs, ids[:0], seqs[:0]
    else:
        ids = np.sort(ids)
        if np.any(ids[1:] == ids[:-1]):
            return None
        held = _sorted_isin(ids, seqs)
        present, extra, missing = ids[held], ids[~held], seqs[~_sorted_isin(seqs, ids)]
    if len(present):
        sample = present[np.linspace(0, len(present) - 1, min(spot_checks, len(present))).astype(np.int64)]
        stored = np.stack([index.reconstruct(int(s)) for s in sample])
        tolerance = getattr(index, "stored_tolerance", 1e-6)  # an index of 8-bit codes reads vectors back near
        if not np.allclose(stored, mirror.vectors(mirror.rows_of_seqs(sample)), rtol=0.0, atol=tolerance):
            return None
    index.remove(extra)
    index.add(missing, mirror.vectors(mirror.rows_of_seqs(missing)))
    return len(extra) + len(missing)


def _sorted_isin(values: np.ndarray, sorted_: np.ndarray) -> np.ndarray:
    """Which of ``values`` are in the ascending array ``sorted_``."""
    if not len(sorted_):
        return np.zeros(len(values), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_, values), len(sorted_) - 1)
    return sorted_[pos] == values
