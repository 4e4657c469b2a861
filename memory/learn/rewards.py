"""Applying rewards: the Q update as one SQL statement per batch, made idempotent by feedback ids.

``Q ← Q + α·w·(r − Q)`` and ``visits += 1`` are computed by the database (``q = q + :rate * (:reward
- q)``), never from a value read into Python first, so concurrent writers never lose an update.

With ``MemoryConfig.credit_depth > 0`` a reward also reaches the memories that were in context when
the recalled ones were written (``memory.learn.provenance``), each at ``min(1, α·w)`` with the weight
``memory.learn.credit.traced_credit`` gives it (``w = (γλ)^d`` for an ancestor ``d`` edges up; the worked
example is in ``memory.learn.credit``), in the same statement, without ``visits += 1``.

With ``MemoryConfig.alpha_schedule="visits"`` the step is ``min(1, max(floor, 1/(visits + 2))·w)``
(``memory.learn.rule.alpha_for``), also computed by the database, from the row's ``visits`` before this reward.

``reinforcements`` builds the entries that reward the recalls one answer used (the loop's episodes,
served responses, LangChain runs): one feedback id per recall, ``<answer's feedback id>/<recall id>``.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from sqlalchemy import Connection, Float, bindparam, case, cast, insert, update

from connectors.errors import ConfigError
from memory.learn.credit import traced_credit
from memory.learn.provenance import ancestors
from memory.learn.rule import alpha_for, credit_weights
from memory.learn.targets import LOG_WAIT, NotLoggedYet, feedback_applied, logged_namespaces, resolve_recall
from memory.recall.planning import RECENT
from memory.storage.items import read_values
from memory.storage.records import Recall
from memory.storage.schema import bump, feedback, memory_items
from memory.storage.statements import execute_many
from memory.write.checks import (
    MAX_FEEDBACK_ID,
    MAX_VALUE,
    as_list,
    check_feedback_id,
    check_id,
    check_namespace,
    check_reward,
    fit_id,
    new_ids,
)

if TYPE_CHECKING:
    from memory.config import MemoryConfig
    from memory.recall.context_cache import ContextQCache
    from memory.storage.database import OpenStore

LOG_POLL_S = 0.02
"""Seconds between two looks for a recall id that another process's store has yet to log."""


class Reinforcement(NamedTuple):
    """One entry of ``MemoryStore.reinforce_many``: a reward for the memories one recall selected.

    Attributes:
        recall: the ``Recall`` or its id (looked up in ``namespace``).
        reward: the reward that followed.
        feedback_id: the idempotency key: a feedback id applied before updates nothing (None: a fresh one).
        namespace: where the recall was made (None: ``reinforce_many``'s ``namespace=``, else ``"default"``).
        applied_as: older keys of the same feedback (``reinforcements``' legacy form): when one of them
            was applied, this entry was too, and it updates nothing.

    Example:
        >>> Reinforcement("r1", 1.0, "answer-7/r1", "team/solver").feedback_id
        'answer-7/r1'
    """

    recall: Recall | str
    reward: float
    feedback_id: str | None = None
    namespace: str | None = None
    applied_as: tuple[str, ...] = ()


def reinforcements(recalls: Iterable[tuple[str, str | None]], reward: float, feedback_id: str) -> list[Reinforcement]:
    """The ``reinforce_many`` entries that give ``reward`` to every recall one answer used.

    ``recalls`` are ``(recall id, namespace)`` pairs, in the order the answer made them; ``feedback_id``
    is the answer's own key (an episode id, ``<response id>:<key>``, ``<run id>:<key>``). Each recall's
    key is ``<feedback_id>/<recall id>``, shortened with a hash (``fit_id``) when longer than a feedback
    key may be: the same key on every call, so a repeated or resumed answer rewards nothing twice.

    Before issue 19 the loop keyed its episodes' recalls ``<episode id>:<recall id>`` (served ratings and
    LangChain runs used the form above already): each entry carries that older key in ``applied_as``, so
    a batch rewarded under it before an upgrade is not rewarded again after.

    Example:
        >>> entries = reinforcements([("r1", "team/solver"), ("r2", None)], 1.0, "answer-7")
        >>> [(e.recall, e.feedback_id, e.namespace, e.applied_as) for e in entries]
        [('r1', 'answer-7/r1', 'team/solver', ('answer-7:r1',)), ('r2', 'answer-7/r2', None, ('answer-7:r2',))]
    """
    return [
        Reinforcement(
            recall_id,
            reward,
            fit_id(f"{feedback_id}/{recall_id}", MAX_FEEDBACK_ID),
            namespace,
            (fit_id(f"{feedback_id}:{recall_id}", MAX_FEEDBACK_ID),),
        )
        for recall_id, namespace in recalls
    ]


# The TD rule computed by the database from the row's current Q (never from a value read first).
# ``b_visit`` is 1 for a memory the recall selected and 0 for an ancestor credited through provenance
# (``memory.learn.credit``): ``visits`` keeps meaning "times recalled". One statement for both, so a batch's
# updates run in the order planned, exactly as the same reinforce calls one after another would.
# The new Q is kept within ±MAX_VALUE: from q = -9.95e10 and a reward of 1e12 at α = 1 the rule's
# rounding gave 1e12 + 0.0001, a Q that export and the checks refuse (found by a property test).
def q_update(rate: Any) -> Any:
    """The UPDATE applying ``Q ← Q + rate·(r − Q)`` and ``visits += b_visit`` to one memory."""
    td = memory_items.c.q + rate * (bindparam("b_reward") - memory_items.c.q)
    return (
        update(memory_items)
        .where(memory_items.c.id == bindparam("b_item"), memory_items.c.namespace == bindparam("b_ns"))
        .values(
            q=case((td > MAX_VALUE, MAX_VALUE), (td < -MAX_VALUE, -MAX_VALUE), else_=td),
            visits=memory_items.c.visits + bindparam("b_visit"),
            updated_gen=bindparam("b_gen"),
            updated_at=bindparam("b_at"),
        )
    )


Q_UPDATE = q_update(bindparam("b_rate"))
# alpha_schedule="visits": min(1, max(floor, 1/(n + 2))·w) from the row's visits n (SET reads the row as it was
# before this statement changed it), in the operations' order of ``alpha_for`` so both round alike.
_STEP = 1.0 / (cast(memory_items.c.visits, Float) + 2.0)
_FLOORED = case((_STEP < bindparam("b_floor", type_=Float), bindparam("b_floor", type_=Float)), else_=_STEP)
_WEIGHTED = _FLOORED * bindparam("b_weight", type_=Float)
Q_UPDATE_VISITS = q_update(case((_WEIGHTED > 1.0, 1.0), else_=_WEIGHTED))
FEEDBACK_INSERT = insert(feedback)
# On SQLite the generation is bumped and read in one statement (``apply_updates``).


def check_entries(items: Sequence[Reinforcement]) -> list[Reinforcement]:
    """Validate ``Reinforcement``s before anything is written.

    Plain ``(recall, reward[, feedback_id[, namespace[, applied_as]]])`` tuples, the form before 0.2.0,
    are read the same way with a ``DeprecationWarning``, until 0.3.0.
    """
    out: list[Reinforcement] = []
    tuples = False
    for i, entry in enumerate(as_list(items, "reinforce_many: items")):
        if not isinstance(entry, (tuple, list)) or len(entry) not in (2, 3, 4, 5):
            raise ConfigError(
                f"feedback[{i}] must be a Reinforcement(recall, reward, feedback_id, namespace), got {entry!r:.120}"
            )
        tuples = tuples or not isinstance(entry, Reinforcement)
        if isinstance(entry[0], str):
            check_id(f"feedback[{i}] recall id", entry[0])
        fid = entry[2] if len(entry) >= 3 else None
        ns = entry[3] if len(entry) >= 4 else None
        older = entry[4] if len(entry) == 5 else ()
        if not isinstance(older, (tuple, list)):
            raise ConfigError(f"feedback[{i}] applied_as must be a tuple of feedback ids, got {older!r:.120}")
        out.append(Reinforcement(
            entry[0],
            check_reward(entry[1], f"feedback[{i}]"),
            None if fid is None else check_feedback_id(fid),
            None if ns is None else check_namespace(ns),
            tuple(check_feedback_id(o) for o in older),
        ))  # fmt: skip
    if tuples:
        warnings.warn(
            "MemoryStore.reinforce_many takes Reinforcement(recall, reward, feedback_id, namespace) entries "
            "(`from memory import Reinforcement`); plain tuples are deprecated and stop working in 0.3.0",
            DeprecationWarning,
            stacklevel=4,  # check_entries <- reinforce <- MemoryStore.reinforce_many <- the caller
        )
    return out


@dataclass
class Updates:
    """One batch of Q updates: a parameter row per (feedback, item) and a row per new feedback id."""

    params: list[dict[str, Any]] = field(default_factory=list)
    feedback_rows: list[dict[str, Any]] = field(default_factory=list)
    statement: Any = Q_UPDATE  # Q_UPDATE_VISITS under alpha_schedule="visits" (rows carry b_weight, b_floor)
    recalls: list[tuple[Recall | str, str]] = field(default_factory=list)  # each feedback row's recall, namespace


class Target(NamedTuple):
    """One reinforcement resolved: its feedback key and reward, and the memories its recall selected."""

    feedback_id: str
    reward: float
    namespace: str
    item_ids: list[str]
    weights: np.ndarray


def plan_updates(
    conn: Connection,
    entries: list[Reinforcement],
    *,
    alpha: float,
    credit: str,
    namespace: str | None,
    depth: int = 0,
    decay: float = 0.0,
    schedule: str = "constant",
    floor: float = 0.0,
) -> Updates:
    """Resolve recalls to items and rates ``min(1, α·w)``, skipping feedback ids already applied (under
    their own id or one of their ``applied_as``). With ``schedule="visits"`` α is each memory's
    ``max(floor, 1/(visits + 2))`` (``memory.learn.rule.alpha_for``), left to the database to compute from
    the row's visits: the rows carry ``w`` and ``floor`` instead of a rate.

    Recall ids are looked up in the entry's namespace, else ``namespace``, else ``"default"``;
    ``Recall`` objects in their own (``memory.learn.targets.recall_targets``); every update is bound to the
    recall's namespace as well. With ``depth > 0`` and ``decay`` (γλ) > 0, the ancestors of the
    selected memories along provenance (``memory.learn.provenance``) are credited too, at ``min(1, α·w)``
    with ``w`` from ``memory.learn.credit.traced_credit`` (its docstring has the rule and a worked example),
    without counting a visit; the selected memories keep exactly their update of ``depth = 0``.
    """
    alpha_for(0, alpha=alpha, schedule=schedule, floor=floor)  # a ConfigError for an unknown schedule, first
    plan = Updates(statement=Q_UPDATE_VISITS if schedule == "visits" else Q_UPDATE)
    keys = [e.feedback_id for e in entries if e.feedback_id is not None]
    seen = feedback_applied(conn, keys + [old for e in entries for old in e.applied_as])
    now = time.time()
    logged = logged_namespaces(conn, [e.recall for e in entries])
    fresh = iter(new_ids(len(entries)))
    targets: list[Target] = []
    for recall, reward, fid, entry_ns, applied_as in entries:
        fid = fid if fid is not None else next(fresh)
        if fid in seen or seen.intersection(applied_as):
            continue
        seen.add(fid)
        recall_id, ns, item_ids, scores = resolve_recall(conn, recall, entry_ns or namespace, logged)
        targets.append(Target(fid, reward, ns, item_ids, credit_weights(scores, credit)))
        plan.feedback_rows.append({"id": fid, "recall_id": recall_id, "reward": reward, "applied_at": now, "items": 0})
        plan.recalls.append((recall, ns))
    tree = provenance_of(conn, targets, depth) if depth > 0 and decay > 0 else {}

    def rate(w: float) -> dict[str, float]:
        return {"b_weight": w, "b_floor": floor} if schedule == "visits" else {"b_rate": min(1.0, alpha * w)}

    for t in targets:
        base = {"b_ns": t.namespace, "b_reward": t.reward, "b_fb": t.feedback_id}
        for item_id, w in zip(t.item_ids, t.weights.tolist(), strict=True):
            plan.params.append({**base, "b_item": item_id, **rate(w), "b_visit": 1})
        if tree.get(t.namespace):
            direct = dict(zip(t.item_ids, t.weights.tolist(), strict=True))
            traced = traced_credit(direct, tree[t.namespace], gamma_lambda=decay, depth=depth)
            for item_id, w in traced.items():
                if item_id not in direct:  # an ancestor: the selected memories moved above
                    plan.params.append({**base, "b_item": item_id, **rate(w), "b_visit": 0})
    return plan


def provenance_of(conn: Connection, targets: Sequence[Target], depth: int) -> dict[str, dict[str, list[str]]]:
    """Namespace → the provenance above every memory its recalls selected (one read per namespace and
    level: the parents above a union of memories hold every path above each of them)."""
    selected: dict[str, list[str]] = {}
    for t in targets:
        selected.setdefault(t.namespace, []).extend(t.item_ids)
    return {ns: ancestors(conn, ids, ns, depth=depth) for ns, ids in selected.items()}


def apply_updates(conn: Connection, plan: Updates) -> tuple[int | None, list[Any], int]:
    """Run the batch inside the caller's transaction.

    Returns the new generation (None when no item changed), the changed rows as ``(id, seq,
    namespace, q, visits)`` for the mirror (credited ancestors included), and how many updates of
    selected memories were applied (what ``reinforce`` returns; ancestors' updates are not counted).
    """
    generation = None
    after: list[Any] = []
    if plan.params:
        generation = bump(conn)[0]
        now = time.time()
        rows = [{**p, "b_gen": generation, "b_at": now} for p in plan.params]
        # One executemany and one read of the final values: on SQLite about a quarter cheaper than a RETURNING
        # statement per row (each its own DB-API call).
        execute_many(conn, plan.statement, rows)
        after = read_values(conn, sorted({p["b_item"] for p in plan.params}))
    present = {row[0] for row in after}
    applied = Counter(p["b_fb"] for p in plan.params if p["b_item"] in present and p["b_visit"])
    for fb in plan.feedback_rows:
        fb["items"] = applied[fb["id"]]
    execute_many(conn, FEEDBACK_INSERT, plan.feedback_rows)
    return generation, after, sum(fb["items"] for fb in plan.feedback_rows)


def reinforce(
    opened: OpenStore,
    config: MemoryConfig,
    items: Sequence[Reinforcement],
    *,
    namespace: str | None,
    folded: ContextQCache | None = None,
) -> int:
    """``MemoryStore.reinforce_many``: the entries checked, planned and applied in one write transaction under the
    store's lock, the mirrors given the new values once it has committed (and ``folded``, the store's Q in context,
    the rewards); how many selected memories moved."""
    entries = check_entries(items)
    namespace = None if namespace is None else check_namespace(namespace)
    if not entries:
        return 0
    while True:
        try:
            return _reinforce(opened, config, entries, namespace, folded)
        except NotLoggedYet as e:  # another process's group commit may be about to log it: wait outside the lock
            if time.time() - e.made >= LOG_WAIT:
                raise
            time.sleep(LOG_POLL_S)


def _reinforce(
    opened: OpenStore,
    config: MemoryConfig,
    entries: list[Reinforcement],
    namespace: str | None,
    folded: ContextQCache | None,
) -> int:
    with opened.locked():
        with opened.write() as conn:
            plan = plan_updates(
                conn, entries, alpha=config.alpha, credit=config.credit, namespace=namespace,
                depth=config.credit_depth, decay=config.credit_decay, schedule=config.alpha_schedule,
                floor=config.alpha_floor,
            )  # fmt: skip
            generation, after, updated = apply_updates(conn, plan)
        if generation is not None:
            if opened.mirrors.advance(generation):
                opened.mirrors.apply_values(after)
                if folded is not None and plan.feedback_rows:
                    folded.advance(generation, context_folds(plan), plan.feedback_rows[0]["applied_at"])
            else:
                opened.resync()
        return updated


def context_folds(plan: Updates) -> list[tuple[str, str, str, float, float]] | None:
    """What a committed batch adds to the folds of Q in context, as ``ContextQCache.advance`` takes it: for each
    reward of a recall made for a context, its selected memories with the Q that ranked them, in the order the log
    folds them (one batch shares ``applied_at``: by feedback id). None when a recall was not made by this process
    (the memo lacks it) or was passed as a ``Recall`` (it may have been made with ``record=False``: no log row)."""
    rows: list[tuple[str, str, str, float, float]] = []
    for fb, (recall, ns) in sorted(zip(plan.feedback_rows, plan.recalls, strict=True), key=lambda r: r[0]["id"]):
        memo = RECENT.get(recall) if isinstance(recall, str) else None
        if memo is None or len(memo.qs) != len(memo.ids):
            return None
        if memo.context is not None:
            rows.extend(
                (ns, memo.context, item, q, float(fb["reward"])) for item, q in zip(memo.ids, memo.qs, strict=True)
            )
    return rows
