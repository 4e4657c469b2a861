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

from memory.mirror import nearest
from memory.mirror.keyrows import FileRows
from memory.recall.scoring import phase_a
from memory.storage.records import MemoryItem

if TYPE_CHECKING:
    from memory.mirror.index import SearchIndex

# float32 inner products of unit vectors are within ~1e-6 of the exact cosine; a wide safety factor.
SIM_MARGIN = 1e-4
FILE_ROWS_AT_MOST = 4096  # more key rows than this at once (a rebuild, a bulk add) are read through the map
EPISODE, STRATEGY = 0, nearest.STRATEGY
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
        episodes = draw_from == "episodes"
        if len(queries) == 1:  # a recall: one query, on flat arrays
            return [nearest.one(self, queries[0], ids[0], sims[0], k1, SIM_MARGIN, episodes)]
        out: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for lo in range(0, len(queries), 64):  # a bounded product: 64 queries' candidate vectors at a time
            out.extend(nearest.batch(self, queries[lo : lo + 64], ids[lo : lo + 64], sims[lo : lo + 64], k1,
                                     SIM_MARGIN, episodes))  # fmt: skip
        return out

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
