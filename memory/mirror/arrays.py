"""The NumPy mirror of one namespace: ids, Q-values, visits and intent keys in arrays.

The mirror is what makes phase B cost microseconds: retrieval reads Q from here, never from SQL. It
is kept in ``seq`` order (oldest first), which is what the tie-break "older item first" relies on.
An item's vector is its intent key's, so vectors are held once per key (``keys``) and items point at
their key (``intent_codes``). The store keeps the mirror current; this module only holds arrays and
does vectorised bookkeeping.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from memory.mirror.keyrows import FileRows, pair_sims
from memory.recall.scoring import phase_a
from memory.storage.records import MemoryItem

if TYPE_CHECKING:
    from memory.mirror.index import SearchIndex

# float32 inner products of unit vectors are within ~1e-6 of the exact cosine; a wide safety factor.
SIM_MARGIN = 1e-4
FILE_ROWS_AT_MOST = 4096  # more key rows than this at once (a rebuild, a bulk add) are read through the map
EPISODE, STRATEGY = 0, 1
"""The mirror's kind codes (``MemoryItem.kind``)."""
ROW_COLUMNS = ("seqs", "ids", "q", "visits", "created", "intent_codes", "kinds")
KEY_COLUMNS = ("key_ids", "key_seqs", "keys")
"""The mirror's columns by name: one entry per item, and one per intent key (``memory.mirror.snapshot``)."""


def kind_codes(kinds: Iterable[str | None]) -> np.ndarray:
    """``"episode"``/``"strategy"`` (or None: an episode) as the mirror's int8 codes."""
    return np.array([STRATEGY if k == "strategy" else EPISODE for k in kinds], dtype=np.int8)


class Column:
    """A growable NumPy column (amortised O(1) append), 1-D or (n, width).

    A column may also hold a saved snapshot's memory map (``adopt``): private pages, so writing to it never
    reaches the file, and room after its values, so appends do not copy it. A snapshot's text columns are
    fixed-width strings; they become the column's own dtype (object) on first use.

    Example:
        >>> col = Column(np.int64)
        >>> col.extend(np.arange(40))
        >>> col.values[-1], len(col.values)
        (np.int64(39), 40)
    """

    def __init__(self, dtype: type | str, width: int | None = None) -> None:
        shape = (16,) if width is None else (16, width)
        self.dtype = np.dtype(dtype)
        self._data = np.empty(shape, dtype=dtype)
        self.n = 0

    @property
    def values(self) -> np.ndarray:
        if self._data.dtype != self.dtype:  # adopted as saved (ids as fixed-width text): converted once
            self._data = self._data[: self.n].astype(self.dtype)
        return self._data[: self.n]

    @property
    def saved(self) -> np.ndarray:
        """The values as held, not converted (what a snapshot writes back)."""
        return self._data[: self.n]

    def adopt(self, data: np.ndarray, n: int) -> None:
        """Hold ``data`` (its first ``n`` entries are the values, the rest room to grow) instead of a copy."""
        self._data, self.n = data, n

    def extend(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        current = self.values
        if need > len(self._data):
            grown = np.empty((max(need, 2 * len(self._data)),) + self._data.shape[1:], dtype=self._data.dtype)
            grown[: self.n] = current
            self._data = grown
        self._data[self.n : need] = values
        self.n = need

    def replace(self, values: np.ndarray) -> None:
        self.n = 0
        self.extend(values)


@dataclass(frozen=True)
class Rows:
    """Rows to add to a mirror, in ``seq`` order."""

    seqs: np.ndarray
    ids: np.ndarray
    q: np.ndarray
    visits: np.ndarray
    created: np.ndarray
    intent_codes: np.ndarray  # positions in the mirror's intent keys
    emb: np.ndarray  # their vectors (the keys'), for the vector index
    kinds: np.ndarray | None = None  # EPISODE / STRATEGY codes; None: all episodes


class NamespaceMirror:
    """Arrays for one namespace plus its vector index (ids = the items' ``seq``)."""

    def __init__(self, namespace: str, dim: int, index: SearchIndex) -> None:
        self.namespace = namespace
        self.dim = dim
        self.index: SearchIndex = index
        self._seqs = Column(np.int64)
        self._ids = Column(object)
        self._q = Column(np.float64)
        self._visits = Column(np.int64)
        self._created = Column(np.float64)
        self._intents = Column(np.int64)
        self._kinds = Column(np.int8)
        self._key_ids = Column(object)
        self._key_seqs = Column(np.int64)
        self._keys = Column(np.float32, dim)
        self._key_pos: dict[str, int] | None = {}
        self._group_sizes: np.ndarray | None = None
        self._saved_keys: FileRows | None = None  # a snapshot's keys, read from its file (``key_rows``)

    def columns(self) -> dict[str, np.ndarray]:
        """Every column by name (``ROW_COLUMNS``, ``KEY_COLUMNS``) as held: text columns adopted from a
        snapshot may still be its fixed-width strings."""
        return {name: col.saved for name, col in self._named().items()}

    def adopt(
        self, columns: Mapping[str, np.ndarray], rows: int, keys: int, *, keys_file: FileRows | None = None
    ) -> None:
        """Take a saved snapshot's columns (``memory.mirror.snapshot``: private memory maps with room after
        the first ``rows`` items and ``keys`` keys) as this empty mirror's; nothing is copied until used.
        ``keys_file`` reads the saved keys without the map (``key_rows``)."""
        for name, col in self._named().items():
            col.adopt(columns[name], keys if name in KEY_COLUMNS else rows)
        self._saved_keys = keys_file
        self._key_pos = None  # built from key_ids on first use: a million-entry dict costs ~0.5 s
        self._group_sizes = None

    def _named(self) -> dict[str, Column]:
        cols = (self._seqs, self._ids, self._q, self._visits, self._created, self._intents, self._kinds)
        return dict(zip(ROW_COLUMNS + KEY_COLUMNS, cols + (self._key_ids, self._key_seqs, self._keys), strict=True))

    # -- read access ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._seqs.n

    @property
    def seqs(self) -> np.ndarray:
        return self._seqs.values

    @property
    def ids(self) -> np.ndarray:
        return self._ids.values

    @property
    def q(self) -> np.ndarray:
        return self._q.values

    @property
    def visits(self) -> np.ndarray:
        return self._visits.values

    @property
    def created(self) -> np.ndarray:
        return self._created.values

    @property
    def intent_codes(self) -> np.ndarray:
        return self._intents.values

    @property
    def kinds(self) -> np.ndarray:
        return self._kinds.values

    def strategy_count(self) -> int:
        return int(np.count_nonzero(self.kinds == STRATEGY))

    def vectors(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The vectors of the given rows (all rows when None): their intent keys' vectors."""
        return self.keys[self.intent_codes] if rows is None else self.key_rows(self.intent_codes[rows])

    def key_rows(self, codes: np.ndarray) -> np.ndarray:
        """The vectors of the given intent keys; a snapshot's are read from its file, not its map."""
        saved = self._saved_keys
        if saved is None or len(codes) > FILE_ROWS_AT_MOST:
            return self.keys[codes]
        inside = codes < saved.count
        if inside.all():
            return saved.take(codes)
        out = np.empty((len(codes), self.dim), np.float32)
        out[inside], out[~inside] = saved.take(codes[inside]), self.keys[codes[~inside]]
        return out

    @property
    def keys(self) -> np.ndarray:
        return self._keys.values

    @property
    def key_ids(self) -> np.ndarray:
        return self._key_ids.values

    @property
    def key_seqs(self) -> np.ndarray:
        return self._key_seqs.values

    @property
    def key_pos(self) -> dict[str, int]:
        """Each intent key's position by id."""
        if self._key_pos is None:
            self._key_pos = {str(k): i for i, k in enumerate(self.key_ids.tolist())}
        return self._key_pos

    def key_codes(self, key_ids: list[str]) -> np.ndarray:
        """The positions of these intent keys, -1 for those not held. A few ids looked up in a snapshot's
        keys are compared with its text column, so catching up a small delta builds no dict."""
        held = self._key_ids.saved
        if self._key_pos is None and held.dtype.kind == "U" and len(key_ids) < 64:
            found = [np.flatnonzero(held == k) for k in key_ids]
            return np.array([int(f[0]) if len(f) else -1 for f in found], dtype=np.int64)
        pos = self.key_pos
        return np.array([pos.get(k, -1) for k in key_ids], dtype=np.int64)

    def rows_of_seqs(self, seqs: np.ndarray) -> np.ndarray:
        """Row of each seq, or -1 for seqs this mirror does not hold."""
        seqs = np.asarray(seqs, dtype=np.int64)
        if not len(self):
            return np.full(len(seqs), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.seqs, seqs), len(self) - 1)
        return np.where(self.seqs[pos] == seqs, pos, -1).astype(np.int64)

    # -- mutation ------------------------------------------------------------------------------
    def append(self, rows: Rows, *, index: bool = True) -> None:
        """Add rows (and to the index unless ``index`` is false); keeps seq order even if a late
        writer's rows interleave with ours."""
        if not len(rows.seqs):
            return
        in_order = not len(self) or int(rows.seqs.min()) > int(self.seqs[-1])
        self._group_sizes = None
        for col, values in self._columns(rows):
            col.extend(values)
        if index:
            self.index.add(rows.seqs, rows.emb)
        if not in_order or np.any(np.diff(rows.seqs) <= 0):
            self._reorder(np.argsort(self.seqs, kind="stable"))

    def set_values(self, rows: np.ndarray, q: np.ndarray, visits: np.ndarray) -> None:
        self.q[rows] = q
        self.visits[rows] = visits

    def remove(self, rows: np.ndarray) -> None:
        """Drop rows by position (and from the index)."""
        if not len(rows):
            return
        self.index.remove(self.seqs[rows])
        keep = np.ones(len(self), dtype=bool)
        keep[rows] = False
        self._reorder(np.flatnonzero(keep))

    def add_keys(self, ids: np.ndarray, seqs: np.ndarray, keys: np.ndarray) -> None:
        """Register intent keys (group representatives), oldest first."""
        if self._key_pos is not None:
            for i, key_id in enumerate(ids):
                self._key_pos[str(key_id)] = self._key_ids.n + i
        self._key_ids.extend(np.asarray(ids, dtype=object))
        self._key_seqs.extend(np.asarray(seqs, dtype=np.int64))
        self._keys.extend(np.asarray(keys, dtype=np.float32).reshape(-1, self.dim))

    def _columns(self, rows: Rows) -> list[tuple[Column, np.ndarray]]:
        return [
            (self._seqs, rows.seqs),
            (self._ids, rows.ids),
            (self._q, rows.q),
            (self._visits, rows.visits),
            (self._created, rows.created),
            (self._intents, rows.intent_codes),
            (self._kinds, np.zeros(len(rows.seqs), np.int8) if rows.kinds is None else rows.kinds),
        ]

    def _reorder(self, take: np.ndarray) -> None:
        self._group_sizes = None
        for col in (self._seqs, self._ids, self._q, self._visits, self._created, self._intents, self._kinds):
            col.replace(col.values[take])

    # -- search --------------------------------------------------------------------------------
    def exact_sims(self, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Cosine of the query with the given rows, in float64.

        Row-wise products summed per row: the result depends only on the two vectors, so the items of
        one intent group (identical key vectors) always tie exactly, whichever search produced them.
        """
        return (self.vectors(rows).astype(np.float64) * np.asarray(query, dtype=np.float64)).sum(axis=1)

    def candidates(
        self, queries: np.ndarray, ids: np.ndarray, sims: np.ndarray, k1: int, draw_from: str = "both"
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """For each query: rows (strategies first, then ascending) that surely contain its k1 nearest items,
        their exact similarities, and the positions of the k1 nearest among them (``phase_a`` order: best
        first; on ties a strategy before an episode — it was distilled from its group's episodes and would
        otherwise lose every tie to them — then the older item).

        ``queries`` (n, dim) are searched together: ``ids`` and ``sims`` (n, width) are the index's answer,
        each row best first (searched with a margin beyond k1; an index holds each id once, -1 pads). Only
        ids whose float32 similarity comes within ``SIM_MARGIN`` of the k1-th are re-scored exactly:
        rounding cannot move the others into the k1 nearest (an index whose ``exact_scores`` is false, the
        adaptive graph's 8-bit codes, has all of them re-scored). When the k1-th nearest ties with group
        members the index did not return, the whole group joins, so "equal similarity → older item" is
        decided here and not by the index. ``draw_from`` (``RetrievalConfig.draw_from``): ``"strategies"``
        scores the strategies exactly (they are few; the index's answer is not needed), ``"episodes"``
        leaves them out of the index's answer (searched that much wider: ``memory.recall.planning.search``).
        """
        if draw_from == "strategies":
            rows = np.flatnonzero(self.kinds == STRATEGY)
            exact = [self.exact_sims(rows, query) for query in queries]
            return [(rows, e, phase_a(e, k1, -np.inf)) for e in exact]
        out: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for lo in range(0, len(queries), 64):  # a bounded product: 64 queries' candidate vectors at a time
            out.extend(self._nearest(queries[lo : lo + 64], ids[lo : lo + 64], sims[lo : lo + 64], k1, draw_from))
        return out

    def _nearest(
        self, queries: np.ndarray, ids: np.ndarray, sims: np.ndarray, k1: int, draw_from: str
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``candidates`` for a few queries, vectorised across them: every number is the one the query
        alone would get (``_scored``)."""
        n = len(queries)
        if not n or not len(self):
            return [(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.intp))] * n
        rows = self.rows_of_seqs(np.asarray(ids).ravel()).reshape(n, -1)
        keep = rows >= 0
        if draw_from == "episodes":
            keep &= self.kinds[np.maximum(rows, 0)] != STRATEGY
        wide = keep.sum(axis=1) > k1
        if not getattr(self.index, "exact_scores", True):  # approximate similarities: every candidate is scored
            wide[:] = False
        if wide.any():  # the k1-th kept similarity of each query, less the margin, is its floor
            kth = np.argmax(np.cumsum(keep, axis=1) >= k1, axis=1)
            floor = sims[np.arange(n), kth] - SIM_MARGIN
            keep &= ~wide[:, None] | (sims >= floor[:, None])
        every = np.arange(n)
        rows, exact, order, counts, known = self._scored(queries, every, rows, keep)
        out = [(rows[i, :c], exact[i, :c], order[i, : min(k1, c)]) for i, c in enumerate(counts.tolist())]
        short, pairs = self._tied_groups(rows, exact, order, counts, k1)
        if len(short):  # the k1-th nearest ties with group members not all here: the whole groups join
            joined = self._with_groups(short, rows[short], counts[short], pairs, draw_from)
            rows, exact, order, counts, _ = self._scored(queries, short, *joined, known=known)
            for j, (i, c) in enumerate(zip(short.tolist(), counts.tolist(), strict=True)):
                out[i] = (rows[j, :c], exact[j, :c], order[j, : min(k1, c)])
        return out

    def _scored(
        self,
        queries: np.ndarray,
        which: np.ndarray,
        rows: np.ndarray,
        keep: np.ndarray,
        known: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """For the queries ``which`` (one per row of ``rows``): their kept rows in tie order (``_tie_order``),
        exact similarities and the order ``phase_a`` ranks them in (best first, ties by position), padded
        to one width (-inf past each one's count); the counts; and the similarities by ``query * groups +
        intent code`` (an item's vector is its key's, so each is computed once; ``known``: taken from there).
        """
        n, size, groups = len(which), len(self), len(self.group_sizes)
        counts = keep.sum(axis=1)
        width = int(counts.max())
        episode = self.kinds[np.maximum(rows, 0)] != STRATEGY
        key = np.sort(np.where(keep, rows + size * episode, 2 * size), axis=1)[:, :width]  # left out: last
        rows = np.where(key >= size, key - size, key)
        valid = np.arange(width) < counts[:, None]
        pair = which[np.nonzero(valid)[0]] * groups + self.intent_codes[rows[valid]]
        if known is None:
            uniq, inverse = np.unique(pair, return_inverse=True)
            known = (uniq, pair_sims(self.key_rows, uniq % groups, queries, uniq // groups))
        else:
            inverse = np.searchsorted(known[0], pair)
        exact = np.full((n, width), -np.inf)
        exact[valid] = known[1][inverse]
        return rows, exact, np.argsort(-exact, axis=1, kind="stable"), counts, known

    def _tied_groups(
        self, rows: np.ndarray, exact: np.ndarray, order: np.ndarray, counts: np.ndarray, k1: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The queries whose k1-th nearest ties with members of a group not all among their candidates, and
        every group tied there, as ``query * groups + intent code`` (sorted)."""
        n, width = rows.shape
        if not width:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        kth = exact[np.arange(n), order[:, min(k1, width) - 1]]
        checked = (counts < len(self)) & (counts >= k1)
        tq, tp = np.nonzero((exact == kth[:, None]) & checked[:, None])
        sizes = self.group_sizes
        if (sizes[self.intent_codes[rows[tq, tp]]] == 1).all():  # each tied item alone in its group: none short
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        pairs, present = np.unique(tq * len(sizes) + self.intent_codes[rows[tq, tp]], return_counts=True)
        short = np.unique(pairs[sizes[pairs % len(sizes)] > present] // len(sizes))
        return short, pairs[np.isin(pairs // len(sizes), short)]

    def _with_groups(
        self, short: np.ndarray, rows: np.ndarray, counts: np.ndarray, pairs: np.ndarray, draw_from: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``short`` queries' candidates (``rows``, ``counts``) joined by every member of their tied
        groups (``pairs``), as ``_scored`` takes them: one O(n) pass over the mirror for the batch."""
        groups, size = len(self.group_sizes), len(self)
        which, codes = np.searchsorted(short, pairs // groups), pairs % groups
        members = np.flatnonzero(np.isin(self.intent_codes, codes))
        if draw_from == "episodes":
            members = members[self.kinds[members] != STRATEGY]
        members = members[np.argsort(self.intent_codes[members], kind="stable")]
        lo, hi = (np.searchsorted(self.intent_codes[members], codes, side) for side in ("left", "right"))
        per = hi - lo  # each (query, group) pair gets its group's members lo..hi
        at = np.arange(per.sum()) - np.repeat(np.cumsum(per) - per, per) + np.repeat(lo, per)
        had = np.arange(rows.shape[1]) < counts[:, None]
        old, new = np.nonzero(had)[0] * size + rows[had], np.repeat(which, per) * size + members[at]
        joined = np.unique(np.concatenate([old, new]))
        count = np.bincount(joined // size, minlength=len(short))
        pos = np.arange(len(joined)) - np.repeat(np.cumsum(count) - count, count)
        out = np.zeros((len(short), int(count.max())), dtype=np.int64)
        out[joined // size, pos] = joined % size
        return out, np.arange(out.shape[1]) < count[:, None]

    def _tie_order(self, rows: np.ndarray) -> np.ndarray:
        """Rows in the order ``phase_a`` breaks ties by: strategies first, then ascending (older first)."""
        rows = np.sort(rows)
        return rows[np.argsort(self.kinds[rows] != STRATEGY, kind="stable")]

    @property
    def group_sizes(self) -> np.ndarray:
        """Items per intent key (cached until the rows change)."""
        if self._group_sizes is None:
            self._group_sizes = np.bincount(self.intent_codes, minlength=self._key_ids.n)
        return self._group_sizes


@dataclass(frozen=True)
class Inserted:
    """What one committed insert changes in the mirror: new intent keys and rows in, evicted and superseded
    rows out."""

    generation: int
    items: list[MemoryItem]
    rows: Rows
    key_ids: np.ndarray
    key_seqs: np.ndarray
    key_vecs: np.ndarray
    evicted_rows: np.ndarray
    superseded: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """The seqs of stored rows the insert superseded: they leave the mirror (``memory.upkeep.supersession``)."""
