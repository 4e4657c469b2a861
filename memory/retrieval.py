"""One recall, computed in memory: phase A over the index's answer, phase B over the pool.

``plan_recall`` and ``to_recall`` touch no database; the store runs them between reading the mirror
and logging the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memory.config import RetrievalConfig
from memory.mirror.arrays import NamespaceMirror
from memory.records import MemoryItem, Recall, ScoredItem
from memory.scoring import Selection, select


def search_width(k1: int, size: int) -> int:
    """How many neighbours to ask the index for: k1 plus a margin, so float32 rounding in the index
    cannot push one of the exact k1 nearest out of the candidates."""
    return min(size, 2 * k1 + 16)


@dataclass(frozen=True)
class Plan:
    """The outcome of one retrieval before it is turned into a ``Recall``.

    Attributes:
        rows: mirror rows of the k1 nearest items, by similarity (best first).
        sims: their exact cosine similarities.
        qs: their Q-values at retrieval time.
        in_pool: which of them passed the floor (cos > δ).
        selection: phase B over the pool (``rows[in_pool]``).
    """

    rows: np.ndarray
    sims: np.ndarray
    qs: np.ndarray
    in_pool: np.ndarray
    selection: Selection

    @property
    def pool_rows(self) -> np.ndarray:
        return self.rows[self.in_pool]

    @property
    def selected_rows(self) -> np.ndarray:
        return self.pool_rows[self.selection.order]

    @property
    def filtered(self) -> int:
        return int((~self.in_pool).sum())


def plan_batch(
    mirror: NamespaceMirror,
    vecs: np.ndarray,
    cfg: RetrievalConfig,
    rng: np.random.Generator,
    q_in_context: Sequence[Mapping[str, float]] = (),
) -> list[Plan]:
    """Phase A and B for each query vector, in memory (one index search for the batch); query i ranks the
    memories of ``q_in_context[i]`` (when given) by those Q-values instead of their global ones."""
    width = search_width(cfg.k1, len(mirror))
    if width:
        sims, ids = mirror.index.search(vecs, width)
    else:
        sims, ids = np.zeros((len(vecs), 0), dtype=np.float32), np.zeros((len(vecs), 0), dtype=np.int64)
    own = list(q_in_context) or [{}] * len(vecs)
    return [plan_recall(mirror, vecs[i], ids[i], sims[i], cfg, rng, own[i]) for i in range(len(vecs))]


@dataclass(frozen=True)
class Planner:
    """Queries' vectors, their settings, their Q-values in context and the ε draws: planning them again on
    a caught-up mirror."""

    vecs: np.ndarray
    cfg: RetrievalConfig
    rng: np.random.Generator
    q_in_context: Sequence[Mapping[str, float]] = ()

    def __call__(self, mirror: NamespaceMirror) -> list[Plan]:
        return plan_batch(mirror, self.vecs, self.cfg, self.rng, self.q_in_context)


def plan_recall(
    mirror: NamespaceMirror,
    query: np.ndarray,
    ids: np.ndarray,
    sims: np.ndarray,
    cfg: RetrievalConfig,
    rng: np.random.Generator,
    q_in_context: Mapping[str, float] | None = None,
) -> Plan:
    """Phase A (the k1 nearest, then the floor δ) and phase B (``select``) for one query vector.

    ``ids`` and ``sims`` are the vector index's answer for the query, searched ``search_width`` deep;
    ``q_in_context`` replaces the Q of the memories it names (``memory.context_q``).
    """
    rows, exact, nearest = mirror.candidates(query, ids, sims, cfg.k1)  # equal sims keep the older item
    near_rows, near_sims = rows[nearest], exact[nearest]
    in_pool = near_sims > cfg.delta
    qs = mirror.q[near_rows].copy()
    if q_in_context:
        for i, row in enumerate(near_rows):
            qs[i] = q_in_context.get(str(mirror.ids[row]), qs[i])
    selection = select(near_sims[in_pool], qs[in_pool], cfg, rng)
    return Plan(near_rows, near_sims, qs, in_pool, selection)


def log_rows(recall_id: str, plan: Plan, item_ids: np.ndarray) -> list[dict[str, Any]]:
    """``memory_recall_items`` rows for every candidate: the pool with its scores, and what δ dropped."""
    sel = plan.selection
    pool_pos = np.cumsum(plan.in_pool) - 1  # position of each nearest item inside the pool
    rank_of = {int(p): r for r, p in enumerate(sel.order)}
    out: list[dict[str, Any]] = []
    for i, row in enumerate(plan.rows):
        base = {
            "recall_id": recall_id,
            "item_id": str(item_ids[row]),
            "position": i,
            "in_pool": bool(plan.in_pool[i]),
            "sim": float(plan.sims[i]),
            "q": float(plan.qs[i]),
            "rank": None,
            "z_sim": None,
            "z_q": None,
            "score": None,
        }
        if plan.in_pool[i]:
            p = int(pool_pos[i])
            base.update(
                rank=rank_of.get(p), z_sim=float(sel.z_sim[p]), z_q=float(sel.z_q[p]), score=float(sel.scores[p])
            )
        out.append(base)
    return out


def to_recall(
    recall_id: str,
    namespace: str,
    query: str,
    plan: Plan,
    item_ids: np.ndarray,
    found: Mapping[str, MemoryItem],
    context: str | None = None,
) -> Recall:
    """The ``Recall`` of one plan; ``found`` holds the selected memories by id (a missing one was
    evicted by another process since the search and is left out)."""
    sel = plan.selection
    details: list[ScoredItem] = []
    for p, row in zip(sel.order, plan.selected_rows, strict=True):
        item = found.get(str(item_ids[row]))
        if item is None:
            continue
        pool_sims = plan.sims[plan.in_pool]
        details.append(
            ScoredItem(item, float(pool_sims[p]), float(sel.z_sim[p]), float(sel.z_q[p]), float(sel.scores[p]))
        )
    return Recall(
        id=recall_id,
        namespace=namespace,
        query=query,
        items=tuple(d.item for d in details),
        scores=tuple(d.score for d in details),
        details=tuple(details),
        pool_size=int(plan.in_pool.sum()),
        filtered=plan.filtered,
        explored=sel.explored,
        context=context,
    )
