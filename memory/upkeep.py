"""The upkeep half of ``MemoryStore``: the memory lifecycle that runs between rounds (DESIGN §10).

A mixin, so ``memory.store`` stays one readable file. ``consolidate`` distils strategies from groups of
episodes (``memory.strategies``); ``prune``, ``restore`` and ``history`` forget under a budget and undo
it from the removal log (``memory.pruning``). Each runs in one write transaction under the store's lock,
so a run killed midway leaves the store as it was before the call, and a rerun does what is left.
"""

from __future__ import annotations

import time
from functools import partial

from connectors.chat import ChatModel
from memory import strategies
from memory.checks import check_namespace
from memory.config import MemoryConfig, check_int
from memory.inserts import insert_batches
from memory.lifecycle import mark_superseded
from memory.mirror.sync import MirrorSet
from memory.reading import StoreReading
from memory.schema import bump
from memory.strategies import Consolidation


class StoreUpkeep(StoreReading):
    """``consolidate``, ``prune``, ``restore`` and ``history`` of ``MemoryStore`` (which sets the attributes
    declared here and in ``StoreReading``)."""

    config: MemoryConfig
    _mirrors: MirrorSet

    def consolidate(
        self, namespace: str = "default", *, llm: ChatModel | None = None, min_size: int = 3
    ) -> Consolidation:
        """Distil a strategy from each intent group of ``namespace`` with at least ``min_size`` valid
        episodes, successes and failures together (``memory.strategies``): by ``llm`` (one call per group
        that changed since its last strategy) or, without one, by rule. Strategies are memories of kind
        ``"strategy"`` with their own Q, recalled as ``RetrievalConfig.draw_from`` says.

        Idempotent: a group whose episodes are the ones its stored strategy came from costs nothing; a
        group that changed gets a new strategy superseding the old one (which hands over its Q and
        visits). Killed midway, the store is as before or complete (one write transaction after the
        model calls).
        """
        namespace = check_namespace(namespace)
        check_int("consolidate", "min_size", min_size, 1)
        read = self._open.read(partial(strategies.read_groups, namespace=namespace))
        planned = strategies.plan(namespace, read, llm=llm, min_size=min_size, q_init=self.config.q_init)
        if planned.batch is None:
            return planned.report
        with self._open.locked():
            with self._open.write() as conn:
                batch = {namespace: planned.batch}
                _, done = insert_batches(conn, self._mirrors, batch, config=self.config, group=True, skip_existing=True)
                strategies.link_sources(conn, namespace, planned.sources)
                if planned.replaced:
                    generation, _ = bump(conn)
                    now = time.time()
                    mark_superseded(conn, planned.replaced, dict.fromkeys(planned.replaced.values(), now), generation)
            if not self._mirrors.apply_inserts(done) or planned.replaced:
                self._open.resync()  # the superseded strategies leave the mirror
        return planned.report
