"""Q in context: the value a memory earned in the recalls made for one context (a task), read from the
recall log, so a memory that helped one task does not rank high for its look-alikes. The same fold
gives a served tenant its overlay Q on the shared (trained) memories it rated: its ratings move its
own ranking of them, never the shared Q other tenants see.

The log already holds everything: each recall's context, the Q each selected memory had when it was
recalled, and the rewards that followed (``memory_feedback``). Folding those rewards in the order they
were applied with the store's rule, ``Q ← Q + α·(r − Q)``, from the Q the memory had when the context
first recalled it, gives its Q in that context; nothing else is stored, so rewards stay idempotent and
every process reads the same values. Rewards count with weight 1 (``credit="score"`` is not applied).

Example:
    >>> fold([("task-a", "m1", 0.3, -1.0), ("task-a", "m1", 0.3, 1.0), ("task-b", "m1", 0.0, 1.0)], alpha=0.5)
    {'task-a': {'m1': 0.325}, 'task-b': {'m1': 0.5}}
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import Connection, select

from connectors.db import check_chars
from connectors.errors import ConfigError
from memory.config import RetrievalConfig
from memory.database import Database
from memory.schema import feedback, recall_items, recalls
from memory.statements import chunks

MAX_CONTEXT = 200
"""The most characters in a recall context (``memory_recalls.context`` is VARCHAR(200), as task ids are)."""


def fold(rows: Iterable[tuple[str, str, float, float]], *, alpha: float) -> dict[str, dict[str, float]]:
    """(context, memory id, Q when first recalled there, reward) rows in the order applied → Q in context."""
    out: dict[str, dict[str, float]] = {}
    for context, item, q_then, reward in rows:
        values = out.setdefault(context, {})
        q = values.get(item, q_then)
        values[item] = q + min(alpha, 1.0) * (reward - q)
    return out


def context_values(
    conn: Connection, namespace: str, contexts: Sequence[str], *, alpha: float
) -> dict[str, dict[str, float]]:
    """Each context's memories and their Q there (contexts that never recalled a rewarded memory are absent)."""
    rows: list[tuple[str, str, float, float]] = []
    for part in chunks(sorted(set(contexts))):
        query = (
            select(recalls.c.context, recall_items.c.item_id, recall_items.c.q, feedback.c.reward)
            .select_from(
                recalls.join(recall_items, recall_items.c.recall_id == recalls.c.id).join(
                    feedback, feedback.c.recall_id == recalls.c.id
                )
            )
            .where(recalls.c.namespace == namespace, recalls.c.context.in_(part), recall_items.c.rank.is_not(None))
            .order_by(feedback.c.applied_at, feedback.c.id, recall_items.c.item_id)
        )
        rows.extend((r[0], r[1], r[2], r[3]) for r in conn.execute(query))
    return fold(rows, alpha=alpha)


def overlay_values(conn: Connection, namespace: str, shared: str, *, alpha: float) -> dict[str, float]:
    """A tenant's overlay Q on the shared memories it rated: the rewards its recalls in ``namespace`` gave
    memories of ``shared``, folded as ``fold`` does from the Q each had when first recalled there."""
    query = (
        select(recall_items.c.item_id, recall_items.c.q, feedback.c.reward)
        .select_from(
            recalls.join(recall_items, recall_items.c.recall_id == recalls.c.id).join(
                feedback, feedback.c.recall_id == recalls.c.id
            )
        )
        .where(
            recalls.c.namespace == namespace,
            recalls.c.shared == shared,
            recall_items.c.shared.is_(True),
            recall_items.c.rank.is_not(None),
        )
        .order_by(feedback.c.applied_at, feedback.c.id, recall_items.c.item_id)
    )
    return fold((("", r[0], r[1], r[2]) for r in conn.execute(query)), alpha=alpha).get("", {})


def check_contexts(contexts: Sequence[str | None] | None, n: int) -> list[str | None]:
    """One context per query (a non-empty string of at most 200 characters, or None); ConfigError otherwise."""
    if contexts is None:
        return [None] * n
    if isinstance(contexts, str) or len(contexts) != n:
        raise ConfigError(
            f"contexts must be a list of one context (or None) per query: {n} expected, got {contexts!r:.80}"
        )
    for c in contexts:
        if c is not None and not (isinstance(c, str) and c.strip() and len(c) <= MAX_CONTEXT):
            raise ConfigError(
                f"a recall context must be a non-empty string of at most {MAX_CONTEXT} characters, got {c!r:.80}"
            )
        if c is not None:
            check_chars("recall context", c)
    return list(contexts)


def q_in_context(
    db: Database,
    namespace: str,
    contexts: Sequence[str | None],
    cfg: RetrievalConfig,
    *,
    alpha: float,
    shared: str | None = None,
) -> list[dict[str, float]]:
    """Per query, the Q-values that replace the stored ones in its ranking: the tenant's overlay on the
    ``shared`` memories it rated, and the Q its context earned (``RetrievalConfig.context_q``), which
    wins where both speak. Empty when neither applies."""
    named = [c for c in contexts if c is not None] if cfg.context_q else []
    if not named and shared is None:
        return []
    with db.transaction(write=False) as conn:
        overlay = overlay_values(conn, namespace, shared, alpha=alpha) if shared is not None else {}
        values = context_values(conn, namespace, named, alpha=alpha) if named else {}
    return [overlay | (values.get(c, {}) if c is not None else {}) for c in contexts]
