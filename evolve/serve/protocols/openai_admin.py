"""``evolve serve``'s operator routes: the memory's defences against a bad writer (``memory.defences.trust``) over HTTP.

- ``GET /v1/admin/memory/quarantined?namespace=&writer=`` lists what ``[memory] trust = "quarantine"`` holds
  back from every recall (``{"object": "list", "data": [{id, namespace, writer, intent, ...}]}``);
- ``POST /v1/admin/memory/distrust`` ``{"writer", "namespace"?, "action"?: "remove" | "reset"}`` removes
  (default) or resets what a writer wrote, and drops its held memories; twice is a no-op (zeros);
- ``POST /v1/admin/memory/undo`` ``{"writer", "namespace"?}`` puts back what the distrust took;
- ``POST /v1/admin/memory/release`` ``{"writer"?, "ids"?, "namespace"?}`` (one at least) lets held memories in.

Distrust and undo answer their counts (``removed``, ``reset``, ``dropped``, ``total``), release
``released`` (``evolve.serve.operator``). A writer is ``"<kind>:<name>"`` (a served tenant's rated answers
are ``tenant:<T>``); a namespace the store's whole name (``<run>@<tenant>/<agent>``, as listed); none: all.

Only an operator key opens these routes (``evolve.serve.protocols.keys``): none given, 401; a tenant's key, 403
``not_operator``; and with no operator key configured at all, every call is a 403 ``admin_disabled`` that
says how to turn them on. An operator key opens no tenant route (``evolve.serve.protocols.openai_http``: 403
``operator_key``).
Bodies are checked whole: an unknown field, a malformed writer or an unknown action is a 400 naming what
was expected; a writer the store never recorded is a 400 listing some it knows.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from evolve.serve import operator
from evolve.serve.protocols.keys import ENABLE_ADMIN, is_admin, tenant_for
from evolve.serve.protocols.openai_requests import (
    ApiError,
    DistrustRequest,
    QuarantinedQuery,
    ReleaseRequest,
    UndoRequest,
    parse,
    validate,
)
from memory import MemoryStore

if TYPE_CHECKING:
    from fastapi import FastAPI, Request

PREFIX = "/v1/admin/memory"


def operator_guard(
    store: MemoryStore | None, admins: Sequence[bytes], tenants: Sequence[tuple[bytes, str]]
) -> Callable[["Request"], MemoryStore]:
    """``guard(request)``: the store, for a request that carries an operator key; else the ``ApiError`` that says
    why not (off, no key, a tenant's key, no memory)."""

    def guard(request: "Request") -> MemoryStore:
        authorization = request.headers.get("authorization")
        if not admins:
            raise ApiError(
                403, f"the operator routes are off: start evolve serve with {ENABLE_ADMIN} to turn them on",
                code="admin_disabled",
            )  # fmt: skip
        if not is_admin(authorization, admins):
            if tenant_for(authorization, tenants) is not None:
                message = "a tenant's API key does not open the operator routes: send an operator key (--admin-key)"
                raise ApiError(403, message, code="not_operator")
            message = "missing or invalid operator key: send 'Authorization: Bearer <operator key>'"
            raise ApiError(401, message, code="invalid_api_key")
        if store is None:
            message = "this spec has no memory ([memory] enabled = false): there is nothing to distrust or release"
            raise ApiError(409, message, code="no_memory")
        return store

    return guard


def add_admin_routes(
    app: "FastAPI", store: MemoryStore | None, admins: Sequence[bytes], tenants: Sequence[tuple[bytes, str]]
) -> None:
    """The ``/v1/admin/memory/...`` routes over ``store``, opened by the ``admins`` keys only (the module docstring)."""
    from fastapi import Request
    from starlette.concurrency import run_in_threadpool

    guard = operator_guard(store, admins, tenants)

    @app.get(f"{PREFIX}/quarantined")
    async def quarantined(request: Request) -> dict[str, Any]:
        found = guard(request)
        q: QuarantinedQuery = validate(QuarantinedQuery, dict(request.query_params))
        data = await run_in_threadpool(operator.held, found, namespace=q.namespace, writer=q.writer)
        return {"object": "list", "data": data}

    @app.post(f"{PREFIX}/distrust")
    async def distrust(request: Request) -> dict[str, Any]:
        found = guard(request)
        req: DistrustRequest = parse(DistrustRequest, await request.body())
        done = await run_in_threadpool(operator.distrust, found, req.writer, namespace=req.namespace, action=req.action)
        return {"object": "memory.distrust", **done}

    @app.post(f"{PREFIX}/undo")
    async def undo(request: Request) -> dict[str, Any]:
        found = guard(request)
        req: UndoRequest = parse(UndoRequest, await request.body())
        done = await run_in_threadpool(operator.undo, found, req.writer, namespace=req.namespace)
        return {"object": "memory.undo", **done}

    @app.post(f"{PREFIX}/release")
    async def release(request: Request) -> dict[str, Any]:
        found = guard(request)
        req: ReleaseRequest = parse(ReleaseRequest, await request.body())
        done = await run_in_threadpool(operator.release, found, writer=req.writer, ids=req.ids, namespace=req.namespace)
        return {"object": "memory.release", **done}


__all__ = ["PREFIX", "add_admin_routes", "operator_guard"]
