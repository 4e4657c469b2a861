"""How different a team's answers are: K*, the similarity of agents' outputs, and how often they agree.

K* is the effective channel count of Yang et al., "Understanding Agent Scaling in LLM-Based Multi-Agent
Systems via Diversity" (arXiv 2602.03794, 2026; code: github.com/SafeRL-Lab/Agent-Scaling). For the n
outputs of one task, embedded as vectors e_1 … e_n:

    S_ij = cos(e_i, e_j)                  the cosine-similarity matrix (1 on the diagonal)
    p_k  = λ_k(S) / tr(S) = λ_k(S) / n    its eigenvalues, normalised to sum to 1
    K*   = exp(-Σ_k p_k log p_k)          the exponential of their Shannon entropy

n identical outputs give S = all ones, one eigenvalue n, K* = 1: one channel however many agents; n
mutually orthogonal outputs give S = I, p_k = 1/n, K* = n. K* needs no labels: it says how many
independent lines of evidence a team's outputs amount to, not whether any is right. (The same quantity is
the Vendi score of Friedman and Dieng, 2023, with the cosine kernel.)

The functions here are pure: vectors and strings in, numbers out.

Example:
    >>> import numpy as np
    >>> round(kstar(np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])), 6)
    1.0
    >>> round(kstar(np.eye(4)), 6)
    4.0
    >>> agreement(["Paris", "paris.", "Lyon"])
    0.3333333333333333
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from evolve.envs.textmatch import normalise

NORM_FLOOR = 1e-12  # a vector shorter than this has no direction: an empty answer's embedding


def similarity_matrix(vectors: np.ndarray) -> np.ndarray:
    """The cosine similarity of every pair of rows: an (n, n) symmetric matrix with ones on its diagonal.

    Raises ``ValueError`` for no rows, rows that are not finite, or a row of (near) zero length, which has
    no direction to compare: leave empty or failed answers out before calling.
    """
    vectors = np.asarray(vectors, dtype=np.float64)
    if vectors.ndim != 2 or len(vectors) == 0:
        raise ValueError(f"expected an (n, dim) array of n >= 1 output vectors, got shape {vectors.shape}")
    if not np.isfinite(vectors).all():
        raise ValueError("output vectors must be finite (no NaN or inf)")
    norms = np.linalg.norm(vectors, axis=1)
    if (norms < NORM_FLOOR).any():
        raise ValueError(
            f"output vectors {np.flatnonzero(norms < NORM_FLOOR).tolist()} have zero length (empty outputs?)"
        )
    unit = vectors / norms[:, None]
    sims = np.clip(unit @ unit.T, -1.0, 1.0)
    np.fill_diagonal(sims, 1.0)
    return sims


def kstar(vectors: np.ndarray) -> float:
    """K*, the effective number of independent outputs among the rows of ``vectors`` (see the module):
    1 for a single output or identical ones, n for n orthogonal ones, in between otherwise.

    Negative eigenvalues (a cosine matrix of anti-parallel outputs is not positive semi-definite only
    through rounding) are taken as 0.
    """
    sims = similarity_matrix(vectors)
    eig = np.clip(np.linalg.eigvalsh(sims), 0.0, None)
    p = eig / eig.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def agreement(answers: Sequence[str], *, key: Callable[[str], str] = normalise) -> float:
    """The share of pairs of answers that are the same once normalised (``key``): 1 when all agree, 0
    when all differ; 1 for a single answer."""
    keys = [key(a) for a in answers]
    n = len(keys)
    if n < 2:
        return 1.0
    same = sum(keys[i] == keys[j] for i in range(n) for j in range(i + 1, n))
    return same / (n * (n - 1) / 2)


def majority(answers: Sequence[str | None], *, key: Callable[[str], str] = normalise) -> int | None:
    """The position of the answer that wins a majority vote over normalised answers (``key``), or None
    when there is nothing to vote on. Missing (None) and empty answers do not vote. The most frequent
    answer wins; a tie goes to the answer given first, so the vote is deterministic and the team's order
    breaks it. The position returned is that answer's first occurrence, so its original text is kept.

    Example:
        >>> majority(["Lyon", "Paris", "paris.", None, "Lyon"])
        0
        >>> majority(["B", "A", "a"])
        1
    """
    counts: dict[str, list[int]] = {}
    for i, answer in enumerate(answers):
        if answer is None or not answer.strip():
            continue
        counts.setdefault(key(answer), []).append(i)
    if not counts:
        return None
    return min(counts.values(), key=lambda where: (-len(where), where[0]))[0]


def correctness_correlation(correct: np.ndarray) -> np.ndarray:
    """The Pearson correlation (φ coefficient) of every pair of agents' correctness across tasks:
    ``correct`` is (tasks, agents) of 0/1. NaN where an agent is right (or wrong) on every task: its
    correctness does not vary, so it correlates with nothing. Agents that fail together correlate near 1;
    independent ones near 0."""
    correct = np.asarray(correct, dtype=np.float64)
    if correct.ndim != 2 or correct.shape[0] < 2:
        raise ValueError(f"expected a (tasks, agents) array with at least 2 tasks, got shape {correct.shape}")
    centred = correct - correct.mean(axis=0)
    spread = np.sqrt((centred**2).sum(axis=0))
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = (centred.T @ centred) / np.outer(spread, spread)
    constant = spread == 0
    corr[constant, :] = np.nan
    corr[:, constant] = np.nan
    return np.clip(corr, -1.0, 1.0)
