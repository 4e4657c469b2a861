"""The upkeep half of ``MemoryStore``: the memory lifecycle that runs between rounds (DESIGN §10).

A mixin, so ``memory.store`` stays one readable file. ``consolidate`` distils strategies from groups of
episodes (``memory.strategies``); ``prune``, ``restore`` and ``history`` forget under a budget and undo
it from the removal log (``memory.pruning``). Each runs in one write transaction under the store's lock,
so a run killed midway leaves the store as it was before the call, and a rerun does what is left.
"""

from __future__ import annotations

from memory.config import MemoryConfig
from memory.reading import StoreReading


class StoreUpkeep(StoreReading):
    """``consolidate``, ``prune``, ``restore`` and ``history`` of ``MemoryStore`` (which sets the attributes
    declared here and in ``StoreReading``)."""

    config: MemoryConfig
