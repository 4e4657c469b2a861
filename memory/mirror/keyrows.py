"""Reading intent key vectors by row: from a snapshot's file without mapping its pages in, and the exact
products of query and key pairs.

A recall reads the vectors of a few dozen scattered keys. Read through the snapshot's memory map, each row
touched brings its neighbours into the process too (the kernel maps up to 64 KB around a page it faults in,
``MADV_RANDOM`` or not): after 1,000 recalls of a million-item store, 1.3 GB of the map was resident for
about 36,000 rows read. ``FileRows`` reads the same rows with ``pread`` into a fresh array: the bytes come
from the page cache (shared, dropped under pressure) and the process keeps only what it asked for, at
about 1 µs a row.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable

import numpy as np


class FileRows:
    """The first ``count`` rows of a float32 matrix of width ``dim`` stored at byte ``offset`` of the open
    file ``fd`` (owned from then on, closed with this object), read row by row. A later save renames a new
    file over the old one; this one goes on reading the rows it was opened with, as its mapping does.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> m = np.arange(12, dtype=np.float32).reshape(4, 3)
        >>> path = Path(tempfile.mkdtemp()) / "keys"
        >>> path.write_bytes(b"head" + m.tobytes())
        52
        >>> FileRows(os.open(path, os.O_RDONLY), offset=4, count=4, dim=3).take(np.array([3, 0, 3])).tolist()
        [[9.0, 10.0, 11.0], [0.0, 1.0, 2.0], [9.0, 10.0, 11.0]]
    """

    def __init__(self, fd: int, *, offset: int, count: int, dim: int) -> None:
        self.offset, self.count, self.dim = offset, count, dim
        self._fd = fd
        weakref.finalize(self, os.close, fd)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The given rows (each below ``count``), in the order given."""
        size, at = self.dim * 4, self.offset
        data = b"".join([os.pread(self._fd, size, at + r * size) for r in np.asarray(rows, np.int64).tolist()])
        if len(data) != size * len(rows):
            raise ValueError(f"the snapshot's vectors end early: {len(data):,} of {size * len(rows):,} bytes read")
        return np.frombuffer(data, dtype=np.float32).reshape(len(rows), self.dim)


def pair_sims(
    rows_of: Callable[[np.ndarray], np.ndarray], codes: np.ndarray, queries: np.ndarray, at: np.ndarray
) -> np.ndarray:
    """The cosine of ``queries[at[i]]`` with key ``codes[i]`` (its vector read by ``rows_of``) for each i,
    bit for bit what ``NamespaceMirror.exact_sims`` gives: float64 products (exact for float32 inputs)
    summed per row, a few rows at a time (large temporaries cost more in page faults than the arithmetic).

    Example:
        >>> keys = np.eye(3, dtype=np.float32)
        >>> q = np.array([[0.6, 0.0, 0.8]], dtype=np.float32)
        >>> pair_sims(keys.__getitem__, np.array([0, 2]), q, np.array([0, 0]))
        array([0.60000002, 0.80000001])
    """
    dim = queries.shape[1]
    block = max(4, 8192 // max(1, dim))  # 64 KiB of float64 per buffer
    if len(codes) <= block:  # a write's few candidates: no buffers (the same products and sums)
        return (rows_of(codes).astype(np.float64) * queries[at]).sum(axis=1)  # type: ignore[no-any-return]
    out = np.empty(len(codes))
    a, b = np.empty((block, dim)), np.empty((block, dim))
    for lo in range(0, len(codes), block):
        k = min(block, len(codes) - lo)
        a[:k], b[:k] = rows_of(codes[lo : lo + k]), queries[at[lo : lo + k]]
        np.multiply(a[:k], b[:k], out=a[:k])
        out[lo : lo + k] = a[:k].sum(axis=1)
    return out
