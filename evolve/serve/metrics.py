"""What a server did, for Prometheus: the counters and histograms behind ``/metrics`` of ``evolve serve``,
``evolve mcp --transport http`` and ``evolve a2a`` (``evolve.serve.protocols.telemetry`` serves them).

Counted as the work happens (each app has its own ``CollectorRegistry``: two apps in one process never share a
count):

- ``evolve_http_requests_total{route, method, status}`` and ``evolve_http_request_seconds{route, method}``: every
  request, by its route's template (``/v1/responses/{response_id}``, never the path a client sent, so no id becomes
  a label; a path no route knows is ``other``), the whole request timed, a streamed body included;
- ``evolve_recall_seconds`` and ``evolve_model_call_seconds``: each recall and each model call of a served answer
  (an MCP ``recall`` too); ``evolve_answers_total``; ``evolve_tokens_total{kind="prompt"|"completion"}``;
- ``evolve_ratings_total{outcome="received"|"applied"}``: a rating received that repeats an idempotency key is not
  applied; ``evolve_memories_remembered_total``: MCP ``remember`` calls.

Read from the database when scraped, at most once per ``refresh`` seconds (a scrape in between gets the same
values, so a big store costs one ``GROUP BY`` per interval, however often it is scraped):

- ``evolve_memories{namespace}`` and ``evolve_memory_q_mean{namespace}``: memory size and mean Q;
- ``evolve_ratings_quarantined``: ratings no job could learn (``evolve.serve.responses``), every run's;
- ``evolve_jobs{status}``: the job ledger by status (``evolve.jobs.job.job_counts``; ``skipped``: the lease was
  held by another job).

Tenant names are no label values unless asked for: a tenant's namespace ``<run>@<tenant>/<agent>`` is labelled
``<run>@*/<agent>``, every tenant's memories of that agent together (their Q averaged over all of them);
``tenants=True`` labels each namespace as it is. At most ``MAX_NAMESPACES`` namespaces are labelled, the largest;
the rest are summed under ``other``.

Example:
    >>> metrics = Metrics()
    >>> metrics.request("/v1/chat/completions", "POST", 200, 0.25)
    >>> body, media_type = metrics.scrape()
    >>> b'evolve_http_requests_total{method="POST",route="/v1/chat/completions",status="200"} 1.0' in body
    True
    >>> namespace_label("codes@alice/solver", tenants=False), namespace_label("codes/solver", tenants=False)
    ('codes@*/solver', 'codes/solver')
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from sqlalchemy import Engine, func, select

from connectors import ConfigError
from connectors.db import for_reads
from evolve.serve.answers import Answer
from evolve.serve.responses import count_quarantined
from memory import MemoryStore
from memory.storage.schema import memory_items

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "/metrics needs prometheus-client (in the serve, mcp and a2a extras): pip install prometheus-client, "
    "or reinstall Evolve with its extra, e.g. pip install -e '.[serve]'"
)
MAX_NAMESPACES = 500
"""The most namespaces labelled one by one; the smaller ones are summed under ``other``."""
REFRESH = 30.0
"""Seconds the values read from the database are kept between scrapes."""
QUICK = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
"""Buckets of a recall's seconds."""
SLOW = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Buckets of a model call's and a request's seconds (a local model's answer takes seconds)."""

JobCounts = Callable[[], Mapping[str, int]]


def namespace_label(namespace: str, *, tenants: bool) -> str:
    """The label of a memory namespace: as it is with ``tenants``; else a tenant's ``<run>@<tenant>/<agent>``
    is ``<run>@*/<agent>`` (``<run>@*`` when the name was shortened with a hash: its hash names the tenant too)."""
    if tenants or "@" not in namespace:
        return namespace
    run, _, rest = namespace.partition("@")
    _, slash, agent = rest.partition("/")
    return f"{run}@*/{agent}" if slash and "~" not in namespace else f"{run}@*"


class Metrics:
    """One app's instruments and the registry ``/metrics`` reads; a ``Deployment`` watcher (``answered``, ``rated``).

    Args:
        store: the memory whose size and mean Q per namespace are reported (None: none).
        engine: the database of served responses and ratings, for the quarantined ratings (None: not reported).
        jobs: the job ledger's counts by status (``evolve.jobs.job.job_counts`` over the run's database; None: not
            reported).
        tenants: label namespaces with tenant names (default: folded, see ``namespace_label``).
        refresh: seconds the values read from the database are kept between scrapes.

    Raises:
        ConfigError: prometheus-client is not installed.

    Example:
        >>> # metrics = Metrics(store=deployment.store, engine=deployment.engine); deployment.watch(metrics)
    """

    def __init__(
        self,
        *,
        store: MemoryStore | None = None,
        engine: Engine | None = None,
        jobs: JobCounts | None = None,
        tenants: bool = False,
        refresh: float = REFRESH,
    ) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Histogram
        except ImportError as e:
            raise ConfigError(INSTALL_HINT) from e
        self.tenants = tenants
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.requests = Counter("evolve_http_requests", "HTTP requests by route template, method and status",
                                ["route", "method", "status"], registry=r)  # fmt: skip
        self.request_seconds = Histogram("evolve_http_request_seconds", "Seconds a whole request took (a streamed "
                                         "body included)", ["route", "method"], buckets=SLOW, registry=r)  # fmt: skip
        self.recall_seconds = Histogram("evolve_recall_seconds", "Seconds each memory recall took", buckets=QUICK,
                                        registry=r)  # fmt: skip
        self.model_seconds = Histogram("evolve_model_call_seconds", "Seconds each call to a team's model took",
                                       buckets=SLOW, registry=r)  # fmt: skip
        self.answers = Counter("evolve_answers", "Answers served and recorded", registry=r)
        self.tokens = Counter("evolve_tokens", "Tokens the team's models read (prompt) and wrote (completion)",
                              ["kind"], registry=r)  # fmt: skip
        self.ratings = Counter("evolve_ratings", "Ratings received, and applied (not a repeated idempotency key)",
                               ["outcome"], registry=r)  # fmt: skip
        self.remembered = Counter("evolve_memories_remembered", "Memories written by MCP remember", registry=r)
        for kind in ("prompt", "completion"):
            self.tokens.labels(kind)
        for outcome in ("received", "applied"):
            self.ratings.labels(outcome)
        r.register(Readings(store, engine, jobs, tenants=tenants, refresh=refresh))

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        """One request answered: by route template (never a raw path), method and status."""
        self.requests.labels(route, method, str(status)).inc()
        self.request_seconds.labels(route, method).observe(seconds)

    def answered(self, answer: Answer) -> None:
        """An answer recorded (a ``Deployment`` watcher): its tokens, and each recall and model call it made."""
        self.answers.inc()
        self.tokens.labels("prompt").inc(answer.usage.prompt_tokens)
        self.tokens.labels("completion").inc(answer.usage.completion_tokens)
        for w in answer.work:
            if w.kind == "recall":
                self.recall_seconds.observe(w.seconds)
            elif w.kind == "model":
                self.model_seconds.observe(w.seconds)

    def rated(self, applied: bool) -> None:
        """A rating received; ``applied`` False when it repeated an idempotency key."""
        self.ratings.labels("received").inc()
        if applied:
            self.ratings.labels("applied").inc()

    def recalled(self, seconds: float) -> None:
        """A recall made without a team (MCP's ``recall``)."""
        self.recall_seconds.observe(seconds)

    def remember(self) -> None:
        """A memory written (MCP's ``remember``)."""
        self.remembered.inc()

    def scrape(self) -> tuple[bytes, str]:
        """Every metric in the Prometheus text format, and its media type: what ``GET /metrics`` sends. It may read
        the database (``Readings``): call it from a worker thread."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class Readings:
    """The gauges read from the database when scraped, kept ``refresh`` seconds (a registry's custom collector).
    A reading that fails (the database is down) is logged and left out of that scrape; the others still come."""

    def __init__(
        self,
        store: MemoryStore | None,
        engine: Engine | None,
        jobs: JobCounts | None,
        *,
        tenants: bool,
        refresh: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.engine, self.jobs = store, engine, jobs
        self.tenants, self.refresh, self.clock = tenants, refresh, clock
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._families: list[Metric] = []

    def describe(self) -> list[Metric]:
        return []  # the names are only known once read; registering must not query the database

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            now = self.clock()
            if self._read_at is None or now - self._read_at >= self.refresh:
                self._families, self._read_at = self._read(), now
            return list(self._families)

    def _read(self) -> list[Metric]:
        families: list[Metric] = []
        for name, read in (("memory", self._memory), ("quarantined ratings", self._quarantined), ("jobs", self._jobs)):
            try:
                families += read()
            except Exception as e:  # a scrape must not fail because one reading did
                log.warning("/metrics: could not read the %s: %s", name, e)
        return families

    def _memory(self) -> list[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        if self.store is None:
            return []
        sizes = memory_sizes(self.store.engine, tenants=self.tenants)
        count = GaugeMetricFamily("evolve_memories", "Memories stored, by namespace", labels=["namespace"])
        mean = GaugeMetricFamily("evolve_memory_q_mean", "Mean Q of the memories, by namespace", labels=["namespace"])
        for label, (n, q_sum) in sizes.items():
            count.add_metric([label], n)
            mean.add_metric([label], q_sum / n if n else 0.0)
        return [count, mean]

    def _quarantined(self) -> list[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        if self.engine is None:
            return []
        help_ = "Ratings quarantined now: no job could learn them (Deployment.quarantined says why)"
        return [GaugeMetricFamily("evolve_ratings_quarantined", help_, value=count_quarantined(self.engine))]

    def _jobs(self) -> list[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        if self.jobs is None:
            return []
        help_ = (
            "Jobs in the ledger by status: done, failed, abandoned (they ran), skipped (the lease was held), running"
        )
        family = GaugeMetricFamily("evolve_jobs", help_, labels=["status"])
        for status, n in sorted(self.jobs().items()):
            family.add_metric([status], n)
        return [family]


def memory_sizes(engine: Engine, *, tenants: bool, limit: int = MAX_NAMESPACES) -> dict[str, tuple[int, float]]:
    """``{label: (memories, sum of their Q)}`` by namespace label (``namespace_label``), one ``GROUP BY`` query;
    beyond the ``limit`` largest labels, the rest summed under ``other``."""
    m = memory_items.c
    query = select(m.namespace, func.count(), func.coalesce(func.sum(m.q), 0.0)).group_by(m.namespace)
    with for_reads(engine).connect() as conn:
        rows = conn.execute(query).all()
    sizes: dict[str, tuple[int, float]] = {}
    for namespace, n, q_sum in rows:
        label = namespace_label(str(namespace), tenants=tenants)
        had = sizes.get(label, (0, 0.0))
        sizes[label] = (had[0] + int(n), had[1] + float(q_sum))
    if len(sizes) <= limit:
        return sizes
    ranked = sorted(sizes.items(), key=lambda kv: -kv[1][0])
    rest = ranked[limit:]
    return dict(ranked[:limit]) | {"other": (sum(n for _, (n, _) in rest), sum(q for _, (_, q) in rest))}


__all__ = [
    "INSTALL_HINT",
    "MAX_NAMESPACES",
    "Metrics",
    "Readings",
    "memory_sizes",
    "namespace_label",
]
