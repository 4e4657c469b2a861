"""Credit over several steps: a reward reaches the memories that produced the recalled ones.

Provenance is a graph of edges ``child → parent``: *parent was in context when child was written*
(docs/design/decisions.md, "Credit over several steps"). A reward on an episode moves the memories it
recalled, each with its direct weight ``w`` (``credit_weights``), and also their ancestors: an ancestor
``d`` edges away gets ``w·(γλ)^d`` for ``d ≤ depth``. The decay is MemQ's TD(λ) eligibility over a
provenance DAG (Liao et al., "MemQ: Integrating Q-Learning into Self-Evolving Memory Agents over
Provenance DAGs", arXiv 2605.08374, 2026: "credit weight decays as (γλ)^d with DAG depth d"). How
several paths combine and the cap below are ours; no code of theirs is used.

The rule, for one reward whose recalled memories ``s`` have direct weights ``w_s``::

    trace(m)  = max over recalled s and paths s → … → m of 1..depth edges of  w_s · (γλ)^len
    weight(m) = max(w_m, min(1, trace(m)))        (w_m = 0 when m was not recalled)
    Q_m ← Q_m + min(1, α·weight(m)) · (r − Q_m)    for every m with weight(m) > 0, or m recalled

*Max over paths*, not a sum: summing counts every path, and a ladder of ``k`` diamonds has ``2^k``
paths from top to bottom, so a summed weight grows without bound with the DAG's width; the maximum
never exceeds the largest direct weight whatever the graph. With ``γλ ≤ 1`` the best path from one
source is its shortest one, so the rule is also "first visit" (BFS shortest distance) per source,
made independent of visiting order by taking the best source. In TD(λ) terms these are *replacing*
traces (Singh & Sutton 1996), which were introduced because accumulating ones over-credit states
reached many times. An ancestor's weight is capped at 1 — never a bigger step than a uniformly
credited recalled memory takes — and ``min(1, α·w)``, the store's rate cap, keeps every update a
convex step (Q lands between its old value and r). Recalled memories keep their own weight, so with
``depth = 0`` or ``γλ = 0`` exactly today's memories move, at today's rates.

Provenance is acyclic by construction (a memory's parents existed before it); bad data with a cycle
still terminates: the propagation runs at most ``depth`` rounds and stops as soon as a round changes
nothing, and a cycle only offers longer (so no heavier) paths.

In the store (``MemoryConfig.credit_depth``/``credit_decay``, ``memory.learn.rewards.plan_updates``): the
edges are ``memory_links`` rows of relation ``"context"``, recorded when a memory is written whose
``provenance["recalls"]`` names recalls (``memory.learn.provenance``), never across namespaces and never to a
memory drawn from a shared namespace. A reward leaves the recalled memories' update exactly as it was
(rate ``min(1, α·w_m)``, ``visits += 1``) — a recalled memory keeps its own weight even when it is
also an ancestor of another recalled one, which differs from ``max(w_m, …)`` above only under
``credit="score"`` — and moves each ancestor by ``min(1, α·weight(m))`` with ``visits`` unchanged, so
``visits`` keeps meaning "times recalled"; all in the reward's transaction, once per feedback id.

Worked example: C was written with A and B in context, D with C; an episode recalled D alone
(``w_D = 1``) and earned ``r = 1``; ``α = 0.3``, ``γλ = 0.5``, ``depth = 2``. Weights: D 1, C 0.5,
A and B 0.25; rates ``α·w``: 0.3, 0.15, 0.075, 0.075. From Q = 0.2 (D), 0.5 (C), 0.0 (A), 0.8 (B):
D 0.2 + 0.3·0.8 = 0.44, C 0.5 + 0.15·0.5 = 0.575, A 0 + 0.075·1 = 0.075, B 0.8 + 0.075·0.2 = 0.815.

Example:
    >>> parents = {"C": ["A", "B"], "D": ["C"]}
    >>> weights = traced_credit({"D": 1.0}, parents, gamma_lambda=0.5, depth=2)
    >>> weights
    {'D': 1.0, 'C': 0.5, 'A': 0.25, 'B': 0.25}
    >>> q = apply_credit({"D": 0.2, "C": 0.5, "A": 0.0, "B": 0.8}, weights, reward=1.0, alpha=0.3)
    >>> {m: round(v, 6) for m, v in q.items()}
    {'D': 0.44, 'C': 0.575, 'A': 0.075, 'B': 0.815}
    >>> traced_credit({"D": 1.0}, parents, gamma_lambda=0.5, depth=1)  # A and B are 2 edges away
    {'D': 1.0, 'C': 0.5}
    >>> traced_credit({"D": 1.0}, parents, gamma_lambda=0.5, depth=0)  # today's behaviour
    {'D': 1.0}
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from connectors.errors import ConfigError
from memory.learn.rule import td_update
from memory.write.checks import check_reward


def check_trace(gamma_lambda: object, depth: object) -> None:
    """Raise ``ConfigError`` unless ``gamma_lambda`` is a number in [0, 1] and ``depth`` an integer >= 0."""
    number = _number(gamma_lambda)
    if number is None or not 0.0 <= number <= 1.0:
        raise ConfigError(f"credit: gamma_lambda (γλ) must be a number in [0, 1], got {gamma_lambda!r}")
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 0:
        raise ConfigError(f"credit: depth must be an integer >= 0 (0: only recalled memories), got {depth!r}")


def _number(value: object) -> float | None:
    """``value`` as a finite float, or None when it is not a finite real number (bools are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _check_weights(w: np.ndarray, where: str) -> np.ndarray:
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        bad = w[~(np.isfinite(w) & (w >= 0))][0]
        raise ConfigError(f"{where}: direct weights must be finite and >= 0 (credit_weights gives them), got {bad!r}")
    return w


@dataclass(frozen=True)
class Provenance:
    """Provenance edges as index arrays: ``child[e] → parent[e]`` over the memories ``ids``.

    Build it once from a mapping and reuse it for many rewards (``propagate`` takes its arrays).

    Attributes:
        ids: the memories, in index order.
        child: for each edge, the index of the memory that was written.
        parent: for each edge, the index of the memory that was in context when it was written.

    Example:
        >>> p = Provenance.from_parents({"C": ["A", "B"], "D": ["C"]})
        >>> p.ids, p.child.tolist(), p.parent.tolist()
        (('C', 'A', 'B', 'D'), [0, 0, 3], [1, 2, 0])
    """

    ids: tuple[str, ...]
    child: np.ndarray
    parent: np.ndarray

    @classmethod
    def from_parents(cls, parents: Mapping[str, Sequence[str]], ids: Sequence[str] = ()) -> Provenance:
        """Index ``parents`` (memory id → the ids in context when it was written); ``ids`` come first."""
        if not isinstance(parents, Mapping):
            raise ConfigError(
                f"credit: parents must be a mapping of memory id -> parent ids, got {type(parents).__name__}"
            )
        position: dict[str, int] = {}

        def at(memory_id: object) -> int:
            if not isinstance(memory_id, str):
                raise ConfigError(f"credit: memory ids must be strings, got {memory_id!r}")
            return position.setdefault(memory_id, len(position))

        for memory_id in ids:
            at(memory_id)
        child: list[int] = []
        parent: list[int] = []
        for memory_id, ups in parents.items():
            if isinstance(ups, str) or not isinstance(ups, Sequence):
                raise ConfigError(f"credit: parents[{memory_id!r}] must be a list of ids, got {ups!r}")
            c = at(memory_id)
            for up in ups:
                child.append(c)
                parent.append(at(up))
        return cls(tuple(position), np.asarray(child, dtype=np.intp), np.asarray(parent, dtype=np.intp))


def propagate(
    direct: np.ndarray, child: np.ndarray, parent: np.ndarray, *, gamma_lambda: float, depth: int
) -> np.ndarray:
    """The weights of many rewards at once: row ``i`` of ``direct`` is reward i's direct weights.

    ``direct`` is ``(n,)`` or ``(rewards, n)`` over the memories; ``child``/``parent`` index the edges.
    Returns the same shape: ``max(direct, min(1, trace))`` (module docstring), 0 where nothing arrives.
    Each round relaxes every edge at once, ``t[p] = max(t[p], γλ·t[c])`` — the (max, ×) form of a
    matrix power — so round k has seen every path of k edges; rounds stop at ``depth`` or earlier,
    when one changes nothing.
    """
    check_trace(gamma_lambda, depth)
    w = _check_weights(np.asarray(direct, dtype=np.float64), "propagate")
    if w.ndim not in (1, 2):
        raise ConfigError(
            f"propagate: direct must be 1-D (one reward) or 2-D (rewards × memories), got shape {w.shape}"
        )
    rows = np.atleast_2d(w)
    child, parent = _check_edges(child, parent, rows.shape[1])
    if depth == 0 or gamma_lambda == 0 or child.size == 0:
        return w.copy()
    order = np.argsort(parent, kind="stable")
    src, dst = child[order], parent[order]
    targets, starts = np.unique(dst, return_index=True)
    trace = rows.copy()
    for _ in range(int(depth)):
        arrived = np.maximum.reduceat(gamma_lambda * trace[:, src], starts, axis=1)
        updated = np.maximum(trace[:, targets], arrived)
        if np.array_equal(updated, trace[:, targets]):
            break  # a fixed point: later rounds cannot change anything (cycles in bad data end here too)
        trace[:, targets] = updated
    out = np.maximum(rows, np.minimum(1.0, trace))
    return out.reshape(w.shape)


def _check_edges(child: np.ndarray, parent: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    c, p = np.asarray(child), np.asarray(parent)
    if (
        c.shape != p.shape
        or c.ndim != 1
        or (c.size and not (np.issubdtype(c.dtype, np.integer) and np.issubdtype(p.dtype, np.integer)))
    ):
        raise ConfigError(
            f"propagate: child and parent must be equal-length 1-D integer arrays, got {c.shape} and {p.shape}"
        )
    if c.size and (min(c.min(), p.min()) < 0 or max(c.max(), p.max()) >= n):
        raise ConfigError(
            f"propagate: edge indices must be in [0, {n}) (one per memory in direct), got out-of-range ones"
        )
    return c.astype(np.intp), p.astype(np.intp)


def traced_credit(
    direct: Mapping[str, float], parents: Mapping[str, Sequence[str]], *, gamma_lambda: float, depth: int
) -> dict[str, float]:
    """The weight each memory receives from one reward (the rule in the module docstring).

    Args:
        direct: the recalled memories and their direct weights (``credit_weights``), each finite, >= 0.
        parents: provenance, memory id → the ids in context when it was written; ids missing from it
            have no known parents.
        gamma_lambda: γλ in [0, 1], the decay per provenance edge.
        depth: how many edges credit may travel; 0 moves only the recalled memories.

    Returns:
        The recalled memories first (in ``direct``'s order, their weights unchanged when ``depth = 0``),
        then every ancestor that receives a positive weight, in the order the provenance names them.

    Example:
        >>> traced_credit({"D": 1.0}, {"D": ["C"], "C": ["A"]}, gamma_lambda=0.5, depth=5)
        {'D': 1.0, 'C': 0.5, 'A': 0.25}
    """
    check_trace(gamma_lambda, depth)
    if not isinstance(direct, Mapping):
        raise ConfigError(
            f"traced_credit: direct must be a mapping of memory id -> weight, got {type(direct).__name__}"
        )
    values = [_weight("traced_credit", k, v) for k, v in direct.items()]
    prov = Provenance.from_parents(parents, ids=list(direct))
    w = np.zeros(len(prov.ids), dtype=np.float64)
    w[: len(values)] = values
    out = propagate(w, prov.child, prov.parent, gamma_lambda=gamma_lambda, depth=depth)
    recalled = len(values)
    return {m: float(out[i]) for i, m in enumerate(prov.ids) if i < recalled or out[i] > 0}


def _weight(where: str, memory_id: object, value: object) -> float:
    if not isinstance(memory_id, str):
        raise ConfigError(f"{where}: memory ids must be strings, got {memory_id!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ConfigError(f"{where}: the weight of {memory_id!r} must be a number, got {value!r}")
    number = float(value)
    _check_weights(np.array([number]), f"{where}: {memory_id!r}")
    return number


def apply_credit(
    q: Mapping[str, float], weights: Mapping[str, float], *, reward: float, alpha: float
) -> dict[str, float]:
    """The new Q of every memory in ``weights``: ``Q + min(1, α·w)·(r − Q)`` (``memory.learn.rewards.plan_updates``'
    rate); ``q`` holds their current values.

    Example:
        >>> apply_credit({"D": 0.0, "C": 0.0}, {"D": 1.0, "C": 0.5}, reward=1.0, alpha=0.3)
        {'D': 0.3, 'C': 0.15}
    """
    r = check_reward(reward, "apply_credit")
    rate = _number(alpha)
    if rate is None or not 0.0 <= rate <= 1.0:
        raise ConfigError(f"apply_credit: alpha must be a number in [0, 1], got {alpha!r}")
    missing = [m for m in weights if m not in q]
    if missing:
        raise ConfigError(f"apply_credit: q has no current value for {missing[:5]} (one per weighted memory)")
    ids = list(weights)
    w = np.array([_weight("apply_credit", m, weights[m]) for m in ids], dtype=np.float64)
    new = td_update(np.array([float(q[m]) for m in ids], dtype=np.float64), r, np.minimum(1.0, rate * w))
    return {m: float(v) for m, v in zip(ids, new, strict=True)}
