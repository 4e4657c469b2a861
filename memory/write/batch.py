"""New memories about to be inserted, column by column (``NewItems``): what every write path builds
(``memory.write.adding``, an import, a release, a consolidation) and ``memory.write.inserts`` stores.

Example:
    >>> import numpy as np
    >>> batch = NewItems.build(["sort a list"], ["use sorted()"], np.ones((1, 2), dtype=np.float32), q=0.0,
    ...                        success=[True], meta=None)
    >>> len(batch), batch.items("default")[0].meta
    (1, {'success': True})
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from connectors.errors import ConfigError
from memory.storage.records import MemoryItem
from memory.write.checks import check_meta, check_success, new_ids


@dataclass
class NewItems:
    """Column-wise memories about to be inserted (ids and timestamps may come from an import)."""

    ids: list[str]
    intents: list[str]
    experiences: list[str]
    vecs: np.ndarray
    q: np.ndarray
    visits: np.ndarray
    success: list[bool | None]
    created: np.ndarray
    updated: np.ndarray
    metas: list[dict[str, Any]]
    valid_from: np.ndarray
    valid_to: list[float | None]
    superseded_by: list[str | None]
    groups: list[str | None] | None = None
    """Per row, the task it was an attempt at (``WriteEntry.task``): rows of one task share one intent."""
    facts: list[str | None] | None = None
    """Per row, the fact it states (``memory.upkeep.supersession``): set by writes that may supersede older memories."""
    kinds: list[str] | None = None
    """Per row, ``"episode"`` or ``"strategy"`` (``memory.upkeep.strategies``); None: all episodes."""

    @classmethod
    def build(
        cls,
        intents_: list[str],
        experiences: list[str],
        vecs: np.ndarray,
        *,
        q: float | Sequence[float],
        success: Sequence[bool | None],
        meta: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
        ids: Sequence[str] | None = None,
        visits: Sequence[int] | None = None,
        created: Sequence[float] | None = None,
        updated: Sequence[float] | None = None,
        groups: Sequence[str | None] | None = None,
        valid_from: Sequence[float] | None = None,
        valid_to: Sequence[float | None] | None = None,
        superseded_by: Sequence[str | None] | None = None,
        facts: Sequence[str | None] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> NewItems:
        n = len(intents_)
        now = time.time()
        if meta is None or isinstance(meta, Mapping):
            metas = [check_meta(meta, "meta")] * n
        else:
            if len(meta) != n:
                raise ConfigError(f"meta must be one mapping or one per row ({n}), got {len(meta)} mappings")
            metas = [check_meta(m, f"meta[{i}]") for i, m in enumerate(meta)]
        created_ = np.full(n, now) if created is None else np.asarray(created, dtype=np.float64)
        return cls(
            ids=new_ids(n) if ids is None else list(ids),
            intents=list(intents_),
            experiences=list(experiences),
            vecs=vecs,
            q=np.broadcast_to(np.asarray(q, dtype=np.float64), (n,)).copy(),
            visits=np.zeros(n, dtype=np.int64) if visits is None else np.asarray(visits, dtype=np.int64),
            success=[check_success(s, "success") for s in success],
            created=created_,
            updated=created_.copy() if updated is None else np.asarray(updated, dtype=np.float64),
            metas=metas,
            valid_from=created_.copy() if valid_from is None else np.asarray(valid_from, dtype=np.float64),
            valid_to=[None] * n if valid_to is None else list(valid_to),
            superseded_by=[None] * n if superseded_by is None else list(superseded_by),
            groups=None if groups is None or all(g is None for g in groups) else list(groups),
            facts=None if facts is None else list(facts),
            kinds=None if kinds is None else list(kinds),
        )

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, keep: np.ndarray | slice) -> NewItems:
        """The rows where the boolean mask ``keep`` is true (or the rows of a slice)."""
        pos = np.arange(len(self))[keep] if isinstance(keep, slice) else np.flatnonzero(keep)
        return NewItems(
            ids=[self.ids[i] for i in pos],
            intents=[self.intents[i] for i in pos],
            experiences=[self.experiences[i] for i in pos],
            vecs=self.vecs[pos],
            q=self.q[pos],
            visits=self.visits[pos],
            success=[self.success[i] for i in pos],
            created=self.created[pos],
            updated=self.updated[pos],
            metas=[self.metas[i] for i in pos],
            valid_from=self.valid_from[pos],
            valid_to=[self.valid_to[i] for i in pos],
            superseded_by=[self.superseded_by[i] for i in pos],
            groups=None if self.groups is None else [self.groups[i] for i in pos],
            facts=None if self.facts is None else [self.facts[i] for i in pos],
            kinds=None if self.kinds is None else [self.kinds[i] for i in pos],
        )

    def items(self, namespace: str) -> list[MemoryItem]:
        """The ``MemoryItem`` values these rows become once stored in ``namespace``."""
        # tolist() gives the Python floats and ints that float()/int() of each element would, in one call
        q, visits, created, start = (a.tolist() for a in (self.q, self.visits, self.created, self.valid_from))
        kinds = ["episode"] * len(self.ids) if self.kinds is None else self.kinds
        return [
            MemoryItem(self.ids[i], namespace, self.intents[i], self.experiences[i], q[i], visits[i], created[i],
                       {**self.metas[i], "success": self.success[i]}, start[i], self.valid_to[i],
                       self.superseded_by[i], kinds[i])
            for i in range(len(self.ids))
        ]  # fmt: skip

    def kind(self, i: int) -> str:
        return "episode" if self.kinds is None else self.kinds[i]

    def supersede(self, by: Mapping[str, str]) -> None:
        """Mark the rows ``by`` names superseded by a later row of this batch (valid until that row's start)."""
        start = dict(zip(self.ids, self.valid_from.tolist(), strict=True))
        for i, item_id in enumerate(self.ids):
            if item_id in by:
                self.valid_to[i], self.superseded_by[i] = start[by[item_id]], by[item_id]
