"""A spec's team as an A2A agent: ``create_a2a_app(deployment, url=..., tenant_of=...)`` is the ASGI app
``evolve a2a`` serves, built from the official ``a2a-sdk`` (JSON-RPC binding, protocol 1.0 and 0.3).

- ``GET /.well-known/agent-card.json`` (public: A2A discovery) is the agent card: the run's name, a
  description naming the agents and their roles, one skill (the team's task), ``capabilities.streaming``,
  the JSON-RPC interface at ``url`` and its bearer-key security scheme. It names no tenant.
- ``POST /`` is the JSON-RPC endpoint: ``SendMessage`` / ``SendStreamingMessage`` (``message/send`` /
  ``message/stream`` in 0.3), ``GetTask``, ``ListTasks``, ``CancelTask``, ``SubscribeToTask``. A message
  is answered by the tenant's team, or rates an earlier answer (``evolve.serve.protocols.a2a_tasks``: both, and
  the metadata a task carries).
- ``GET /healthz`` (public) is for liveness probes; ``GET /metrics`` (public: it names no tenant) is Prometheus's
  (``evolve.serve.protocols.telemetry``).

Every other request carries ``Authorization: Bearer <key>``; ``tenant_of(request)`` maps it to a tenant
(None: a 401 with ``WWW-Authenticate: Bearer`` and a JSON-RPC error body). The tenant is the call's user,
and the task store is scoped by it: a tenant cannot see, continue, list, cancel or rate another tenant's
task — it gets the same ``TaskNotFoundError`` as for a task that never existed — and each tenant is
served its own run (``Deployment``: ``<run>@<tenant>``). The A2A ``tenant`` field of a request is not
trusted: the key decides. The key is dropped from what the SDK keeps of a request, and never logged.

Errors are JSON-RPC errors in A2A's shape (``InvalidParamsError``, ``TaskNotFoundError``...), a failed
answer a failed task with its reason; never a traceback. Tasks live in memory (a restart forgets them; the
responses and their ratings are in the database, and a rating may name a ``response_id`` instead).

Example:
    >>> # app = create_a2a_app(Deployment(load_spec("codes.toml")), url="http://127.0.0.1:8100",
    >>> #                      tenant_of=tenant_lookup({"sk-alice-3f9c": "alice"}))  # protocols.keys
    >>> # uvicorn.run(app, host="127.0.0.1", port=8100)
"""

from __future__ import annotations

import collections
import contextlib
import importlib.metadata
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from connectors import ConfigError
from connectors.install import extra_hint
from evolve.serve.deployment import Deployment
from evolve.serve.metrics import Metrics
from evolve.serve.protocols.a2a_tasks import ANSWER, RATING_KEY, MessageReader, TeamExecutor
from evolve.serve.protocols.telemetry import add_telemetry
from evolve.serve.tracing import Tracing
from evolve.spec import RunSpec

try:
    from a2a.auth.user import User
    from a2a.extensions.common import HTTP_EXTENSION_HEADER, get_requested_extensions
    from a2a.server.context import ServerCallContext
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import ServerCallContextBuilder, create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore
    from a2a.types import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        AgentSkill,
        HTTPAuthSecurityScheme,
        SecurityRequirement,
        SecurityScheme,
        StringList,
        Task,
        TaskState,
    )
    from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, TransportProtocol
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
    from starlette.types import ASGIApp, Receive, Scope, Send
except ImportError as e:  # the optional extra is missing: say which one
    raise ConfigError(f"evolve a2a needs the a2a-sdk with its HTTP server: {extra_hint('a2a')}") from e

log = logging.getLogger(__name__)

TenantOf = Callable[[Request], "str | None"]
"""Maps a request (its ``Authorization`` header) to the tenant it is for, or None for no valid key."""

SCHEME = "bearer"
HEALTH_PATH = "/healthz"
TENANT_SCOPE = "evolve.tenant"  # where BearerAuth leaves the tenant, in the ASGI scope
UNAUTHENTICATED = {
    "jsonrpc": "2.0",
    "id": None,
    "error": {
        "code": -32600,
        "message": "missing or invalid API key: send 'Authorization: Bearer <key>'",
        "data": [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "UNAUTHENTICATED", "domain": "evolve"}
        ],
    },
}


def team_description(spec: RunSpec) -> str:
    """The card's description: what the team is, its agents and their roles (their spec prompts' first
    line: a tenant's evolved prompts are its own and stay off the public card)."""
    roles = "; ".join(f"{a.name}: {_first_line(a.system)}" for a in spec.agents)
    return (
        f"An Evolve team of {len(spec.agents)} agent{'s' if len(spec.agents) > 1 else ''} ({roles}). "
        "It recalls what worked before from a memory that learns from ratings, and answers from prompts "
        "evolved on its task."
    )


def _first_line(text: str, limit: int = 120) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def agent_card(spec: RunSpec, url: str, *, description: str | None = None, skill: str | None = None) -> AgentCard:
    """The public agent card of ``spec``'s team served at ``url`` (JSON-RPC, protocol 1.0 and 0.3).

    Args:
        spec: the served run spec (its name and agents).
        url: where clients reach the JSON-RPC endpoint (``http://host:port/``).
        description: the card's description (default: ``team_description``).
        skill: the one skill's description, the team's task (default: a generic one).
    """
    how = (
        "Send a text message; the answer is the task's 'answer' artifact and the task's metadata carries its "
        f"evolve.response_id. Rate it with a message referring to the task (referenceTaskIds) whose data part is "
        f'{{"rating": 0..1, "comment"?, "key"?}} (or metadata {RATING_KEY}).'
    )
    name = spec.run.name
    return AgentCard(
        name=name,
        description=description or team_description(spec),
        version=_version(),
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC, protocol_version=v)
            for v in ("1.0", "0.3")
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False, extended_agent_card=False),
        security_schemes={
            SCHEME: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer", description="an API key of this server; it names your tenant"
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={SCHEME: StringList()})],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id=ANSWER,
                name=name,
                description=f"{skill or 'Answers tasks of ' + repr(name) + '.'} {how}",
                tags=["evolve", "memory", "learns-from-ratings"],
                input_modes=["text/plain", "application/json"],
                output_modes=["text/plain"],
            )  # fmt: skip
        ],
    )


def _version() -> str:
    try:
        return importlib.metadata.version("evolve")
    except importlib.metadata.PackageNotFoundError:
        return "0"


class TenantUser(User):
    """The call's user: the tenant its key named (the task store scopes tasks by ``user_name``)."""

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.tenant


class TenantCalls(ServerCallContextBuilder):
    """The SDK's call context with the tenant as its user, and the request's headers without the key."""

    def build(self, request: Request) -> ServerCallContext:
        tenant = request.scope.get(TENANT_SCOPE)
        if not isinstance(tenant, str):  # BearerAuth lets no such request through; never serve one as ""
            raise ConfigError("a call reached the A2A handler without a tenant")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("authorization", "cookie")}
        return ServerCallContext(
            user=TenantUser(tenant),
            state={"headers": headers},
            requested_extensions=get_requested_extensions(request.headers.getlist(HTTP_EXTENSION_HEADER)),
        )


class BearerAuth:
    """ASGI middleware: every request but the public paths needs a key ``tenant_of`` maps to a tenant."""

    def __init__(self, app: ASGIApp, tenant_of: TenantOf, public: Iterable[str]) -> None:
        self.app = app
        self.tenant_of = tenant_of
        self.public = frozenset(public)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.public:
            await self.app(scope, receive, send)
            return
        tenant = self.tenant_of(Request(scope))
        if tenant is None:
            sent = Request(scope).headers.get("authorization")
            challenge = 'Bearer realm="evolve"' + (', error="invalid_token"' if sent else "")
            response = Response(
                json.dumps(UNAUTHENTICATED), status_code=401, media_type="application/json",
                headers={"WWW-Authenticate": challenge},
            )  # fmt: skip
            await response(scope, receive, send)
            return
        scope[TENANT_SCOPE] = tenant
        await self.app(scope, receive, send)


FINISHED = (TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED,
            TaskState.TASK_STATE_REJECTED)  # fmt: skip
MAX_TASKS = 10_000


class BoundedTaskStore(InMemoryTaskStore):
    """The SDK's in-memory task store (scoped by owner: the tenant) that keeps at most ``max_tasks`` finished
    tasks, forgetting the oldest first, so a long-running server does not grow without bound. Tasks still
    running are never dropped; a forgotten task's answer is still recorded, and rated by its response id.

    Example:
        >>> BoundedTaskStore(max_tasks=2).max_tasks
        2
    """

    def __init__(self, *, max_tasks: int = MAX_TASKS) -> None:
        if not isinstance(max_tasks, int) or max_tasks < 1:
            raise ConfigError(f"max_tasks must be a positive integer, got {max_tasks!r}")
        super().__init__()
        self.max_tasks = max_tasks
        self._finished: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await super().save(task, context)
        if task.status.state not in FINISHED:
            return
        impl = self._impl  # the SDK's dict of owner -> {task id: task}; its delete() needs the owner's call context
        key = (impl.owner_resolver(context), task.id)
        self._finished[key] = None
        self._finished.move_to_end(key)
        while len(self._finished) > self.max_tasks:
            (owner, task_id), _ = self._finished.popitem(last=False)
            with impl.lock:
                owned = impl.tasks.get(owner, {})
                owned.pop(task_id, None)
                if not owned:
                    impl.tasks.pop(owner, None)


def create_a2a_app(
    deployment: Deployment,
    *,
    url: str,
    tenant_of: TenantOf,
    description: str | None = None,
    skill: str | None = None,
    history: int = 10,
    max_tasks: int = MAX_TASKS,
    metrics: Metrics | None = None,
    tracing: Tracing | None = None,
) -> Starlette:
    """The A2A app over ``deployment`` (see the module's docstring).

    Args:
        deployment: the served team.
        url: the base URL clients reach this server at (``http://host:port``); the card names it.
        tenant_of: the tenant of a request, or None when its key is missing or wrong (``evolve a2a``
            builds it from its keys with ``evolve.serve.protocols.keys.tenant_lookup``, which compares keys in
            constant time).
        description: the card's description (default: the team's agents and roles).
        skill: the skill's description, i.e. the team's task (default: a generic one).
        history: the most earlier tasks of a context a new message sees.
        max_tasks: the most finished tasks kept in memory (``BoundedTaskStore``).
        metrics: what ``GET /metrics`` (public, like the card; ``evolve.serve.protocols.telemetry``) shows (default:
            the requests, the answers' recalls, model calls and tokens, the ratings, the memory's size).
        tracing: a span per request, the answers' recalls and model calls under it (default: none).
    """
    store = BoundedTaskStore(max_tasks=max_tasks)  # owner-scoped by the call's user: the tenant
    card = agent_card(deployment.spec, url.rstrip("/") + "/", description=description, skill=skill)
    handler = DefaultRequestHandler(
        agent_executor=TeamExecutor(deployment, store, history=history),
        task_store=store,
        agent_card=card,
        request_context_builder=MessageReader(deployment, store),
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await handler.aclose()  # no task left running on shutdown

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    routes: list[Any] = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, "/", context_builder=TenantCalls(), enable_v0_3_compat=True),
        Route(HEALTH_PATH, healthz, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.add_middleware(BearerAuth, tenant_of=tenant_of, public=(AGENT_CARD_WELL_KNOWN_PATH, HEALTH_PATH))
    # outside the keys; no operator keys here, so tenant labels are refused
    add_telemetry(app, command="evolve a2a", deployment=deployment, metrics=metrics, tracing=tracing)
    return app


__all__ = [
    "BearerAuth",
    "BoundedTaskStore",
    "TenantCalls",
    "TenantOf",
    "TenantUser",
    "agent_card",
    "create_a2a_app",
    "team_description",
]
