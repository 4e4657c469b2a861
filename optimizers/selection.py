"""Choosing the parent of a proposal: the best version so far, or one from the Pareto front.

The Pareto front (as in GEPA) keeps every version that no other version beats on every validation
example: a version that alone solves a hard example stays a possible parent even when its mean is
lower, so the search does not collapse onto one local optimum. A front member is drawn with weight
``1 + the number of examples on which it has the best score``.

Pure functions over per-example scores; randomness comes from the caller's seeded ``random.Random``.

Example:
    >>> sorted(pareto_front({"a": {"x": 1.0, "y": 0.0}, "b": {"x": 0.0, "y": 1.0}, "c": {"x": 0.0, "y": 0.5}}))
    ['a', 'b']
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from connectors import ConfigError
from optimizers.types import Version

ParentSelection = Literal["best", "pareto"]


def scores_on(version: Version, example_ids: Sequence[str]) -> dict[str, float]:
    """The version's scores restricted to ``example_ids`` (those it has)."""
    return {e: float(version.scores[e]) for e in example_ids if e in version.scores}


def sample_ids(rng: random.Random, ids: Sequence[str], k: int) -> list[str]:
    """``k`` ids drawn without replacement (all when fewer), kept in their given order."""
    ids = list(ids)
    chosen = set(rng.sample(range(len(ids)), min(k, len(ids))))
    return [e for i, e in enumerate(ids) if i in chosen]


def pareto_front(scores: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The ids whose score vectors no other id dominates (>= everywhere, > somewhere).

    Vectors are compared on the examples every id has a score for; identical vectors all stay.
    Returns ids in input order; every id when no example is shared.
    """
    ids = list(scores)
    if not ids:
        return []
    common = set.intersection(*(set(s) for s in scores.values()))
    examples = sorted(common)
    if not examples:
        return ids
    matrix = np.array([[scores[i][e] for e in examples] for i in ids], dtype=np.float64)
    ge = (matrix[:, None, :] >= matrix[None, :, :]).all(axis=2)  # ge[j, i]: j >= i everywhere
    gt = (matrix[:, None, :] > matrix[None, :, :]).any(axis=2)
    dominated: list[bool] = np.asarray((ge & gt).any(axis=0)).tolist()
    return [i for i, d in zip(ids, dominated, strict=True) if not d]


def win_counts(scores: Mapping[str, Mapping[str, float]], example_ids: Sequence[str]) -> dict[str, int]:
    """For each id, on how many examples its score equals the best score any id has there."""
    wins = dict.fromkeys(scores, 0)
    for e in example_ids:
        present = {i: s[e] for i, s in scores.items() if e in s}
        if present:
            top = max(present.values())
            for i, value in present.items():
                wins[i] += int(value == top)
    return wins


def select_parent(
    versions: Sequence[Version],
    head: str,
    *,
    mode: ParentSelection = "best",
    example_ids: Sequence[str] = (),
    rng: random.Random | None = None,
) -> Version:
    """The version to build the next proposal on.

    ``best``: the highest mean score over ``example_ids`` (HEAD wins ties). ``pareto``: a seeded draw
    from the Pareto front, weighted by wins. Versions without scores on ``example_ids`` are not
    candidates; when none has scores, HEAD is the parent.

    Raises:
        ConfigError: ``head`` is not among ``versions``, or ``mode`` is unknown.
    """
    by_id = {v.id: v for v in versions}
    if head not in by_id:
        raise ConfigError(f"head {head!r} is not among the versions given ({sorted(by_id)[:10]})")
    if mode not in ("best", "pareto"):
        raise ConfigError(f"parent selection must be 'best' or 'pareto', got {mode!r}")
    scored = {v.id: s for v in versions if (s := scores_on(v, example_ids))}
    if not scored:
        return by_id[head]
    if mode == "best":
        return by_id[_best(scored, head)]
    front = pareto_front(scored)
    wins = win_counts({i: scored[i] for i in front}, example_ids)
    chosen = (rng or random.Random(0)).choices(front, weights=[1 + wins[i] for i in front], k=1)[0]
    return by_id[chosen]


def _best(scored: Mapping[str, Mapping[str, float]], head: str) -> str:
    def key(vid: str) -> tuple[float, bool]:
        s = scored[vid]
        return (sum(s.values()) / len(s), vid == head)

    return max(scored, key=key)
