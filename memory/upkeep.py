"""The upkeep half of ``MemoryStore``: the memory lifecycle that runs between rounds
(docs/design/decisions.md, "A memory that matures"), and the operator's defences against a writer (issue 40).

A mixin, so ``memory.store`` stays one readable file. ``consolidate`` distils strategies from groups of
episodes (``memory.strategies``); ``prune``, ``restore`` and ``history`` forget under a budget and undo
it from the removal log (``memory.pruning``, ``memory.restoring``); ``quarantined`` and ``release`` read and
free what the trust policy held back (``memory.quarantine``); ``distrust`` and ``undo_distrust`` remove or
reset a writer's memories and put them back (``memory.distrust``). Each runs in one write transaction under
the store's lock, so a run killed midway leaves the store as it was before the call, and a rerun does what is left.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial

from connectors.chat import ChatModel
from connectors.errors import ConfigError
from memory import distrust as distrusting
from memory import pruning, quarantine, restoring, strategies
from memory.checks import check_namespace, check_texts, check_writer
from memory.config import ForgetConfig, MemoryConfig, check_int, real_number
from memory.inserts import insert_batches
from memory.lifecycle import mark_superseded
from memory.mirror.sync import MirrorSet
from memory.pruning import PruneReport
from memory.reading import StoreReading
from memory.records import MemoryItem
from memory.schema import bump
from memory.strategies import Consolidation


class StoreUpkeep(StoreReading):
    """``consolidate``, ``prune``, ``restore``, ``history``, ``quarantined``, ``release``, ``distrust`` and
    ``undo_distrust`` of ``MemoryStore`` (which sets the attributes declared here and in ``StoreReading``)."""

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
        visits); a group's first strategy starts as ``MemoryConfig.strategy_start`` says. Killed midway, the
        store is as before or complete (one write transaction after the model calls).
        """
        namespace = check_namespace(namespace)
        check_int("consolidate", "min_size", min_size, 1)
        read = self._open.read(partial(strategies.read_groups, namespace=namespace))
        planned = strategies.plan(
            namespace, read, llm=llm, min_size=min_size, q_init=self.config.q_init, start=self.config.strategy_start
        )
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

    # -- defences: the quarantine and distrust (memory.trust, memory.quarantine, memory.distrust) ---------------
    def quarantined(self, namespace: str | None = None, writer: str | None = None) -> list[MemoryItem]:
        """The memories ``MemoryConfig.trust`` (mode ``"quarantine"``) holds back from every recall, oldest first:
        of ``namespace`` and ``writer`` (None: all). Each is as ``release`` would store it (``q_init``, no visits)."""
        namespace = None if namespace is None else check_namespace(namespace)
        writer = None if writer is None else check_writer(writer)
        return self._open.read(partial(quarantine.listed, namespace=namespace, writer=writer))

    def release(
        self, *, writer: str | None = None, ids: Sequence[str] | None = None, namespace: str | None = None
    ) -> int:
        """Move held memories into the memory (those of ``writer``, ``ids`` and ``namespace``; at least one
        given): at ``q_init`` with no visits, grouped with the intents they meet; returns how many. Released,
        they are memories like any other; releasing again moves nothing."""
        if writer is None and ids is None and namespace is None:
            raise ConfigError("release: say which held memories to release: writer=, ids= and/or namespace=")
        writer = None if writer is None else check_writer(writer)
        asked = None if ids is None else check_texts(ids, "release: ids", single="wrap it in a list")
        namespace = None if namespace is None else check_namespace(namespace)
        run = partial(
            quarantine.release, config=self.config, dim=self.dim, writer=writer, ids=asked, namespace=namespace
        )
        with self._open.locked():
            with self._open.write() as conn:
                count, done = run(conn, self._mirrors)
            if not self._mirrors.apply_inserts(done):
                self._open.resync()
            return count

    def distrust(
        self, writer: str, *, namespace: str | None = None, action: str = "remove", now: float | None = None
    ) -> distrusting.DistrustReport:
        """Stop trusting ``writer`` after the fact (``memory.distrust``): ``action="remove"`` removes its memories
        (of ``namespace``, or all) through the removal log, so ``history`` lists them and ``restore`` puts them
        back, and drops its held ones; ``"reset"`` sets their Q to ``q_init`` and their visits to 0, logged for
        ``undo_distrust``. Twice is a no-op (zeros). A writer the store never recorded is a ``ConfigError``."""
        writer, action = check_writer(writer), distrusting.check_action(action)
        namespace, at = None if namespace is None else check_namespace(namespace), _moment(now, "distrust")
        with self._open.locked():
            with self._open.write() as conn:
                distrusting.check_known(conn, writer)
                if action == "remove":
                    report = distrusting.remove(conn, writer, namespace, now=at)
                else:
                    report = distrusting.reset(conn, writer, namespace, q_init=self.config.q_init, now=at)
            if report.removed or report.reset:
                self._open.resync()  # deletions or new values: read back from SQL
            return report

    def undo_distrust(
        self, writer: str, *, namespace: str | None = None, now: float | None = None
    ) -> distrusting.DistrustReport:
        """Undo ``distrust`` of ``writer`` (of ``namespace``, or all): removed memories restored (within
        ``ForgetConfig.retention``), reset ones given their Q and visits back unless rewarded since, dropped
        ones held again. The report counts what came back; a second undo brings back nothing."""
        writer = check_writer(writer)
        namespace, at = None if namespace is None else check_namespace(namespace), _moment(now, "undo_distrust")
        retention, q_init = self.config.forget.retention, self.config.q_init
        with self._open.locked():
            with self._open.write() as conn:
                distrusting.check_known(conn, writer)
                report = distrusting.undo(conn, writer, namespace, q_init=q_init, now=at, retention=retention)
            if report.removed or report.reset:
                self._open.resync()
            return report


def _moment(value: object, where: str) -> float:
    """``value`` as a finite Unix time (None: now)."""
    if value is None:
        return time.time()
    number = real_number(value)
    if number is None:
        raise ConfigError(f"{where}: now must be a finite Unix time in seconds (time.time()), got {value!r:.80}")
    return number
