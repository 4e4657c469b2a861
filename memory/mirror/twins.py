"""Items that share one vector, held once in the graph of ``index="adaptive"``.

The memories of one intent group carry their key's vector exactly, and a namespace written without grouping
can hold one text, so one vector, many times. HNSW cannot walk through copies: each copy's links go to the
other copies, and the group becomes an island. 25,000 items over 300 distinct vectors gave recall@10 0.24
and a best match 0.1 below the true one at every efSearch. So the graph holds each distinct vector once,
as a *node* named by the id of the first item that brought it, and ``Twins`` keeps the rest:

- ``pairs``: ``(node, item)`` for every other item with that node's vector, sorted by node, then item;
- ``hollow``: nodes whose own item was removed while twins of it remain (the vector stays in the graph);
- a hash of each node's 8-bit codes, to find the node of an incoming vector (built on first need).

A search of the graph returns nodes; ``expand`` turns them into items (a node's live items share its
similarity, so they are listed oldest first, as ties are broken).

Example:
    >>> import numpy as np
    >>> t = Twins()
    >>> v = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    >>> t.split(np.array([5, 8, 9]), v).tolist(), t.pairs.tolist()  # the first graph: copies in the batch
    ([True, False, True], [[5, 8]])
    >>> t.expand(np.array([[0.9, 0.1]], np.float32), np.array([[5, 9]]), 2)[1].tolist()
    [[5, 8, 9]]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

HASH_ROWS = 8192  # vectors hashed per step when the table is built (a bounded temporary)
_MULTIPLIERS: dict[int, np.ndarray] = {}


class Twins:
    """The items of the graph that are not its nodes, and the nodes whose own item is gone."""

    def __init__(self, pairs: np.ndarray | None = None, hollow: np.ndarray | None = None) -> None:
        self.pairs = np.zeros((0, 2), np.int64) if pairs is None else np.asarray(pairs, np.int64).reshape(-1, 2)
        self.hollow = np.zeros(0, np.int64) if hollow is None else np.unique(np.asarray(hollow, np.int64))
        self._hashes: tuple[np.ndarray, np.ndarray] | None = None  # (sorted hashes, their nodes)

    def __len__(self) -> int:
        """Items held as twins (not as nodes)."""
        return len(self.pairs)

    @property
    def empty(self) -> bool:
        return not len(self.pairs) and not len(self.hollow)

    def node_of(self, item: int) -> int:
        """The node whose vector ``item`` has (``item`` itself when it is not a twin)."""
        at = np.flatnonzero(self.pairs[:, 1] == item)
        return int(self.pairs[at[0], 0]) if len(at) else int(item)

    def items(self, nodes: np.ndarray) -> np.ndarray:
        """Every live item of the live ``nodes``: the nodes not hollow, then the twins."""
        own = nodes[~np.isin(nodes, self.hollow)] if len(self.hollow) else nodes
        return np.concatenate([own, self.pairs[:, 1]])

    # -- changes -------------------------------------------------------------------------------
    def split(
        self, ids: np.ndarray, keys: np.ndarray, *, stored: Callable[[int], np.ndarray] | None = None
    ) -> np.ndarray:
        """Sort incoming items into new nodes and twins by their ``keys`` (one row of bytes each: a vector's
        bits, or its 8-bit codes): a row equal to a live node's (``stored(node)`` reads it; None: no nodes
        yet, or none to compare with) or to an earlier incoming row makes the item a twin of that node.
        Returns which items are new nodes; the twins are recorded. Rows are found by their hash and then
        compared whole. Items with equal codes but different vectors are twins too: the graph only
        proposes candidates, and a recall scores each one exactly."""
        ids, keys = np.asarray(ids, np.int64), np.ascontiguousarray(keys).view(np.uint8).reshape(len(ids), -1)
        if not len(ids):
            return np.zeros(0, bool)
        hashes = row_hashes(keys)
        node = np.full(len(ids), -1, np.int64)
        if stored is not None and self._hashes is not None:
            table, nodes = self._hashes
            at = np.minimum(np.searchsorted(table, hashes), max(len(table) - 1, 0))
            hit = (table[at] == hashes) if len(table) else np.zeros(len(ids), bool)
            for i in np.flatnonzero(hit).tolist():
                found = int(nodes[at[i]])
                if np.array_equal(stored(found), keys[i]):
                    node[i] = found
        first: dict[int, int] = {}
        for i in np.flatnonzero(node < 0).tolist():  # copies within the batch
            j = first.setdefault(int(hashes[i]), i)
            if j != i and np.array_equal(keys[j], keys[i]):
                node[i] = ids[j]
        new = node < 0
        self._add_pairs(np.stack([node[~new], ids[~new]], axis=1))
        if self._hashes is not None:
            self._remember(hashes[new], ids[new])
        return new

    def remove(self, ids: np.ndarray) -> np.ndarray:
        """Forget removed items; returns the nodes left without a live item (the graph's tombstones).

        A twin leaves ``pairs``; a node with twins becomes hollow; any other id is returned as a node to
        kill (harmless when the graph does not hold it); a hollow node whose last twin left is returned too.
        """
        ids = np.unique(np.asarray(ids, np.int64))
        is_twin = np.isin(self.pairs[:, 1], ids)
        touched = np.unique(self.pairs[is_twin, 0])
        as_node = np.setdiff1d(ids, self.pairs[is_twin, 1])
        self.pairs = self.pairs[~is_twin]
        still = np.isin(as_node, self.pairs[:, 0])
        self.hollow = np.union1d(self.hollow, as_node[still])
        orphans = self.hollow[np.isin(self.hollow, touched) & ~np.isin(self.hollow, self.pairs[:, 0])]
        self.hollow = np.setdiff1d(self.hollow, orphans)
        kill = np.union1d(as_node[~still], orphans)
        self._forget(kill)
        return kill

    def _add_pairs(self, pairs: np.ndarray) -> None:
        if len(pairs):
            both = np.concatenate([self.pairs, pairs])
            self.pairs = both[np.lexsort((both[:, 1], both[:, 0]))]

    # -- search --------------------------------------------------------------------------------
    def expand(self, sims: np.ndarray, nodes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each row's nodes as their live items: up to ``k`` of each node (its own item, then its oldest
        twins), best first, the older first among equal similarities; id -1 and -inf pad short rows.

        Rows are not cut to ``k``: the graph's similarities come from 8-bit codes, so two nodes that tie
        exactly (distinct texts at one cosine) may come out in either order, and a cut would keep the
        newer items of one; the recall scores every candidate exactly and breaks the tie by age."""
        if self.empty:
            return sims, nodes
        n, width = nodes.shape
        flat = nodes.ravel()
        lo = np.searchsorted(self.pairs[:, 0], flat, "left")
        own = (flat >= 0) & ~np.isin(flat, self.hollow)
        count = np.minimum(np.searchsorted(self.pairs[:, 0], flat, "right") - lo, k - own) * (flat >= 0)
        per = own + count
        start = np.cumsum(per) - per
        total = int(per.sum())
        out_ids = np.empty(total, np.int64)
        out_ids[start[own]] = flat[own]
        twins = np.repeat(np.arange(len(flat)), count)
        offset = np.arange(len(twins)) - np.repeat(np.cumsum(count) - count, count)
        out_ids[start[twins] + own[twins] + offset] = self.pairs[lo[twins] + offset, 1]
        row = np.repeat(np.arange(len(flat)) // width, per)
        out_sims = np.repeat(sims.ravel(), per)
        order = np.lexsort((out_ids, -out_sims, row))  # equal similarities (a node's items): oldest first
        out_ids, out_sims = out_ids[order], out_sims[order]
        pos = np.arange(total) - np.searchsorted(row, np.arange(n))[row]
        wide = int(pos.max()) + 1 if total else 0
        ids = np.full((n, wide), -1, np.int64)
        best = np.full((n, wide), -np.inf, np.float32)
        ids[row, pos] = out_ids
        best[row, pos] = out_sims
        return best, ids

    # -- the hash table ------------------------------------------------------------------------
    def build_table(self, nodes: np.ndarray, read: Callable[[int, int], np.ndarray]) -> None:
        """Hash every node's key (``read(lo, hi)``: the key rows of nodes ``lo..hi`` in ``nodes`` order); until
        then a split finds copies within its own batch only."""
        parts = [row_hashes(read(lo, min(lo + HASH_ROWS, len(nodes)))) for lo in range(0, len(nodes), HASH_ROWS)]
        self._hashes = None
        self._remember(np.concatenate(parts) if parts else np.zeros(0, np.uint64), nodes)

    def drop_table(self) -> None:
        """Forget the hashes (the graph's codes changed: it was built again); built again on first need."""
        self._hashes = None

    def adopt_table(self, other: Twins, dead: np.ndarray) -> None:
        """Take ``other``'s table (built outside a lock), less the ``dead`` nodes killed since."""
        self._hashes = other._hashes
        self._forget(dead)

    def _remember(self, hashes: np.ndarray, nodes: np.ndarray) -> None:
        """Add nodes to the sorted table: an insertion (a merge adds a few hundred to a million)."""
        table, held = self._hashes if self._hashes is not None else (np.zeros(0, np.uint64), np.zeros(0, np.int64))
        order = np.argsort(hashes, kind="stable")
        hashes, nodes = hashes[order], np.asarray(nodes, np.int64)[order]
        at = np.searchsorted(table, hashes, side="right")
        self._hashes = (np.insert(table, at, hashes), np.insert(held, at, nodes))

    def _forget(self, nodes: np.ndarray) -> None:
        if self._hashes is not None and len(nodes):
            keep = ~np.isin(self._hashes[1], nodes)
            self._hashes = (self._hashes[0][keep], self._hashes[1][keep])

    @property
    def has_table(self) -> bool:
        return self._hashes is not None

    # -- files ---------------------------------------------------------------------------------
    def rows(self) -> np.ndarray:
        """What is saved: the pairs, then ``(node, -1)`` for each hollow node."""
        hollow = np.stack([self.hollow, np.full(len(self.hollow), -1, np.int64)], axis=1)
        return np.concatenate([self.pairs, hollow])

    @classmethod
    def from_rows(cls, rows: np.ndarray) -> Twins:
        rows = np.asarray(rows, np.int64).reshape(-1, 2)
        pairs = rows[rows[:, 1] >= 0]
        return cls(pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))], rows[rows[:, 1] < 0, 0])


def row_hashes(rows: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row of bytes (equal rows, equal hashes; a match is still compared whole)."""
    rows = np.ascontiguousarray(rows).view(np.uint8)
    width = rows.shape[1]
    if width not in _MULTIPLIERS:
        odd = np.random.default_rng(width).integers(1, 2**63, width, dtype=np.uint64) | np.uint64(1)
        _MULTIPLIERS[width] = np.asarray(odd, np.uint64)
    h = np.asarray(rows.astype(np.uint64) @ _MULTIPLIERS[width])  # wraps modulo 2**64
    return h ^ (h >> np.uint64(31))
