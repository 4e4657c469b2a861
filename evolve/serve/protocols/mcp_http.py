"""``evolve mcp --transport http``: the MCP servers over streamable HTTP at ``/mcp``, behind bearer keys.

Every request carries ``Authorization: Bearer <key>`` (401 otherwise). A tenant's key is served by the
tenant's server (``evolve.serve.protocols.mcp``) with ``TENANT`` set to the key's tenant, a context variable
the SDK carries into every handler; an operator key (``evolve.serve.protocols.keys``) by the operator's
server (``evolve.serve.protocols.mcp_operator``), whose four tools no tenant's session lists; without an
operator key nobody gets them. Keys are compared in constant time.

Example:
    >>> # app = http_app(TenantMemory(load_spec("codes.toml")), {"sk-zurich-3f9c": "Zürich-Nordhafen"})
    >>> # uvicorn.run(app, host="127.0.0.1", port=8200)
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

from connectors import ConfigError
from evolve.serve.metrics import Metrics
from evolve.serve.protocols.keys import admin_table, check_base_memory, is_admin, key_table, tenant_for
from evolve.serve.protocols.mcp import create_mcp_server
from evolve.serve.protocols.mcp_operator import create_operator_server
from evolve.serve.protocols.telemetry import Telemetry, scrape_access
from evolve.serve.tenant_memory import TenantMemory
from evolve.serve.tracing import Tracing

ENDPOINT = "/mcp"
TENANT: ContextVar[str | None] = ContextVar("evolve_mcp_tenant", default=None)
"""The tenant of the HTTP request being served: set by ``bearer_tenants``; the SDK carries it into handlers."""


def bearer_tenants(app: Any, keys: Mapping[str, str], *, operator: Any = None, admin_keys: Sequence[str] = ()) -> Any:
    """``app`` behind bearer keys: a request without a valid ``Authorization: Bearer <key>`` gets a 401;
    one with a tenant's key is served by ``app`` with ``TENANT`` set to the key's tenant, one with an operator
    key (``admin_keys``) by ``operator`` (the operator's app). Keys are compared in constant time."""
    table = key_table(keys)
    admins = admin_table(keys, admin_keys) if operator is not None else []
    lifespan = app if operator is None else both_lifespans(app, operator)
    denied = json.dumps(
        {"error": {"message": "missing or invalid API key: send 'Authorization: Bearer <key>'",
                   "type": "invalid_request_error", "code": "invalid_api_key"}}
    ).encode()  # fmt: skip

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # the lifespan: the SDK's session managers start and stop
            await lifespan(scope, receive, send)
            return
        given = [v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"]
        tenant = tenant_for(given[0], table) if len(given) == 1 else None
        if tenant is None and len(given) == 1 and is_admin(given[0], admins):
            await operator(scope, receive, send)
            return
        if tenant is None:
            headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": denied})
            return
        token = TENANT.set(tenant)
        try:
            await app(scope, receive, send)
        finally:
            TENANT.reset(token)

    return guarded


def both_lifespans(first: Any, second: Any) -> Any:
    """An app that only runs the lifespans of two Starlette apps (each starts its SDK session manager)."""
    from starlette.applications import Starlette

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        async with first.router.lifespan_context(first), second.router.lifespan_context(second):
            yield

    return Starlette(lifespan=lifespan)


def http_app(
    memory: TenantMemory,
    keys: Mapping[str, str],
    *,
    host: str = "127.0.0.1",
    admin_keys: Sequence[str] = (),
    metrics: Metrics | None = None,
    tracing: Tracing | None = None,
) -> Any:
    """The streamable HTTP app (endpoint ``/mcp``) over ``memory``, each bearer key serving its tenant, each of
    ``admin_keys`` the operator's tools. ``host`` is the interface it listens on: on a loopback one the SDK
    refuses other Host headers (DNS rebinding). One app per server: the SDK's session managers run once.
    ``GET /metrics`` (no key; ``evolve.serve.protocols.telemetry``) shows ``metrics`` (default: the requests, the
    tools' recalls, memories remembered and ratings, and the memory's size), ``tracing`` gives each request a span."""
    check_base_memory(memory.spec.serve.memory, keys)
    if metrics is None:
        metrics = Metrics(store=memory.store)
    allowed = scrape_access(metrics, admin_table(keys, admin_keys), command="evolve mcp")

    def tenant_of() -> str:
        tenant = TENANT.get()
        if tenant is None:
            raise ConfigError("this request carries no bearer key")
        return tenant

    server = create_mcp_server(memory, tenant_of=tenant_of, metrics=metrics)
    app = server.streamable_http_app(streamable_http_path=ENDPOINT, host=host)
    if not admin_keys:
        guarded = bearer_tenants(app, keys)
    else:
        operator = create_operator_server(memory.store).streamable_http_app(streamable_http_path=ENDPOINT, host=host)
        guarded = bearer_tenants(app, keys, operator=operator, admin_keys=admin_keys)
    return Telemetry(guarded, metrics=metrics, routes=app.routes, tracing=tracing, allowed=allowed)


__all__ = ["ENDPOINT", "TENANT", "bearer_tenants", "both_lifespans", "http_app"]
