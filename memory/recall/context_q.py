"""Q in context: the value a memory earned in the recalls made for one context (a task), read from the
recall log, so a memory that helped one task does not rank high for its look-alikes. The same fold
gives a served tenant its overlay Q on the shared (trained) memories it rated: its ratings move its
own ranking of them, never the shared Q other tenants see.

The log already holds everything: each recall's context, the Q each selected memory had when it was
recalled, and the rewards that followed (``memory_feedback``). Folding those rewards in the order they
were applied with the store's rule, ``Q ← Q + α·(r − Q)``, from the Q the memory had when the context
first recalled it, gives its Q in that context; nothing else is stored, so rewards stay idempotent and
every process reads the same values. Rewards count with weight 1 (``credit="score"`` is not applied).
A store keeps what it folded for the generation it last read (``ContextQCache``): recalls between two
writes read none of it from SQL again.

Where a context has not rewarded a memory, ``RetrievalConfig.context_start`` says what its Q there is:
``"global"``, its stored Q, so a memory recalled for a look-alike and failed there (Q −0.3) ranks below
a less similar one for its own task before that task ever recalled it; ``"neutral"``, ``q_init``, and
its fold there starts from ``q_init`` too: only what a context rewarded moves a memory's rank in it.

When the log's retention expired old recalls (``memory.recall.expiry``), the fold of their rewards was
kept (``memory_recall_summary``) and the fold goes on from it with the rewards applied since (it was
folded from the Q that ranked each memory then: under ``"neutral"``, ``q_init``, or the tenant's overlay
Q of a shared memory it rated).

With ``MemoryConfig.alpha_schedule="visits"`` the fold's step is ``max(floor, 1/(n + 2))`` where n counts
the rewards that memory had in that context (in the tenant's overlay: the tenant's rewards of it) before
this one (``memory.learn.rule.alpha_for``), not its visits anywhere. The summary of expired recalls keeps
values, not counts: a memory whose fold goes on from one is taken to have had one reward there (the least
it had); ``memory.recall.expiry`` itself still folds what expires at the constant α.

Example:
    >>> fold([("task-a", "m1", 0.3, -1.0), ("task-a", "m1", 0.3, 1.0), ("task-b", "m1", 0.0, 1.0)], alpha=0.5)
    {'task-a': {'m1': 0.325}, 'task-b': {'m1': 0.5}}
    >>> fold([("a", "m1", 0.0, 1.0), ("a", "m1", 0.0, 1.0), ("a", "m1", 0.0, -1.0)], alpha=0.3,
    ...      schedule="visits", floor=0.0)   # the mean of (0, 1, 1, −1): Q₀ = 0 counts once
    {'a': {'m1': 0.25}}
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Select, func, select

from connectors.db import check_chars
from connectors.errors import ConfigError
from memory.learn.rule import alpha_for
from memory.recall.log import candidates_of, expired_through
from memory.storage.schema import feedback, recall_summary, recalls, resets
from memory.storage.statements import chunks

MAX_CONTEXT = 200
"""The most characters in a recall context (``memory_recalls.context`` is VARCHAR(200), as task ids are)."""


def fold(
    rows: Iterable[tuple[str, str, float, float]],
    *,
    alpha: float,
    start: Mapping[str, Mapping[str, float]] | None = None,
    first: float | None = None,
    schedule: str = "constant",
    floor: float = 0.0,
) -> dict[str, dict[str, float]]:
    """(context, memory id, Q when first recalled there, reward) rows in the order applied → Q in context;
    ``start``: the Q-values folded so far (from rewards applied before ``rows``); ``first``: the Q a
    memory's fold starts from in a context that has none for it (None: the Q it was recalled with there);
    ``schedule`` and ``floor``: the step's (``memory.learn.rule.alpha_for``), n counted per context and memory.

    After rewards r_1..r_n from a start s the fold is (1−α)^n·s + Σ_i α·(1−α)^(n−i)·r_i (α capped at 1);
    under ``"visits"`` with ``floor = 0`` it is (s + Σ_i r_i)/(n + 1).
    """
    out: dict[str, dict[str, float]] = {context: dict(values) for context, values in (start or {}).items()}
    seen = {(context, item): 1 for context, values in out.items() for item in values}
    fold_onto(out, seen, rows, alpha=alpha, first=first, schedule=schedule, floor=floor)
    return out


def fold_onto(
    out: dict[str, dict[str, float]],
    seen: dict[tuple[str, str], int],
    rows: Iterable[tuple[str, str, float, float]],
    *,
    alpha: float,
    first: float | None = None,
    schedule: str = "constant",
    floor: float = 0.0,
) -> None:
    """``fold``'s step, in place: ``rows`` folded onto the values ``out`` holds, ``seen`` counting the rewards
    each (context, memory) has had (what ``"visits"`` steps by); the same operations in the same order as one
    fold of every row, so a fold carried on from where it stood equals the fold of all rows, bit for bit."""
    rows = list(rows)
    counts = []  # the rewards each row's memory had in its context before this one
    for context, item, _, _ in rows:
        counts.append(seen.get((context, item), 0))
        seen[(context, item)] = counts[-1] + 1
    if schedule == "constant":  # what alpha_for gives, without NumPy's cost per call on a reward's few rows
        steps = [float(min(alpha, 1.0))] * len(rows)
    else:
        steps = alpha_for(counts, alpha=min(alpha, 1.0), schedule=schedule, floor=floor).tolist()
    for (context, item, q_then, reward), step in zip(rows, steps, strict=True):
        values = out.setdefault(context, {})
        q = values.get(item, q_then if first is None else first)
        values[item] = q + step * (reward - q)


def context_values(
    conn: Connection,
    namespace: str,
    contexts: Sequence[str],
    *,
    alpha: float,
    first: float | None = None,
    schedule: str = "constant",
    floor: float = 0.0,
) -> dict[str, dict[str, float]]:
    """Each context's memories and their Q there (contexts that never recalled a rewarded memory are absent);
    ``first``, ``schedule``, ``floor``: as ``fold``'s."""
    start, rows, _ = context_rewards(conn, namespace, contexts)
    return fold(rows, alpha=alpha, start=start, first=first, schedule=schedule, floor=floor)


def context_rewards(
    conn: Connection, namespace: str, contexts: Sequence[str]
) -> tuple[dict[str, dict[str, float]], list[tuple[str, str, float, float]], float]:
    """What ``context_values`` folds: what expired recalls left folded, the rewards since as ``fold`` rows in the
    order applied, and when the newest of them was applied (-inf: none)."""
    start: dict[str, dict[str, float]] = {}
    rows: list[tuple[str, str, float, float]] = []
    newest = -math.inf
    reset = reset_since(conn, namespace)
    for part in chunks(sorted(set(contexts))):
        start.update(forget_reset(folded(conn, namespace, "context", part), reset))
        heads = rewarded(conn, namespace).where(recalls.c.context.in_(part))
        for context, _, reward, c, at, _ in heads_of(conn, heads):
            newest = max(newest, at)
            rows.extend((context, item, q, reward) for item, q in c.selected_where(None) if at > reset.get(item, -1.0))
    return start, rows, newest


def overlay_values(
    conn: Connection, namespace: str, shared: str, *, alpha: float, schedule: str = "constant", floor: float = 0.0
) -> dict[str, float]:
    """A tenant's overlay Q on the shared memories it rated: the rewards its recalls in ``namespace`` gave
    memories of ``shared``, folded as ``fold`` does from the Q each had when first recalled there."""
    return OverlayFold.read(conn, namespace, shared, alpha=alpha, schedule=schedule, floor=floor).values


@dataclass
class OverlayFold:
    """A tenant's overlay fold (``overlay_values``) and where it stands, so it goes on from there: the rewards
    applied since are read and folded onto it (``advance``) instead of every reward again.

    It goes on only while what it started from holds: the same expiry (``through``), the same distrust resets,
    and every reward up to its ``cursor`` (when applied, then the reward's id: the fold's order) already in
    it — a reward that another process committed later with an earlier time is counted (``rewards``) and makes
    it fold everything again, as a changed expiry or reset does.
    """

    values: dict[str, float]
    seen: dict[tuple[str, str], int]
    cursor: tuple[float, str] | None
    rewards: int
    through: float | None
    reset: dict[str, float]
    alpha: float
    schedule: str
    floor: float

    @classmethod
    def read(
        cls, conn: Connection, namespace: str, shared: str, *, alpha: float, schedule: str, floor: float
    ) -> OverlayFold:
        """The fold of every reward (after what expired recalls left folded)."""
        reset = reset_since(conn, shared)
        start = forget_reset({"": folded(conn, namespace, "overlay", [shared]).get(shared, {})}, reset)[""]
        state = cls(dict(start), {("", item): 1 for item in start}, None, 0, expired_through(conn, namespace), reset,
                    alpha, schedule, floor)  # fmt: skip
        state._fold(conn, namespace, shared)
        return state

    def advance(self, conn: Connection, namespace: str, shared: str) -> OverlayFold:
        """This fold carried on to what ``conn`` sees: the rewards after the cursor folded onto it, or, when
        what it started from changed, a fold of everything read again."""
        r, f = recalls.c, feedback.c
        same = expired_through(conn, namespace) == self.through and reset_since(conn, shared) == self.reset
        if same and self.cursor is not None:
            at, last = self.cursor
            upto = (f.applied_at < at) | ((f.applied_at == at) & (f.id <= last))
            query = select(func.count()).select_from(recalls.join(feedback, f.recall_id == r.id))
            query = query.where(r.namespace == namespace, r.shared == shared, upto)
            if self.through is not None:
                query = query.where(f.applied_at > self.through)
            same = conn.execute(query).scalar_one() == self.rewards
        if not same:
            return OverlayFold.read(conn, namespace, shared, alpha=self.alpha, schedule=self.schedule, floor=self.floor)
        self._fold(conn, namespace, shared)
        return self

    def _fold(self, conn: Connection, namespace: str, shared: str) -> None:
        f = feedback.c
        heads = rewarded(conn, namespace).where(recalls.c.shared == shared)
        if self.cursor is not None:
            at, last = self.cursor
            heads = heads.where((f.applied_at > at) | ((f.applied_at == at) & (f.id > last)))
        rows: list[tuple[str, str, float, float]] = []
        for _, _, reward, c, at, fid in heads_of(conn, heads):
            rows.extend(("", item, q, reward) for item, q in c.selected_where(True) if at > self.reset.get(item, -1.0))
            self.cursor, self.rewards = (at, fid), self.rewards + 1
        out = {"": dict(self.values)}  # values given out before stay as they were
        fold_onto(out, self.seen, rows, alpha=self.alpha, schedule=self.schedule, floor=self.floor)
        self.values = out[""]


def reset_since(conn: Connection, namespace: str) -> dict[str, float]:
    """The memories of ``namespace`` a distrust reset and no undo gave back (``memory.defences.distrust``): id → when.
    Rewards they got before then no longer count in any context or overlay; an undo brings them back."""
    r = resets.c
    query = select(r.item_id, func.max(r.reset_at)).where(r.namespace == namespace, r.undone_at.is_(None))
    return {str(item): float(at) for item, at in conn.execute(query.group_by(r.item_id))}


def forget_reset(values: dict[str, dict[str, float]], reset: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """Folded values without the memories reset since (what expired recalls left folded predates the reset)."""
    if not reset:
        return values
    return {key: {i: q for i, q in items.items() if i not in reset} for key, items in values.items()}


def rewarded(conn: Connection, namespace: str) -> Select[Any]:
    """The rewards given to recalls of ``namespace`` that are still to fold (applied after what expired
    recalls left folded), in the order applied: (context, recall id, reward, candidates, applied at, reward id)."""
    f = feedback.c
    query = (
        select(recalls.c.context, recalls.c.id, f.reward, recalls.c.candidates, f.applied_at, f.id)
        .select_from(recalls.join(feedback, feedback.c.recall_id == recalls.c.id))
        .where(recalls.c.namespace == namespace)
        .order_by(feedback.c.applied_at, feedback.c.id)
    )
    through = expired_through(conn, namespace)
    return query if through is None else query.where(feedback.c.applied_at > through)


def heads_of(conn: Connection, query: Select[Any]) -> Iterator[tuple[Any, str, float, Any, float, str]]:
    """``query``'s rows (``rewarded``'s columns) with each recall's ``memory.recall.log.Candidates`` in place of its
    stored candidates."""
    rows = conn.execute(query).all()
    found = candidates_of(conn, list({r[1]: r[3] for r in rows}.items()))
    return ((r[0], r[1], float(r[2]), found[r[1]], float(r[4]), str(r[5])) for r in rows)


def folded(conn: Connection, namespace: str, kind: str, keys: Sequence[str]) -> dict[str, dict[str, float]]:
    """What expired recalls left folded (``memory.recall.expiry``): key (a context, a shared namespace) →
    memory id → its Q there."""
    s = recall_summary.c
    query = select(s.key, s.item_id, s.value).where(s.namespace == namespace, s.kind == kind, s.key.in_(list(keys)))
    out: dict[str, dict[str, float]] = {}
    for key, item, value in conn.execute(query):
        out.setdefault(key, {})[item] = float(value)
    return out


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
