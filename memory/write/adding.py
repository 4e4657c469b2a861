"""The store's write paths: ``add``, ``add_many``, ``write_many``, ``import_file``, ``release`` and ``remove``.

Each checks everything before it writes, builds the rows (``memory.write.batch.NewItems``), and inserts them in one
write transaction under the store's lock (``insert``): the trust policy screens them first
(``memory.defences.quarantine.screen``), ``memory.write.inserts`` groups and stores them, and the mirrors take
what was stored once the transaction has committed (the mirror never runs ahead of SQL).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from connectors.chat import ChatModel
from connectors.embedders import Embedder
from connectors.errors import ConfigError
from memory.config import MemoryConfig
from memory.defences import quarantine
from memory.storage import jsonl
from memory.storage.items import fetch_items
from memory.storage.records import ItemCache, MemoryItem
from memory.upkeep.supersession import FACT_KEY, stated_fact
from memory.write import checks
from memory.write.batch import NewItems
from memory.write.inserts import BULK_CHUNK, chunk_size, insert_batches, remove_items
from memory.write.writer import WriteEntry, Written, check_write_entries, compose_experiences, entry_ids

if TYPE_CHECKING:
    from memory.mirror.arrays import Inserted, NamespaceMirror
    from memory.recall.context_cache import ContextQCache
    from memory.storage.database import OpenStore

Embed = Callable[[list[str]], np.ndarray]
"""The store's embedder, its answer checked: texts → float32 rows of unit length."""


def insert(
    opened: OpenStore,
    config: MemoryConfig,
    batches: Mapping[str, NewItems],
    *,
    group: bool = True,
    skip_existing: bool = False,
    folded: ContextQCache | None = None,
) -> dict[str, MemoryItem]:
    """Insert per-namespace batches in one transaction; the stored memories by id (``folded``: the store's Q in
    context, carried past the insert, which moves no Q in any context).

    With ``skip_existing`` the ids are checked again inside the write transaction: a row another
    process stored since the caller looked is returned as stored, not written twice (and one it
    stored in another namespace fails the whole transaction). ``MemoryConfig.trust`` is applied first
    (``memory.defences.quarantine.screen``): held memories come back as stored, in no mirror.
    """
    with opened.locked():
        with opened.write() as conn:
            batches, out = quarantine.screen(conn, batches, config, skip_existing=skip_existing)
            stored, done = insert_batches(
                conn, opened.mirrors, batches, config=config, group=group, skip_existing=skip_existing
            )
        out.update(stored)
        for _, d in done:
            out.update((item.id, item) for item in d.items)
        apply_inserts(opened, done, folded)
        return out


def apply_inserts(
    opened: OpenStore, done: list[tuple[NamespaceMirror, Inserted]], folded: ContextQCache | None = None
) -> None:
    """Hand what a committed transaction inserted to the mirrors (read back from SQL when another process
    wrote in between), and carry ``folded`` past it."""
    if not opened.mirrors.apply_inserts(done):
        opened.resync()
    elif folded is not None:
        for _, d in done:
            folded.advance(d.generation, ())


def find(opened: OpenStore, ids: list[str], namespace: str | None = None) -> list[MemoryItem]:
    """The stored memories with these ids (of ``namespace`` when given), in the order asked."""
    return opened.read(lambda conn: fetch_items(conn, ids, namespace))


def add(
    opened: OpenStore,
    config: MemoryConfig,
    embed: Embed,
    intent: str,
    experience: str,
    *,
    namespace: str,
    success: bool | None,
    q: float | None,
    meta: Mapping[str, Any] | None,
    id: str | None,
    writer: str,
) -> MemoryItem:
    """``MemoryStore.add``: one memory, or the one already stored under ``id`` in ``namespace``."""
    checks.check_text("intent", intent)
    checks.check_text("experience", experience)
    namespace, meta = checks.check_namespace(namespace), checks.with_writer(meta, writer)
    if id is not None:
        checks.check_id("id", id)
        existing = find(opened, [id])
        if existing:
            return checks.check_owner(existing[0], namespace)
    q0 = config.q_init if q is None else checks.check_reward(q, "add", what="q")
    ids = None if id is None else [id]
    batch = NewItems.build([intent], [experience], embed([intent]), q=q0, success=[success], meta=meta, ids=ids)
    return insert(opened, config, {namespace: batch}, skip_existing=id is not None)[batch.ids[0]]


def add_many(
    opened: OpenStore,
    config: MemoryConfig,
    embed: Embed,
    dim: int,
    rows: Sequence[tuple[str, str]],
    *,
    namespace: str,
    embeddings: np.ndarray | None,
    meta: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
    group: bool,
    writer: str,
) -> list[MemoryItem]:
    """``MemoryStore.add_many``: every row checked, then committed in chunks (``BULK_CHUNK`` rows first, then
    as many as take ``memory.write.inserts.BULK_SECONDS``), other writers given a turn between two chunks."""
    rows = checks.check_rows(rows)
    namespace, meta = checks.check_namespace(namespace), checks.with_writer(meta, writer)
    if not rows:
        return []
    intents = [r[0] for r in rows]
    vecs = embed(intents) if embeddings is None else checks.check_embeddings(embeddings, len(rows), dim)
    success = [None] * len(rows)
    batch = NewItems.build(intents, [r[1] for r in rows], vecs, q=config.q_init, success=success, meta=meta)
    lo, size = 0, BULK_CHUNK
    stored: dict[str, MemoryItem] = {}
    while lo < len(batch):
        if lo:
            opened.yield_to_writers()
        start = time.perf_counter()
        stored.update(insert(opened, config, {namespace: batch.take(slice(lo, lo + size))}, group=group))
        lo, size = lo + size, chunk_size(size, time.perf_counter() - start)
    return [stored[i] for i in batch.ids]


def write_many(
    opened: OpenStore,
    config: MemoryConfig,
    embed: Embed,
    entries: Sequence[WriteEntry],
    *,
    llm: ChatModel | None,
    folded: ContextQCache | None = None,
    texts: ItemCache | None = None,
) -> list[MemoryItem]:
    """``MemoryStore.write_many``: one memory per entry, in order; an id already stored (in its namespace)
    comes back as stored and costs no model call, an id repeated in the batch is written once. ``texts``: the
    store's item cache, given what was written (an attempt's memory is often recalled next)."""
    entries = check_write_entries(entries)
    ids, firsts = entry_ids(entries)
    given = [e.id for e in entries if e.id is not None]
    known = {item.id: item for item in find(opened, given)} if given else {}
    for e in entries:
        if e.id in known:
            checks.check_owner(known[e.id], e.namespace)
    todo = [i for i in firsts if ids[i] not in known]
    if todo:
        chosen = [entries[i] for i in todo]
        written = compose_experiences(chosen, llm, keeps=config.failure_keeps)
        vecs = embed([e.intent for e in chosen])
        batches = new_batches(
            chosen, [ids[i] for i in todo], written, vecs, q_init=config.q_init, supersede=config.supersede
        )
        stored = insert(opened, config, batches, skip_existing=bool(given), folded=folded)
        if texts is not None:
            texts.put_written(stored.values())
        known.update(stored)
    return [known[item_id] for item_id in ids]


def remove(opened: OpenStore, memory_ids: Sequence[str], namespace: str) -> int:
    """``MemoryStore.remove``: how many memories of ``namespace`` were deleted (each on the removal log)."""
    ids = checks.check_texts(memory_ids, "memory_ids", single="wrap it in a list")
    namespace = checks.check_namespace(namespace)
    if not ids:
        return 0
    with opened.locked():
        with opened.write() as conn:
            generation, removed = remove_items(conn, ids, namespace)
        if generation is not None and not opened.mirrors.apply_removal(generation, removed):
            opened.resync()
        return sum(len(seqs) for seqs in removed.values())


def import_file(
    opened: OpenStore, config: MemoryConfig, embedder: Embedder, dim: int, path: str | Path, *, writer: str | None
) -> int:
    """``MemoryStore.import_``: how many memories an export file added (those already stored are skipped).
    Every record is checked before anything is written (``memory.storage.jsonl``); a turn is left to other
    writers about every ``BULK_CHUNK`` rows."""
    source = jsonl.as_path(path, "import")
    stamp = partial(checks.imported_meta, writer=None if writer is None else checks.check_writer(writer),
                    fallback=checks.writer_name("import", source.name))  # fmt: skip
    checked = jsonl.check_file(source)
    skip = opened.read(partial(jsonl.already_stored, checked=checked))
    reuse = jsonl.same_embedder(checked.header, embedder, dim)
    added = 0
    for namespace, records in jsonl.records(checked, skip):
        if added // BULK_CHUNK != (added + len(records)) // BULK_CHUNK:
            opened.yield_to_writers()
        batch, reused = jsonl.to_batch(records, embedder, dim, reuse=reuse, stamp=stamp)
        insert(opened, config, {namespace: batch}, group=not reused, skip_existing=True)
        added += len(batch)
    return added


def release(
    opened: OpenStore,
    config: MemoryConfig,
    dim: int,
    *,
    writer: str | None,
    ids: Sequence[str] | None,
    namespace: str | None,
) -> int:
    """``MemoryStore.release``: held memories (of ``writer``, ``ids`` and ``namespace``; at least one given)
    moved into the memory at ``q_init`` with no visits, in one transaction; how many were inserted."""
    if writer is None and ids is None and namespace is None:
        raise ConfigError("release: say which held memories to release: writer=, ids= and/or namespace=")
    writer = None if writer is None else checks.check_writer(writer)
    asked = None if ids is None else checks.check_texts(ids, "release: ids", single="wrap it in a list")
    namespace = None if namespace is None else checks.check_namespace(namespace)
    with opened.locked():
        with opened.write() as conn:
            held, batches = quarantine.releasable(
                conn, config.q_init, dim, writer=writer, ids=asked, namespace=namespace
            )
            stored, done = insert_batches(conn, opened.mirrors, batches, config=config, group=True, skip_existing=True)
            quarantine.unhold(conn, held)
        apply_inserts(opened, done)
        return len(held) - len(stored)


def new_batches(
    entries: Sequence[WriteEntry],
    ids: Sequence[str],
    written: Sequence[Written],
    vecs: np.ndarray,
    *,
    q_init: float,
    supersede: bool = False,
) -> dict[str, NewItems]:
    """The rows ``entries`` become (their ids, texts and vectors given), one batch per namespace; with
    ``supersede`` each row carries the fact it states, so that it supersedes the memories it contradicts."""
    by_ns: dict[str, list[int]] = {}
    for j, e in enumerate(entries):
        by_ns.setdefault(e.namespace, []).append(j)
    metas = [entry_meta(w, e) for w, e in zip(written, entries, strict=True)]
    facts = [stated_fact(e.success, w.experience, m) for e, w, m in zip(entries, written, metas, strict=True)]
    return {
        ns: NewItems.build(
            [entries[j].intent for j in js], [written[j].experience for j in js], vecs[js], q=q_init,
            success=[bool(entries[j].success) for j in js], meta=[metas[j] for j in js],
            ids=[ids[j] for j in js], groups=[entries[j].task for j in js],
            facts=[facts[j] for j in js] if supersede else None,
        )
        for ns, js in by_ns.items()
    }  # fmt: skip


def entry_meta(written: Written, entry: WriteEntry) -> dict[str, Any]:
    """The meta stored with a written memory: who wrote it, how it was composed (``"cheap"`` or ``"llm"``)
    and where it came from."""
    meta: dict[str, Any] = {"writer": entry.writer, "composed": written.mode}
    if entry.provenance:
        meta["provenance"] = dict(entry.provenance)
    if entry.fact is not None:
        meta[FACT_KEY] = entry.fact
    return meta
