"""``/metrics`` and a span per request, for the ASGI app of ``evolve serve``, ``evolve mcp --transport http`` and
``evolve a2a`` alike.

``Telemetry(app, metrics=..., routes=...)`` wraps a server's app: every HTTP request is counted and timed by its
route's template, method and status (``evolve.serve.metrics``), and, given a ``Tracing``, runs inside a span of its
own that the answer's work hangs under (``evolve.serve.tracing``). ``GET /metrics`` is answered here, before the
app and its keys, in the Prometheus text format; it is counted like any request.

Who may scrape (``scrape_access``): by default anyone who reaches the port, without a key, as Prometheus scrapes
and as ``/healthz`` is open. What it shows is counts, latencies, token sums, memory sizes and mean Q: never a
tenant's name (namespaces are folded, ``evolve.serve.metrics.namespace_label``), a key or any text. Keep the port
internal as for any scrape endpoint. Tenant labels (``--metrics-tenants``) would show every tenant's name, so with
them ``/metrics`` takes an operator key only (``Authorization: Bearer <operator key>``; Prometheus sends it with
``authorization: {credentials_file: ...}``), and a server with no operator key refuses to start.

Example:
    >>> # app.add_middleware(Telemetry, metrics=Metrics(store=deployment.store), routes=app.routes)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from connectors import ConfigError
from evolve.serve.metrics import Metrics
from evolve.serve.protocols.keys import is_admin
from evolve.serve.tracing import Tracing

if TYPE_CHECKING:
    from evolve.serve.deployment import Deployment

METRICS_PATH = "/metrics"
OTHER = "other"
"""The route label of a path no route knows (a 404): the raw path would let any client make new labels."""
Access = Callable[[str | None], bool]
"""Whether a scrape's ``Authorization`` header may read ``/metrics``."""
DENIED = {
    "error": {
        "message": "/metrics shows tenant names on this server: send 'Authorization: Bearer <operator key>'",
        "type": "invalid_request_error", "param": None, "code": "invalid_api_key",
    }
}  # fmt: skip


def scrape_access(metrics: Metrics, admin_keys: Sequence[bytes], *, command: str) -> Access:
    """Who may scrape: anyone, unless ``metrics`` labels tenants; then only an operator key (``admin_keys``, as
    ``evolve.serve.protocols.keys.admin_table`` gives them).

    Raises:
        ConfigError: tenant labels asked for with no operator key (``command`` names the server in the message).
    """
    check_tenant_labels(metrics.tenants, admin_keys, command=command)
    if not metrics.tenants:
        return lambda _: True
    keys = list(admin_keys)
    return lambda authorization: is_admin(authorization, keys)


def check_tenant_labels(tenants: bool, admin_keys: Sequence[object], *, command: str) -> None:
    """Refuse tenant labels on a server with no operator key: nobody could scrape them (``evolve serve`` and
    ``evolve mcp`` check it before loading anything)."""
    if tenants and not admin_keys:
        raise ConfigError(
            f"--metrics-tenants puts tenant names in /metrics, which then opens to an operator key only: give "
            f"{command} one (--admin-key KEY, $EVOLVE_ADMIN_KEYS or the keys file's [admin] table)"
        )


def add_telemetry(
    app: Any,
    *,
    command: str,
    deployment: Deployment | None = None,
    metrics: Metrics | None = None,
    tracing: Tracing | None = None,
    admin_keys: Sequence[bytes] = (),
) -> None:
    """``Telemetry`` as the outermost middleware of a Starlette (or FastAPI) ``app``: ``metrics`` (default: the
    ``deployment``'s memory and ratings) watch the deployment's answers and ratings, whichever route served them,
    and so does ``tracing``; who may scrape is ``scrape_access``'s (``admin_keys`` as ``admin_table`` gives them).

    Raises:
        ConfigError: tenant labels asked for with no operator key (``command`` names the server).
    """
    if metrics is None:
        metrics = Metrics() if deployment is None else Metrics(store=deployment.store, engine=deployment.engine)
    allowed = scrape_access(metrics, admin_keys, command=command)
    for watcher in (metrics, tracing):
        if deployment is not None and watcher is not None:
            deployment.watch(watcher)
    app.add_middleware(Telemetry, metrics=metrics, routes=app.routes, tracing=tracing, allowed=allowed)


def route_of(scope: dict[str, Any], routes: Sequence[Any]) -> str:
    """The template of the route ``scope`` goes to (a method it does not take still names it), else ``other``."""
    from starlette.routing import Match

    partial = None
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return str(getattr(route, "path", OTHER))
        if match is Match.PARTIAL and partial is None:
            partial = route
    return str(getattr(partial, "path", OTHER))


class Telemetry:
    """ASGI middleware: counts, times and (with ``tracing``) traces every request of ``app``; serves ``/metrics``.

    Args:
        app: the server's ASGI app.
        metrics: where the counts go, and what ``/metrics`` shows.
        routes: the app's routes (Starlette's or FastAPI's ``app.routes``), for the route templates.
        tracing: a span per request (None: no traces).
        allowed: who may scrape (``scrape_access``; default anyone).
    """

    def __init__(
        self,
        app: Any,
        *,
        metrics: Metrics,
        routes: Sequence[Any] = (),
        tracing: Tracing | None = None,
        allowed: Access = lambda _: True,
    ) -> None:
        self.app, self.metrics, self.routes, self.tracing, self.allowed = app, metrics, routes, tracing, allowed

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # the lifespan: the app's own
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        scraping = scope["path"] == METRICS_PATH
        route = METRICS_PATH if scraping else route_of(scope, self.routes)
        started, status, counted = time.perf_counter(), 500, False  # an exception before a response is a 500

        def count() -> None:
            nonlocal counted
            if not counted:
                counted = True
                self.metrics.request(route, method, status, time.perf_counter() - started)

        async def sending(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                count()  # before the client sees the end: a scrape it sends next finds this request counted
            await send(message)

        try:
            with self._span(method, route) as span:
                try:
                    await (self._scrape if scraping else self.app)(scope, receive, sending)
                finally:
                    if span is not None:
                        finished(span, status)
        finally:
            count()

    def _span(self, method: str, route: str) -> AbstractContextManager[Any]:
        return self.tracing.request(method, route) if self.tracing is not None else nullcontext(None)

    async def _scrape(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        import anyio
        from starlette.requests import Request
        from starlette.responses import Response

        request = Request(scope)
        if request.method not in ("GET", "HEAD"):
            response = Response(status_code=405, headers={"Allow": "GET, HEAD"})
        elif not self.allowed(request.headers.get("authorization")):
            headers = {"WWW-Authenticate": 'Bearer realm="evolve"'}
            response = Response(json.dumps(DENIED), 401, headers=headers, media_type="application/json")
        else:
            body, media_type = await anyio.to_thread.run_sync(self.metrics.scrape)  # it may read the database
            response = Response(body, media_type=media_type, headers={"Cache-Control": "no-store"})
        await response(scope, receive, send)


def finished(span: Any, status: int) -> None:
    """The response's status on a request's span; a 5xx marks it failed (a 4xx is the client's)."""
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR))


__all__ = [
    "METRICS_PATH",
    "OTHER",
    "Access",
    "Telemetry",
    "add_telemetry",
    "check_tenant_labels",
    "finished",
    "route_of",
    "scrape_access",
]
