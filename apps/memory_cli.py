"""``evolve memory consolidate|prune|history|undo|distrust|release|quarantined``: the memory lifecycle by hand
(DESIGN §10) and the defences against a writer (``memory.trust``, issue 40).

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
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import inspect, select

from connectors import EvolveError, make_engine
from connectors.chat import ChatModel
from connectors.db import default_url, sqlite_path
from connectors.redact import redact_url
from memory import MemoryConfig, MemoryStore
from memory.config import DAY, ForgetConfig
from memory.schema import memory_items, read_state

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


def open_store(url: str | None, config: MemoryConfig | None = None) -> MemoryStore:
    """An existing store, opened with a stand-in for the embedder recorded in it (``StoredEmbedder``)."""
    url = url or default_url()
    path = sqlite_path(url) if url.startswith("sqlite") else None
    if path is not None and not path.is_file():
        raise EvolveError(f"no database at {path} (evolve memory works on an existing store; check --db)")
    engine = make_engine(url)
    try:
        if not inspect(engine).has_table(memory_items.name):
            raise EvolveError(f"{redact_url(url)} holds no memory store (no {memory_items.name} table); check --db")
        with engine.connect() as conn:
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
    with store.engine.connect() as conn:
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


LIFECYCLE_FLAGS = {
    "min_size": 3,
    "model": None,
    "capacity": None,
    "merge_similarity": None,
    "min_visits": 3,
    "stale_after_days": 30.0,
    "retention_days": 30.0,
    "recall_retention_days": None,
    "dry_run": False,
}
OTHER_FLAGS = {"embedder": "minilm", "force": False, "pg_bin": None}  # export/import, backup/restore only
TRUST_FLAGS = {
    "writer": (None, ("distrust", "release", "quarantined", "undo", "import")),
    "reset": (False, ("distrust",)),
}


def refuse_unused(args: argparse.Namespace) -> None:
    """A flag given to an ``evolve memory`` action that does not use it is an error, never silently dropped."""
    unused = LIFECYCLE_FLAGS if args.action not in ACTIONS else OTHER_FLAGS
    unused = {**unused, **{k: default for k, (default, takers) in TRUST_FLAGS.items() if args.action not in takers}}
    given = [f"--{k.replace('_', '-')}" for k, default in unused.items() if getattr(args, k, default) != default]
    if given:
        raise EvolveError(f"evolve memory {args.action} does not take {', '.join(given)}")


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
    """``distrust``, ``release``, ``quarantined`` and ``undo --writer`` (``memory.distrust``, ``memory.quarantine``)."""
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


def add_arguments(m: argparse.ArgumentParser) -> None:
    """The lifecycle actions' flags on ``evolve memory``'s parser."""
    m.add_argument("--min-size", type=int, default=3, help="consolidate: episodes a task needs for a strategy")
    m.add_argument("--model", default=None, help="consolidate: a chat model writes the strategies (default: by rule)")
    m.add_argument("--capacity", type=int, default=None, help="prune: the most memories a namespace keeps")
    m.add_argument("--merge-similarity", type=float, default=None, help="prune: merge near-duplicates above it")
    m.add_argument("--min-visits", type=int, default=3, help="prune: rewards before a memory's Q is trusted")
    m.add_argument("--stale-after-days", type=float, default=30.0, help="prune: untrusted and not recalled: stale")
    m.add_argument("--retention-days", type=float, default=30.0, help="prune: how long a removal can be undone")
    m.add_argument(
        "--recall-retention-days", type=float, default=None, help="prune: drop logged recalls older than this"
    )
    m.add_argument("--dry-run", action="store_true", help="prune: say what would go, change nothing")
    m.add_argument(
        "--writer",
        default=None,
        help="distrust, release, undo: the writer, KIND:NAME (e.g. 'tenant:acme'); quarantined: only its; "
        "import: stamp every memory with it (their claimed writer kept)",
    )
    m.add_argument("--reset", action="store_true", help="distrust: reset the writer's Q and visits, do not remove")
