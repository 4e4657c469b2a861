"""A recall through the store: the queries planned on the mirrors, the selected memories read, the recall logged.

``retrieve`` is ``MemoryStore.retrieve_many``'s work: it asks ``memory.recall.context_q`` for the Q-values the
queries rank by, plans them optimistically on the mirrors as this process last saw them
(``memory.recall.planning``), and in the transaction that logs the recalls (``memory.recall.log``) catches the
mirrors up, plans again if another process wrote meanwhile, and reads every selected memory. Where nobody wrote
since its mirrors were current, it takes no transaction: the memories come from the item cache, or from one
autocommit read on SQLite (``read_outside``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from connectors.errors import StoreError
from memory.config import MemoryConfig, RetrievalConfig
from memory.recall.context_cache import ContextQCache, QInContext
from memory.recall.context_q import check_contexts
from memory.recall.log import RECALL_INSERT, log_recalls, recall_rows
from memory.recall.planning import Plan, Planner, QOver, to_recall
from memory.storage.items import fetch_items
from memory.storage.records import ItemCache, MemoryItem, Recall
from memory.write.checks import check_namespace, check_retrieval, check_shared, check_texts, check_time, new_id

if TYPE_CHECKING:
    from memory.mirror.arrays import NamespaceMirror
    from memory.mirror.sync import MirrorSet
    from memory.storage.database import Database, OpenStore

SELECT_ATTEMPTS = 3  # catch-ups before a recall whose memories keep disappearing gives up


def selected_items(
    conn: Connection, plans: list[Plan], namespaces: tuple[str, str | None], texts: ItemCache
) -> dict[str, MemoryItem]:
    """The selected memories with the Q and visits that scored them; texts from ``texts`` or SQL.

    ``namespaces`` are the recall's own and shared one (or None): each memory is read from the one its
    plan says it came from. Items read from SQL are used as read, then offered to the cache: the cache
    is bounded, so reading them back from it would lose those it evicted at once (any batch larger than
    the cache). A selected memory SQL no longer holds is left out (the caller re-plans).
    """
    values = selection(plans)
    base = in_cache(values, texts)
    for shared, namespace in ((False, namespaces[0]), (True, namespaces[1])):
        missing = [i for i, v in values.items() if i not in base and v[2] == shared]
        if missing and namespace is not None:
            fetched = fetch_items(conn, missing, namespace)
            base.update((item.id, item) for item in fetched)
            texts.put(fetched)
    return revalued_all(values, base)


def read_outside(
    db: Database, plans: list[Plan], namespaces: tuple[str, str | None], texts: ItemCache
) -> dict[str, MemoryItem] | None:
    """``selected_items`` outside any transaction: from the item cache, and those it lacks in one autocommit
    statement on the kept connection (a transaction's begin and commit were about half of what a recall of
    uncached memories spent on SQL; all cached, no statement at all). Safe where the caller planned on mirrors
    at the generation committed now: a memory's texts never change, its Q and visits come from the mirror.
    None where there is no such connection, the read failed, or a selected memory is gone (removed by another
    process since): the caller reads in a transaction and plans again there."""
    conn = db.outside_transaction()
    if conn is None:
        return None
    try:
        found = selected_items(conn, plans, namespaces, texts)
    except DBAPIError:
        return None
    finally:
        if conn.in_transaction():  # only the driver's cursor was meant to run: leave no transaction open
            conn.rollback()
    return found if all(i in found for p in plans for i in p.selected_ids) else None


def in_cache(values: dict[str, tuple[float, int, bool]], texts: ItemCache) -> dict[str, MemoryItem]:
    return {item_id: cached for item_id in values if (cached := texts.get(item_id)) is not None}


def revalued_all(values: dict[str, tuple[float, int, bool]], base: dict[str, MemoryItem]) -> dict[str, MemoryItem]:
    """The memories of ``base`` with the Q and visits ``values`` gives them (those missing from ``base`` left out)."""
    return {
        item_id: revalued(base[item_id], q, visits) for item_id, (q, visits, _) in values.items() if item_id in base
    }


def selection(plans: list[Plan]) -> dict[str, tuple[float, int, bool]]:
    """Each selected memory's id → the Q and visits that scored it, and whether it came from the shared namespace."""
    values: dict[str, tuple[float, int, bool]] = {}
    for p in plans:
        for i in p.selected:
            values[str(p.ids[i])] = (float(p.stored_q[i]), int(p.visits[i]), bool(p.shared[i]))
    return values


def revalued(item: MemoryItem, q: float, visits: int) -> MemoryItem:
    """``item`` with ``q`` and ``visits`` and a meta of its own (``dataclasses.replace`` at a third of its cost)."""
    return MemoryItem(**{**item.__dict__, "q": q, "visits": visits, "meta": dict(item.meta)})


def select_memories(
    conn: Connection,
    mirrors: MirrorSet,
    namespaces: tuple[str, str | None],
    planner: Planner,
    plans: list[Plan] | None,
    texts: ItemCache,
    *,
    view: Callable[[Connection, str], NamespaceMirror] | None = None,
    q_over: Callable[[Connection, int], list[QOver]] | None = None,
) -> tuple[list[Plan], dict[str, MemoryItem]]:
    """Catch the mirrors up, plan again when another process wrote since ``plans`` were made (or when there
    are none yet), and read every selected memory: the plans and the memories a recall returns.
    ``namespaces`` are the recall's own namespace and the shared one it searches too (or None); ``view``
    gives the mirror searched for a namespace (default: the store's own; ``MirrorSet.snapshot`` for an audit);
    ``q_over``, the Q-values in context at a generation, read in ``conn`` whenever the queries are planned here.

    A recall returns exactly what it selected: when a selected memory is gone from SQL (removed by
    another process after the catch-up, possible under READ COMMITTED), the mirrors catch up again and
    the queries are planned again.
    """
    namespace, shared = namespaces
    view = view or mirrors.get
    for attempt in range(SELECT_ATTEMPTS):
        seen = mirrors.generation
        mirrors.sync(conn)
        if plans is None or attempt or mirrors.generation != seen:
            if q_over is not None:
                planner = replace(planner, q_in_context=q_over(conn, mirrors.generation))
            plans = planner(view(conn, namespace), None if shared is None else view(conn, shared))
        found = selected_items(conn, plans, namespaces, texts)
        if all(i in found for p in plans for i in p.selected_ids):
            return plans, found
    raise StoreError(
        f"recall in namespace {namespace!r}: selected memories kept being removed by other processes "
        f"({SELECT_ATTEMPTS} attempts); try again"
    )


def retrieve(
    opened: OpenStore,
    embed: Callable[[list[str]], np.ndarray],
    queries: Sequence[str],
    *,
    config: MemoryConfig,
    recall_config: RetrievalConfig | None,
    namespace: str,
    contexts: Sequence[str | None] | None,
    shared: str | None,
    as_of: float | None,
    record: bool,
    rng: np.random.Generator,
    texts: ItemCache,
    folded: ContextQCache,
) -> list[Recall]:
    """``MemoryStore.retrieve_many``: the arguments checked, the queries embedded (``embed``), planned and
    logged under the store's lock (``recall_config`` None: ``config.retrieval``; ``texts``: the item cache;
    ``folded``: the Q-values in context folded at the store's generation).

    Optimistic: the queries are planned on the mirrors as this process last saw them, with the Q-values in
    context kept for that generation, and checked in the transaction that logs the recalls (read-only if none);
    planned again, with the Q-values read in it, only if another process wrote (or they were not kept). A recall
    planned on mirrors no process has written past (one autocommit read of the generation,
    ``Database.generation_now``) runs no transaction at all: its memories come from the item cache and one
    autocommit read (``read_outside``), and its log row waits for the group commit like any other. An audit
    (``as_of``) plans on a copy read from SQL of the memories valid then, never from the item cache.
    """
    cfg = check_retrieval(recall_config if recall_config is not None else config.retrieval)
    queries = check_texts(queries, "queries", single="use retrieve")
    namespace, contexts = check_namespace(namespace), check_contexts(contexts, len(queries))
    shared, as_of = check_shared(shared, namespace), check_time(as_of, "as_of")
    if not queries:
        return []
    vecs = embed(queries)
    mirrors, names = opened.mirrors, (namespace, shared)
    wanted = QInContext(
        namespace, contexts, cfg, config.alpha, folded, shared=shared, q_init=config.q_init,
        schedule=config.alpha_schedule, floor=config.alpha_floor,
    )  # fmt: skip
    with opened.locked():
        own = wanted.cached(mirrors.generation)
        planner, plans, view = Planner(vecs, cfg, rng, own or ()), None, None
        if as_of is not None:
            view, texts = partial(mirrors.snapshot, as_of=as_of), ItemCache(0)
        elif own is not None:
            plans = planner(*[opened.mirror(n) for n in names if n is not None])
        deferred = record and opened.log_delay > 0 and opened.db.separate_writes and not opened.db.read_only
        found = None
        if (
            plans is not None
            and view is None
            and (deferred or not record)
            and opened.db.generation_now() == mirrors.generation
        ):
            found = read_outside(opened.db, plans, names, texts)
        if plans is None or found is None:
            with opened.db.transaction(write=record and not deferred, deferred=not deferred) as conn:
                plans, found = select_memories(
                    conn, mirrors, names, planner, plans, texts, view=view, q_over=wanted.read
                )
                out = recalls(queries, plans, found, contexts, namespace, shared)
                if record and not deferred:
                    log_recalls(conn, out, plans, cfg, mirrors.generation, as_of=as_of)
        else:  # planned on current mirrors, every memory cached or read in one statement: no transaction at all
            out = recalls(queries, plans, found, contexts, namespace, shared)
        if deferred:
            opened.defer(RECALL_INSERT, recall_rows(out, plans, cfg, mirrors.generation, as_of=as_of))
        return out


def recalls(
    queries: Sequence[str],
    plans: list[Plan],
    found: dict[str, MemoryItem],
    contexts: Sequence[str | None],
    namespace: str,
    shared: str | None,
) -> list[Recall]:
    """One ``Recall`` per query, from its plan and the selected memories found."""
    return [
        to_recall(new_id(), namespace, q, p, found, c, shared) for q, p, c in zip(queries, plans, contexts, strict=True)
    ]
