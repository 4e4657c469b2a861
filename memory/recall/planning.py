"""One recall, planned in memory: phase A over the index's answer, phase B over the pool.

``plan_batch`` and ``to_recall`` touch no database; ``memory.recall.retrieving`` runs them between reading the
mirrors and logging the result. A recall may search two namespaces at once, its own and a shared one (a served
tenant over its run's trained memory): their nearest items meet in one phase A and one phase B, and
``Plan.shared`` says where each came from.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from memory.recall.scoring import Selection, phase_a, select
from memory.storage.records import MemoryItem, Recall, ScoredItem

if TYPE_CHECKING:
    from memory.config import RetrievalConfig
    from memory.mirror.arrays import NamespaceMirror


def search_width(k1: int, size: int) -> int:
    """How many neighbours to ask the index for: k1 plus a margin, so float32 rounding in the index
    cannot push one of the exact k1 nearest out of the candidates."""
    return min(size, 2 * k1 + 16)


@dataclass(frozen=True)
class Plan:
    """The outcome of one retrieval before it is turned into a ``Recall``.

    Attributes:
        ids: item ids of the k1 nearest items, by similarity (best first).
        sims: their exact cosine similarities.
        qs: the Q-values that ranked them (a tenant's overlay or a context's Q where it has one).
        stored_q: their Q-values in the store at retrieval time.
        visits: their visit counts.
        shared: which of them came from the shared namespace (all False for a one-namespace recall).
        in_pool: which of them passed the floor (cos > δ).
        selection: phase B over the pool (``ids[in_pool]``).
    """

    ids: np.ndarray
    sims: np.ndarray
    qs: np.ndarray
    stored_q: np.ndarray
    visits: np.ndarray
    shared: np.ndarray
    in_pool: np.ndarray
    selection: Selection

    @property
    def selected(self) -> np.ndarray:
        """Positions (in ``ids``) of the selected items, best first."""
        return np.flatnonzero(self.in_pool)[self.selection.order]

    @property
    def selected_ids(self) -> list[str]:
        return [str(i) for i in self.ids[self.selected]]

    @property
    def filtered(self) -> int:
        return int((~self.in_pool).sum())


@dataclass(frozen=True)
class QOver:
    """The Q-values one query ranks its memories by in place of their stored ones (``memory.recall.context_q``).

    Attributes:
        values: memory id → its Q here (what its context earned, a tenant's overlay Q on a shared memory).
        rest: the Q of every memory ``values`` does not name (``RetrievalConfig.context_start="neutral"``
            in a recall made for a context: ``q_init``); None: its stored Q.

    Example:
        >>> QOver({"m1": 0.5}, rest=0.0).of(np.array(["m1", "m2"]), np.array([-0.3, -0.3])).tolist()
        [0.5, 0.0]
    """

    values: Mapping[str, float]
    rest: float | None = None

    def of(self, ids: np.ndarray, stored_q: np.ndarray) -> np.ndarray:
        """The Q-values that rank the memories ``ids`` whose stored Q-values are ``stored_q``. Plain Python
        over a pool of ten: numpy's per-call overhead would cost more than the work."""
        qs = stored_q.copy() if self.rest is None else np.full(len(ids), self.rest, dtype=stored_q.dtype)
        if self.values:
            for i, item_id in enumerate(ids.tolist()):
                qs[i] = self.values.get(str(item_id), qs[i])
        return qs


@dataclass(frozen=True)
class Nearest:
    """Phase A's k1 nearest of one namespace (or of two, merged), before the floor and phase B."""

    ids: np.ndarray
    sims: np.ndarray
    stored_q: np.ndarray
    visits: np.ndarray
    shared: np.ndarray

    @staticmethod
    def of(
        mirror: NamespaceMirror, rows: np.ndarray, exact: np.ndarray, nearest: np.ndarray, *, shared: bool
    ) -> Nearest:
        """The k1 nearest of ``mirror`` from its ``candidates`` for one query (``rows``, their ``exact``
        similarities, the positions of the ``nearest``)."""
        near = rows[nearest]
        return Nearest(
            mirror.ids[near], exact[nearest], mirror.q[near], mirror.visits[near], np.full(len(near), shared)
        )

    def merged(self, other: Nearest, k1: int) -> Nearest:
        """The k1 nearest of both, best first; on equal similarity this one's (the own) items first."""
        sims = np.concatenate([self.sims, other.sims])
        keep = phase_a(sims, k1, -np.inf) if len(sims) else np.zeros(0, dtype=np.intp)
        return Nearest(*(np.concatenate([a, b])[keep] for a, b in zip(self.parts(), other.parts(), strict=True)))

    def parts(self) -> tuple[np.ndarray, ...]:
        return self.ids, self.sims, self.stored_q, self.visits, self.shared


def plan_batch(
    mirror: NamespaceMirror,
    vecs: np.ndarray,
    cfg: RetrievalConfig,
    rng: np.random.Generator,
    q_in_context: Sequence[Mapping[str, float] | QOver] = (),
    shared: NamespaceMirror | None = None,
) -> list[Plan]:
    """Phase A and B for each query vector, in memory (one index search per namespace for the batch);
    query i ranks the memories of ``q_in_context[i]`` (when given) by those Q-values instead of their
    stored ones. With a ``shared`` mirror, its memories join the same phase A and B (one recall over both)."""
    found = []
    for m in (mirror, shared):
        if m is not None:
            sims, ids = search(m, vecs, cfg.k1, cfg.draw_from)
            found.append((m, m.candidates(vecs, ids, sims, cfg.k1, cfg.draw_from)))  # ties keep the older item
    own = list(q_in_context) or [{}] * len(vecs)
    plans = []
    for i in range(len(vecs)):
        parts = [Nearest.of(m, *cands[i], shared=m is shared) for m, cands in found]
        nearest = parts[0] if len(parts) == 1 else parts[0].merged(parts[1], cfg.k1)
        plans.append(plan_pool(nearest, cfg, rng, own[i]))
    return plans


def search(
    mirror: NamespaceMirror, vecs: np.ndarray, k1: int, draw_from: str = "both"
) -> tuple[np.ndarray, np.ndarray]:
    """The index's answer for every query vector: (sims, seqs), ``search_width`` deep (and as many deeper
    as there are strategies when they are left out; none when only strategies are drawn from)."""
    if draw_from == "strategies":
        width = 0
    elif draw_from == "episodes":
        width = min(len(mirror), search_width(k1, len(mirror)) + mirror.strategy_count())
    else:
        width = search_width(k1, len(mirror))
    if width:
        sims, ids = mirror.index.search(vecs, width)
        return sims, ids
    return np.zeros((len(vecs), 0), dtype=np.float32), np.zeros((len(vecs), 0), dtype=np.int64)


@dataclass(frozen=True)
class Planner:
    """Queries' vectors, their settings, their Q-values in context and the ε draws: planning them again on
    caught-up mirrors."""

    vecs: np.ndarray
    cfg: RetrievalConfig
    rng: np.random.Generator
    q_in_context: Sequence[Mapping[str, float] | QOver] = ()

    def __call__(self, mirror: NamespaceMirror, shared: NamespaceMirror | None = None) -> list[Plan]:
        return plan_batch(mirror, self.vecs, self.cfg, self.rng, self.q_in_context, shared)


def plan_pool(
    nearest: Nearest,
    cfg: RetrievalConfig,
    rng: np.random.Generator,
    q_over: Mapping[str, float] | QOver | None = None,
) -> Plan:
    """The floor δ and phase B (``select``) over phase A's nearest; ``q_over`` replaces the Q of the
    memories it names (a context's Q, ``memory.recall.context_q``; a tenant's overlay on shared memories), and
    as a ``QOver`` may replace the others' too."""
    in_pool = nearest.sims > cfg.delta
    over = q_over if isinstance(q_over, QOver) else QOver(q_over or {})
    qs = over.of(nearest.ids, nearest.stored_q)
    selection = select(nearest.sims[in_pool], qs[in_pool], cfg, rng)
    return Plan(nearest.ids, nearest.sims, qs, nearest.stored_q, nearest.visits, nearest.shared, in_pool, selection)


class Remembered(NamedTuple):
    """What one recall selected, as its log holds it: ids and selection scores best first (``reinforce``
    credits them), the ids from its own namespace (provenance links a memory written from it to them), and
    the recall's context with the Q that ranked each selected memory (a reward folds them into the store's
    Q in context without reading them back: ``memory.recall.context_cache.ContextQCache.advance``)."""

    ids: tuple[str, ...]
    scores: np.ndarray
    own: tuple[str, ...]
    context: str | None = None
    qs: tuple[float, ...] = ()


class Selections:
    """What the last ``size`` recalls planned in this process selected, by recall id: ``memory.learn.provenance``
    and ``memory.learn.rewards`` use it instead of reading the log back and unpacking it.

    Only a memo of what was logged: a caller uses an id only when the log holds it (in the namespace it
    asks for; a recall made with ``record=False``, rolled back or expired since has no row), and reads from
    the log the ids it does not know (another process's, or forgotten here). Recall ids are random, so
    stores sharing the process cannot mix theirs up.

    Example:
        >>> memo = Selections(size=2)
        >>> for rid in ("r1", "r2", "r3"):
        ...     memo.remember(rid, Remembered((f"m-{rid}",), np.array([0.5]), ()))
        >>> memo.get("r1"), memo.get("r3").ids
        (None, ('m-r3',))
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._recalls: dict[str, Remembered] = {}
        self._lock = threading.Lock()

    def remember(self, recall_id: str, selection: Remembered) -> None:
        with self._lock:
            self._recalls[recall_id] = selection
            if len(self._recalls) > self.size:  # dicts keep insertion order: the oldest goes
                del self._recalls[next(iter(self._recalls))]

    def get(self, recall_id: str) -> Remembered | None:
        return self._recalls.get(recall_id)

    def clear(self) -> None:
        with self._lock:
            self._recalls.clear()


RECENT = Selections()
"""The process's memo of recent recalls' selections (``to_recall`` fills it)."""


def to_recall(
    recall_id: str,
    namespace: str,
    query: str,
    plan: Plan,
    found: Mapping[str, MemoryItem],
    context: str | None = None,
    shared: str | None = None,
) -> Recall:
    """The ``Recall`` of one plan; ``found`` holds the selected memories by id (a missing one was
    evicted by another process since the search and is left out). What it selected from its own
    selection is remembered in ``RECENT`` (``memory.learn.provenance`` and ``memory.learn.rewards`` read it back)."""
    sel = plan.selection
    selected = plan.selected
    selected_ids = [str(i) for i in plan.ids[selected].tolist()]
    from_shared = plan.shared[selected].tolist()
    own = tuple(i for i, s in zip(selected_ids, from_shared, strict=True) if not s)
    qs = tuple(plan.qs[selected].tolist())  # what the log packs for them (``memory.recall.log.pack_plan``)
    RECENT.remember(
        recall_id, Remembered(tuple(selected_ids), sel.scores[sel.order].astype(np.float64), own, context, qs)
    )
    pool_sims, z_sim, z_q, scores = (a.tolist() for a in (plan.sims[plan.in_pool], sel.z_sim, sel.z_q, sel.scores))
    details: list[ScoredItem] = []
    for p, item_id in zip(sel.order.tolist(), selected_ids, strict=True):
        item = found.get(item_id)
        if item is not None:
            details.append(ScoredItem(item, pool_sims[p], z_sim[p], z_q[p], scores[p]))
    return Recall(
        id=recall_id,
        namespace=namespace,
        query=query,
        items=tuple(d.item for d in details),
        scores=tuple(d.score for d in details),
        details=tuple(details),
        pool_size=len(scores),  # phase B scored every pool item
        filtered=len(plan.in_pool) - len(scores),
        explored=sel.explored,
        context=context,
        shared=shared,
    )
