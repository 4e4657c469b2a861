"""``evolve memory ACTION``: read a store (``stats``, ``show``), move memories (``export``, ``import``) or the whole
database (``backup``, ``restore``); the memory lifecycle by hand (``consolidate``, ``prune``, ``history``, ``undo``:
docs/design/decisions.md, "A memory that matures") and the defences against a writer (``distrust``, ``release``,
``quarantined``: ``memory.defences.trust``, issue 40). Each action is a subcommand that takes only its own flags, and
finds the store by ``--spec SPEC`` or ``--db URL``.

``evolve job`` runs consolidation and forgetting after each round when the spec asks; these commands do
the same on any store, for one namespace or all. ``distrust --writer W`` removes (``--reset``: resets) what a
writer wrote, ``undo --writer W`` puts it back, ``quarantined`` lists what ``[memory] trust = "quarantine"``
held back and ``release --writer W`` lets it in. None of them embeds text (consolidation reads the
stored vectors; a restore or a release puts the stored vector back), so the store is opened without
loading its embedder: a 20-second model load saved on every call.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Connection, Engine, inspect, select

from apps.options import Deprecated, add_database, count, located
from connectors import EvolveError, make_engine
from connectors.chat import ChatModel
from connectors.db import default_url, for_reads, sqlite_path
from connectors.redact import redact_url
from memory import MemoryConfig, MemoryStore
from memory.config import DAY, ForgetConfig
from memory.storage import items as reads
from memory.storage.schema import memory_items, read_state

ACTIONS = ("consolidate", "prune", "history", "undo", "distrust", "release", "quarantined")


class StoredEmbedder:
    """The name and dimension a store was built with, standing in for its embedder where nothing is embedded.

    Example:
        >>> StoredEmbedder("minilm", 384).dim
        384
    """

    def __init__(self, name: str, dim: int) -> None:
        self.name, self.dim = name, dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise EvolveError(
            f"this command opened the store without its embedder ({self.name}); it was asked to embed "
            f"{len(texts)} texts, which these commands never do: please report it"
        )


def store_engine(url: str | None) -> Engine:
    """An engine on an existing memory store: a database that does not exist is not created."""
    url = url or default_url()
    path = sqlite_path(url) if url.startswith("sqlite") else None
    if path is not None and not path.is_file():
        raise EvolveError(f"no database at {path} (evolve memory works on an existing store; check --db or --spec)")
    engine = make_engine(url)
    if not inspect(engine).has_table(memory_items.name):
        engine.dispose()
        raise EvolveError(
            f"{redact_url(url)} holds no memory store (no {memory_items.name} table); check --db or --spec"
        )
    return engine


def check_namespace(conn: Connection, namespace: str | None, url: str | None) -> None:
    """A ``--namespace`` that holds no memory is an error naming those that do (not an empty answer)."""
    if (
        namespace is None
        or conn.execute(select(memory_items.c.id).where(memory_items.c.namespace == namespace)).first()
    ):
        return
    known = sorted(str(r[0]) for r in conn.execute(select(memory_items.c.namespace).distinct()))
    where = redact_url(url or default_url())
    listed = f"its namespaces: {', '.join(known)}" if known else "it holds no memories"
    raise EvolveError(f"no namespace {namespace!r} in {where} ({listed})")


def cmd_read(args: argparse.Namespace) -> None:
    """``evolve memory stats|show``: SQL reads of an existing store. No embedder is loaded (MiniLM takes
    15-23 s) and no vector index is opened."""
    engine = store_engine(args.db)
    try:
        with for_reads(engine).connect() as conn:
            check_namespace(conn, args.namespace, args.db)
            if args.action == "stats":
                print(json.dumps(reads.stats(conn, args.namespace), indent=2, default=str))
                return
            items = sorted(reads.all_items(conn, args.namespace), key=lambda it: -it.q)[: args.limit]
    finally:
        engine.dispose()
    for it in items:
        print(f"{it.id}  q={it.q:+.3f}  visits={it.visits}  [{it.namespace}]  {it.intent[:70]}")


def open_store(url: str | None, config: MemoryConfig | None = None) -> MemoryStore:
    """An existing store, opened with a stand-in for the embedder recorded in it (``StoredEmbedder``)."""
    url = url or default_url()
    engine = store_engine(url)
    try:
        with for_reads(engine).connect() as conn:
            state = read_state(conn)
    finally:
        engine.dispose()
    if state.embedder is None or state.dim is None:
        raise EvolveError(f"the memory store in {redact_url(url)} is empty (no embedder recorded): nothing to do")
    return MemoryStore(url, embedder=StoredEmbedder(state.embedder, state.dim), config=config)


def namespaces(store: MemoryStore, only: str | None) -> list[str]:
    """``only``, or every namespace that holds memories."""
    if only is not None:
        return [only]
    with for_reads(store.engine).connect() as conn:
        return sorted(str(r[0]) for r in conn.execute(select(memory_items.c.namespace).distinct()))


def forget_config(args: argparse.Namespace) -> ForgetConfig:
    """``evolve memory prune``'s flags as a ``ForgetConfig`` (at least a capacity or a merge threshold)."""
    if args.capacity is None and args.merge_similarity is None and args.recall_retention_days is None:
        raise EvolveError(
            "evolve memory prune needs --capacity N, --merge-similarity COSINE and/or --recall-retention-days D "
            "(what to forget)"
        )
    return ForgetConfig(
        capacity=args.capacity,
        min_visits=args.min_visits,
        stale_after=None if args.stale_after_days is None else args.stale_after_days * DAY,
        merge_similarity=args.merge_similarity,
        retention=args.retention_days * DAY,
        recall_retention=None if args.recall_retention_days is None else args.recall_retention_days * DAY,
    )


def cmd_lifecycle(args: argparse.Namespace, llm: ChatModel | None = None) -> None:
    """Run one of ``ACTIONS`` (``apps.cli`` parses the arguments)."""
    config = MemoryConfig(forget=forget_config(args)) if args.action == "prune" else None
    if args.action == "undo" and bool(args.targets) == (args.writer is not None):
        raise EvolveError(
            "evolve memory undo needs the removal ids or memory ids to put back (see evolve memory history), "
            "or --writer W to undo a distrust of W; one of the two"
        )
    if args.action in ("distrust", "release") and args.writer is None:
        raise EvolveError(f"evolve memory {args.action} needs --writer KIND:NAME (e.g. --writer 'tenant:acme')")
    with open_store(args.db, config) as store:
        if args.action in ("distrust", "release", "quarantined") or args.writer is not None:
            return defences(store, args)
        if args.action == "consolidate":
            for ns in namespaces(store, args.namespace):
                print(store.consolidate(ns, llm=llm, min_size=args.min_size).summary())
        elif args.action == "prune":
            report = store.prune(args.namespace, dry_run=args.dry_run)
            verb = "would remove" if report.dry_run else "removed"
            print(f"{verb} {len(report.removed)} memories {report.counts}; purged {report.purged} old records", end="")
            print(f"; {report.recalls_expired} recalls expired" if report.recalls_expired else "")
            for ns, kept in sorted(report.kept.items()):
                print(f"  {ns}: keeps {kept}")
        elif args.action == "history":
            for entry in store.history(args.namespace, limit=args.limit):
                print(history_line(entry))
        else:
            undo(store, args.targets, args.namespace or "default")


def defences(store: MemoryStore, args: argparse.Namespace) -> None:
    """``distrust``, ``release``, ``quarantined`` and ``undo --writer`` (``memory.defences.distrust``, ``memory.defences.quarantine``)."""
    w, ns = args.writer, args.namespace
    where = f" in {ns}" if ns else ""
    if args.action == "distrust":
        r = store.distrust(w, namespace=ns, action="reset" if args.reset else "remove")
        if not r.total:
            print(f"{w}: nothing to distrust{where} (distrusted before, or nothing left)")
        elif args.reset:
            print(f"{w}: reset {r.reset} memories{where} to Q {store.config.q_init:g} with no visits")
        else:
            print(f"{w}: removed {r.removed} memories{where} (see evolve memory history), dropped {r.dropped} held")
        if r.total:
            print(f"undo with: evolve memory undo --writer {w!r}")
    elif args.action == "release":
        print(f"released {store.release(writer=w, namespace=ns)} memories of {w}{where}")
    elif args.action == "quarantined":
        for item in store.quarantined(ns, w):
            print(f"{item.id}  [{item.namespace}]  {item.meta.get('writer')}  — {item.intent[:60]}")
    else:
        r = store.undo_distrust(w, namespace=ns)
        print(f"{w}: restored {r.removed} memories, gave {r.reset} back their Q and visits, held {r.dropped} again")


def undo(store: MemoryStore, ids: Sequence[str], namespace: str) -> None:
    report = store.restore(list(ids), namespace=namespace)
    print(f"restored {len(report.restored)}: {', '.join(report.restored) or '-'}")
    if report.keepers:
        print(f"merged memories that handed back what they had been given: {', '.join(report.keepers)}")
    for item_id in report.already:
        print(f"{item_id}: already restored or stored")
    for item_id, why in report.refused:
        print(f"{item_id}: refused ({why})")


def history_line(entry: Any) -> str:
    """One removal: when, which memory of which namespace, why, and whether it can be undone."""
    r = entry.removal
    when = dt.datetime.fromtimestamp(r.removed_at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    state = "restored" if entry.restored_at is not None else ("undoable" if entry.restorable else "expired")
    return f"{when}  {entry.id}  {r.item.id}  [{r.item.namespace}]  {state}  {r.reason}  — {r.item.intent[:60]}"


def cmd_memory(args: argparse.Namespace) -> None:
    """``evolve memory ACTION``: find the database (``--spec`` or ``--db``), then do the action."""
    args.db, _ = located(args, f"memory {args.action}")
    if args.action in ("backup", "restore"):
        return backup_or_restore(args)
    if args.action in ACTIONS:
        from connectors import load_chat

        llm = load_chat(args.model) if args.action == "consolidate" and args.model else None
        return cmd_lifecycle(args, llm)
    if args.action in ("stats", "show"):
        return cmd_read(args)
    from connectors import load_embedder

    with MemoryStore(args.db, embedder=load_embedder(args.embedder)) as store:  # export/import embed or check vectors
        if args.action == "export":
            print(f"exported {store.export(args.path, namespace=args.namespace)} items to {args.path}")
        else:
            print(f"imported {store.import_(args.path, writer=args.writer)} items from {args.path}")


def backup_or_restore(args: argparse.Namespace) -> None:
    """``evolve memory backup|restore FILE``: the whole database (memories, prompts, runs, jobs), no embedder needed."""
    from evolve.backup.database import backup, restore

    url = args.db
    if args.action == "backup":
        info = backup(url, args.path, pg_bin=args.pg_bin)
        print(f"backed up {redact_url(url)} to {info.path} in {info.seconds:.2f} s: {info.summary()}")
    else:
        info = restore(args.path, url, force=args.force, pg_bin=args.pg_bin)
        print(f"restored {info.path} into {redact_url(url)} in {info.seconds:.2f} s: {info.summary()}")


HELP = {
    "stats": "counts per namespace and kind, as JSON (SQL only: no embedder is loaded)",
    "show": "the memories with the highest Q, one a line (SQL only)",
    "export": "write memories to a JSONL file: ids, Q-values, visits, timestamps, vectors, bit for bit",
    "import": "read memories from a JSONL file (idempotent by id)",
    "backup": "copy the whole database (memories, prompts, runs, jobs) to a file: SQLite online backup, pg_dump",
    "restore": "restore a backup file into the database, atomically",
    "consolidate": "distil strategies from each task's episodes",
    "prune": "forget under a budget; every removal is logged and can be undone",
    "history": "the removal log, newest first: what went, why, whether it can be undone",
    "undo": "put removed memories back (removal or memory ids), or undo a distrust (--writer)",
    "distrust": "remove (or --reset) what a writer wrote; undo --writer puts it back",
    "release": "let a writer's quarantined memories in",
    "quarantined": "what the trust policy held back",
}
DEFAULTS: dict[str, Any] = {
    "path": None, "targets": (), "namespace": None, "embedder": "minilm", "limit": 20, "force": False, "pg_bin": None,
    "min_size": 3, "model": None, "capacity": None, "merge_similarity": None, "min_visits": 3, "stale_after_days": 30.0,
    "retention_days": 30.0, "recall_retention_days": None, "dry_run": False, "writer": None, "reset": False,
}  # fmt: skip
"""Every action's flags' defaults: an action's namespace holds them all, set to these where it takes no such flag."""


def add_memory_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``evolve memory ACTION [--spec SPEC | --db URL] …``, one subcommand per action."""
    m = sub.add_parser("memory", help="inspect, export and import memories; back up and restore the database; "
                       "consolidate, prune, undo; distrust and release a writer")  # fmt: skip
    actions = m.add_subparsers(dest="action", required=True, metavar="ACTION", help="what to do with the memories")
    p: dict[str, argparse.ArgumentParser] = {}
    for name, text in HELP.items():
        p[name] = actions.add_parser(name, help=text, description=text)
        p[name].set_defaults(func=cmd_memory, **DEFAULTS)
        add_database(p[name])
    for name in ("export", "import"):
        p[name].add_argument("path", type=Path, metavar="FILE", help="the JSONL file")
        p[name].add_argument(
            "--embedder", default="minilm", help="the embedder the store was built with (default minilm)"
        )
    for name in ("backup", "restore"):
        p[name].add_argument("path", type=Path, metavar="FILE", help="the backup file")
        p[name].add_argument(
            "--pg-bin", default=None, metavar="DIR", help="folder of pg_dump/pg_restore (default: PATH)"
        )
    p["restore"].add_argument("--force", action="store_true", help="replace a database that is not empty")
    p["undo"].add_argument("targets", nargs="*", metavar="ID", help="removal ids or memory ids (evolve memory history)")
    for name in ("stats", "show", "export", *ACTIONS):
        p[name].add_argument("--namespace", default=None, metavar="NS",
                             help="only this namespace, e.g. <run>/<agent> (default: all)"
                             if name != "undo" else "the namespace to restore into (default: 'default')")  # fmt: skip
    p["show"].add_argument("--limit", type=count(1), default=20, help="at most this many memories, highest Q first")
    p["history"].add_argument("--limit", type=count(1), default=20, help="at most this many removals, newest first")
    for name in ("stats", "show"):  # they never load the embedder; the flag is accepted, and ignored, one more release
        p[name].add_argument("--embedder", action=Deprecated, note="it is ignored: stats and show load no embedder")
    add_lifecycle_flags(p["consolidate"], p["prune"])
    add_writer_flags(p)


def add_lifecycle_flags(consolidate: argparse.ArgumentParser, prune: argparse.ArgumentParser) -> None:
    consolidate.add_argument("--min-size", type=int, default=3, help="episodes a task needs for a strategy")
    consolidate.add_argument("--model", default=None, help="a chat model writes the strategies (default: by rule)")
    prune.add_argument("--capacity", type=int, default=None, help="the most memories a namespace keeps")
    prune.add_argument("--merge-similarity", type=float, default=None, metavar="COSINE",
                       help="merge near-duplicates above this cosine similarity")  # fmt: skip
    prune.add_argument("--min-visits", type=int, default=3, help="rewards before a memory's Q is trusted")
    prune.add_argument("--stale-after-days", type=float, default=30.0, help="untrusted and not recalled: stale")
    prune.add_argument("--retention-days", type=float, default=30.0, help="how long a removal can be undone")
    prune.add_argument("--recall-retention-days", type=float, default=None, help="drop logged recalls older than this")
    prune.add_argument("--dry-run", action="store_true", help="say what would go, change nothing")


def add_writer_flags(p: dict[str, argparse.ArgumentParser]) -> None:
    """``--writer KIND:NAME`` (e.g. ``tenant:acme``), as each action reads it; ``distrust --reset``."""
    for name, text in (
        ("distrust", "the writer whose memories go, KIND:NAME, e.g. 'tenant:acme' (required)"),
        ("release", "the writer whose held memories to let in, KIND:NAME (required)"),
        ("quarantined", "only this writer's, KIND:NAME"),
        ("undo", "undo a distrust of this writer, KIND:NAME (instead of ids)"),
        ("import", "stamp every memory with this writer, KIND:NAME (their claimed writer is kept)"),
    ):
        p[name].add_argument("--writer", default=None, metavar="KIND:NAME", help=text)
    p["distrust"].add_argument("--reset", action="store_true", help="reset the writer's Q and visits, do not remove")
