"""What a reward names: the memories its recall selected, checked against the recall log, and the
feedback ids applied before (``memory.learn.rewards`` reads them in the reward's transaction).

A recall id is looked up in the log of its namespace, a ``Recall`` object checked against it; the
process's memo of its recent recalls (``memory.recall.planning.RECENT``) answers for the ids it made, so a
reward costs no unpacking of the log.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
from sqlalchemy import Connection, select

from connectors.errors import ConfigError, StoreError
from memory.recall.log import candidates_of, gone_message, made_at
from memory.recall.planning import RECENT
from memory.storage.items import ID_SELECT, by_key
from memory.storage.records import Recall
from memory.storage.schema import feedback, memory_items, recalls

FEEDBACK_SELECT = select(feedback.c.id)
LOGGED_SELECT = select(recalls.c.id, recalls.c.namespace, recalls.c.candidates)
LOGGED_IN = select(recalls.c.id, recalls.c.namespace)
LOG_WAIT = 2.0
"""Seconds a reward waits for a recall id made that long ago to reach the log (another process's group commit)."""


def feedback_applied(conn: Connection, feedback_ids: Sequence[str]) -> set[str]:
    """Which of these feedback ids were applied before (one query per 5,000 ids)."""
    return {r[0] for r in by_key(conn, FEEDBACK_SELECT, feedback.c.id, list(dict.fromkeys(feedback_ids)))}


def recall_targets(
    conn: Connection, recall: Recall | str, namespace: str | None
) -> tuple[str, str, list[str], np.ndarray]:
    """The recall's id and namespace, and its selected item ids (best first) with their selection
    scores, checked to belong
    to ``namespace``: a recall id is looked up in the log of that namespace (``None``: ``"default"``); a
    ``Recall`` object must be its own namespace's (and ``namespace``'s when given) and match the log.

    A ``Recall`` made with ``record=False`` has no log: its items must then all be memories of its
    namespace (items removed since are skipped later, as for any recall).
    """
    if isinstance(recall, Recall):
        if namespace is not None and recall.namespace != namespace:
            raise StoreError(
                f"recall {recall.id!r} was made in namespace {recall.namespace!r}, not {namespace!r}; "
                "a recall can only reinforce memories of the namespace it was made in"
            )
        logged = logged_recall(conn, recall.id, recall.namespace)
        if logged is not None:
            if tuple(logged[0]) != recall.ids:
                raise StoreError(
                    f"recall {recall.id!r} lists memories {list(recall.ids)!r:.200} but the log selected "
                    f"{logged[0]!r:.200}; pass the Recall that retrieve returned, or its id"
                )
            return recall.id, recall.namespace, logged[0], logged[1]
        foreign = foreign_ids(conn, recall.ids, recall.namespace)
        if foreign:
            raise StoreError(
                f"recall {recall.id!r} (namespace {recall.namespace!r}) lists memories outside its namespace: "
                f"{sorted(foreign)!r:.200}"
            )
        return recall.id, recall.namespace, list(recall.ids), np.asarray(recall.scores, dtype=np.float64)
    if not isinstance(recall, str):
        raise ConfigError(f"reinforce takes a Recall or a recall id (str), got {type(recall).__name__}")
    ns = namespace if namespace is not None else "default"
    logged = logged_recall(conn, recall, ns)
    if logged is None:
        made = made_at(recall)
        if made is not None and time.time() - made < LOG_WAIT:
            raise NotLoggedYet(recall, made)
        raise StoreError(
            gone_message(conn, recall, ns, "reinforced")
            or f"unknown recall id {recall!r} in namespace {ns!r}: no recall with this id was logged there "
            "(pass namespace= for another namespace; recalls made with record=False must be passed as Recall objects; "
            "a recall made just before its process stopped, within MemoryConfig.recall_log_delay, was never logged)"
        )
    return recall, ns, logged[0], logged[1]


class NotLoggedYet(StoreError):
    """A recall id made less than ``LOG_WAIT`` seconds ago that the log does not hold yet: another process's
    store may still be about to commit it (``MemoryConfig.recall_log_delay``); ``memory.learn.rewards`` waits."""

    def __init__(self, recall_id: str, made: float) -> None:
        super().__init__(
            f"unknown recall id {recall_id!r}: made {time.time() - made:.2f} s ago and still not in the log, where the "
            f"store that made it commits it within MemoryConfig.recall_log_delay; its process may have stopped first "
            "(a recall lost so cannot be rated), or it was made with record=False (pass the Recall object)"
        )
        self.made = made


def logged_recall(conn: Connection, recall_id: str, namespace: str) -> tuple[list[str], np.ndarray] | None:
    """The logged selection of a recall of ``namespace`` (ids best first, scores), or None when the
    log has no recall with this id in this namespace."""
    head = [r for r in by_key(conn, LOGGED_SELECT, recalls.c.id, [recall_id]) if r[1] == namespace]
    if not head:
        return None
    return candidates_of(conn, [(recall_id, head[0][2])])[recall_id].selection()


def foreign_ids(conn: Connection, ids: Sequence[str], namespace: str) -> set[str]:
    """Which of these ids belong to memories of another namespace (unknown ids are not foreign)."""
    return {r[0] for r in by_key(conn, ID_SELECT, memory_items.c.id, list(dict.fromkeys(ids))) if r[1] != namespace}


def logged_namespaces(conn: Connection, recalls_: Sequence[Recall | str]) -> dict[str, str]:
    """Recall id → the namespace whose log holds it, for the ids among ``recalls_`` that this process made
    (``memory.recall.planning.RECENT``): one read of ids for a batch (``resolve_recall``)."""
    ids = [r for r in dict.fromkeys(r for r in recalls_ if isinstance(r, str)) if RECENT.get(r) is not None]
    return {r[0]: r[1] for r in by_key(conn, LOGGED_IN, recalls.c.id, ids)} if ids else {}


def resolve_recall(
    conn: Connection, recall: Recall | str, namespace: str | None, logged: Mapping[str, str]
) -> tuple[str, str, list[str], np.ndarray]:
    """``recall_targets``, from this process's memo for a recall id the log holds in the namespace
    looked in (``logged``: ``logged_namespaces``); from the log otherwise (and every error from there)."""
    ns = namespace if namespace is not None else "default"
    memo = RECENT.get(recall) if isinstance(recall, str) and logged.get(recall) == ns else None
    if memo is None:
        return recall_targets(conn, recall, namespace)
    return str(recall), ns, list(memo.ids), memo.scores.copy()
