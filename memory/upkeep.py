"""The upkeep half of ``MemoryStore``: the memory lifecycle that runs between rounds (DESIGN §10).

A mixin, so ``memory.store`` stays one readable file. ``consolidate`` distils strategies from groups of
episodes (``memory.strategies``); ``prune``, ``restore`` and ``history`` forget under a budget and undo
it from the removal log (``memory.pruning``, ``memory.restoring``). Each runs in one write transaction under the store's lock,
so a run killed midway leaves the store as it was before the call, and a rerun does what is left.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial

from connectors.chat import ChatModel
from connectors.errors import ConfigError
from memory import pruning, restoring, strategies
from memory.checks import check_namespace, check_texts
from memory.config import ForgetConfig, MemoryConfig, check_int, real_number
from memory.inserts import insert_batches
from memory.lifecycle import mark_superseded
from memory.mirror.sync import MirrorSet
from memory.pruning import PruneReport
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

    # -- forgetting with a budget (memory.pruning, memory.restoring) ---------------------------------------
    def prune(
        self,
        namespace: str | None = None,
        *,
        config: ForgetConfig | None = None,
        now: float | None = None,
        dry_run: bool = False,
    ) -> PruneReport:
        """Forget under a budget (``memory.pruning``): merge near-duplicates, evict the namespace down to
        ``config.capacity`` (default ``MemoryConfig.forget``, which forgets nothing), purge removal records
        older than ``config.retention``; every removal is recorded and can be undone with ``restore``.

        ``namespace`` None prunes every namespace; ``now`` (Unix time, default the clock) is when staleness
        is measured and the removals are stamped; ``dry_run`` reports what would go and changes nothing.
        One write transaction: killed midway, the store is as before. Run again, it removes nothing more.

        Example:
            >>> from connectors import HashEmbedder
            >>> from memory import MemoryStore
            >>> with MemoryStore("sqlite://", embedder=HashEmbedder()) as store:
            ...     _ = store.add_many([("Torcode Lager Nord?", "4471")] * 3)
            ...     store.prune(config=ForgetConfig(merge_similarity=0.99)).counts
            {'merged': 2}
        """
        names = None if namespace is None else [check_namespace(namespace)]
        cfg = self.config.forget if config is None else config
        if not isinstance(cfg, ForgetConfig):
            raise ConfigError(f"prune: config must be a memory.config.ForgetConfig, got {type(cfg).__name__}")
        if not isinstance(dry_run, bool):
            raise ConfigError(f"prune: dry_run must be True or False, got {dry_run!r:.80}")
        at = _moment(now, "prune")
        run = partial(
            pruning.prune, namespaces=names, config=cfg, now=at, dim=self.dim, dry_run=dry_run, alpha=self.config.alpha
        )
        if dry_run:
            return self._open.read(run)
        with self._open.locked():
            with self._open.write() as conn:
                report = run(conn)
            if report.removed:
                self._open.resync()  # deletions, merged keepers' values: read back from SQL
            return report

    def restore(
        self, ids: Sequence[str], *, namespace: str = "default", now: float | None = None
    ) -> restoring.RestoreReport:
        """Put removed memories of ``namespace`` back from the removal log (``memory.restoring``): ``ids`` are
        removal ids (``history``) or memory ids (their latest removal). A merged memory's keeper hands back
        what the merge gave it. Restoring twice changes nothing; records past ``MemoryConfig.forget.retention``
        (at ``now``, default the clock) are refused, as are unknown ids (both listed in the report)."""
        asked = check_texts(ids, "restore: ids", single="wrap it in a list")
        namespace, at = check_namespace(namespace), _moment(now, "restore")
        retention = self.config.forget.retention
        with self._open.locked():
            with self._open.write() as conn:
                report = restoring.restore(conn, asked, namespace, now=at, retention=retention)
            if report.restored:
                self._open.resync()  # the restored memories and the keepers' values, from SQL
            return report

    def history(
        self, namespace: str | None = None, *, limit: int = 100, since: float | None = None
    ) -> list[restoring.LoggedRemoval]:
        """The removal log, newest first (of ``namespace``, or every namespace): what went, why, when, whether
        it was restored and whether it still can be (``memory.restoring``). ``since``: removed at or after it."""
        namespace = None if namespace is None else check_namespace(namespace)
        check_int("history", "limit", limit, 1)
        start = None if since is None else _moment(since, "history: since")
        retention = self.config.forget.retention
        query = partial(restoring.history, namespace=namespace, limit=limit, since=start, retention=retention)
        return self._open.read(lambda conn: query(conn, now=time.time()))


def _moment(value: object, where: str) -> float:
    """``value`` as a finite Unix time (None: now)."""
    if value is None:
        return time.time()
    number = real_number(value)
    if number is None:
        raise ConfigError(f"{where}: now must be a finite Unix time in seconds (time.time()), got {value!r:.80}")
    return number
