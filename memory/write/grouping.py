"""Intent grouping, as pure NumPy functions: which intent key each new memory joins
(docs/design/decisions.md, "Grouping is identity").

A new vector joins the most similar key when their cosine is at least the threshold, else it founds a key of
its own; ``memory.write.inserts`` runs it against a namespace's keys (or the nearest ones its index finds).

Example:
    >>> import numpy as np
    >>> keys = np.array([[1.0, 0.0]], dtype=np.float32)
    >>> labels, new_rows = assign_groups(np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32), keys, 0.9)
    >>> labels.tolist(), new_rows.tolist()
    ([0, 1], [1])
"""

from __future__ import annotations

import numpy as np

# Cosines are computed in float32 when grouping; identical unit vectors can come out at 0.99999994.
GROUP_TOLERANCE = 1e-6


def assign_groups(
    vecs: np.ndarray,
    keys: np.ndarray,
    threshold: float,
    *,
    nearest: tuple[np.ndarray, np.ndarray] | None = None,
    chunk: int = 512,
) -> tuple[np.ndarray, np.ndarray]:
    """Intent grouping: which key each new vector joins, in arrival order.

    Row i joins the most similar key (existing keys first, then keys created by rows before it) when
    that cosine is >= ``threshold``; otherwise it becomes a new key. Equal cosines keep the older key.
    ``nearest`` gives, per row, the best existing key and its cosine when the caller found them
    another way (a vector index); by default every existing key is compared.

    Returns:
        ``labels`` — for each row, an index into ``keys`` followed by the new keys in creation order —
        and ``new_rows``, the rows that became new keys.
    """
    vecs = np.ascontiguousarray(vecs, dtype=np.float32)
    keys = np.asarray(keys, dtype=np.float32).reshape(-1, vecs.shape[1])
    n_old = keys.shape[0]
    best_old, best_sim = nearest if nearest is not None else nearest_keys(vecs, keys, chunk=chunk)
    labels = np.empty(vecs.shape[0], dtype=np.int64)
    new_rows: list[int] = []
    cut = threshold - GROUP_TOLERANCE
    for start in range(0, vecs.shape[0], chunk):
        block = vecs[start : start + chunk]
        label_of = best_old[start : start + chunk].astype(np.int64)
        sim_of = best_sim[start : start + chunk].astype(np.float32)
        if new_rows:  # keys created by earlier blocks; an existing key wins a tie (it is older)
            prev = block @ vecs[new_rows].T
            j = prev.argmax(axis=1)
            s = prev[np.arange(block.shape[0]), j]
            better = s > sim_of
            label_of[better], sim_of[better] = n_old + j[better], s[better]
        inner = block @ block.T
        created: list[int] = []
        for i in range(block.shape[0]):
            label, sim = int(label_of[i]), float(sim_of[i])
            if created:
                s = inner[i, created]
                j = int(s.argmax())
                if s[j] > sim:
                    label, sim = n_old + len(new_rows) + j, float(s[j])
            if sim >= cut:
                labels[start + i] = label
            else:
                labels[start + i] = n_old + len(new_rows) + len(created)
                created.append(i)
        new_rows.extend(start + i for i in created)
    return labels, np.asarray(new_rows, dtype=np.int64)


def nearest_keys(vecs: np.ndarray, keys: np.ndarray, *, chunk: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``vecs``: the most similar key (the first on ties; -1 without keys) and that
    cosine in float32 (-inf without keys). Compares every key: O(rows × keys)."""
    best = np.full(vecs.shape[0], -1, dtype=np.int64)
    sims = np.full(vecs.shape[0], -np.inf, dtype=np.float32)
    if keys.shape[0]:
        for start in range(0, vecs.shape[0], chunk):
            block = vecs[start : start + chunk] @ keys.T
            idx = block.argmax(axis=1)  # the first maximum: the older key wins a tie
            best[start : start + chunk] = idx
            sims[start : start + chunk] = block[np.arange(block.shape[0]), idx]
    return best, sims
