"""Live A2A agents on 127.0.0.1 (uvicorn in a thread): ``evolve a2a`` for a spec, and a plain agent made with
the a2a-sdk alone (``ScriptedAgent``), with the SDK's own client for either."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from a2a.client import Client, ClientConfig, create_client
from a2a.helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, Role, TaskState
from a2a.types import Message as A2AMessage
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.types import ASGIApp

from evolve.serve.deployment import Deployment
from evolve.serve.protocols.a2a import BearerAuth
from evolve.serve.protocols.keys import tenant_lookup
from tests.support.serve import running

# Tenants with long Unicode names, as real deployments name them.
ZURICH = "Zürich-Nordhafen-Logistik-Team-07"
OSAKA = "Ōsaka-Hafenbetrieb-Disposition-Süd-12"
KEYS = {"sk-a2a-zurich-5f1c9e": ZURICH, "sk-a2a-osaka-0b7d42": OSAKA}
KEY_OF = {tenant: key for key, tenant in KEYS.items()}


@dataclass
class ServedA2A:
    url: str  # the agent's base URL: its card is at <url>/.well-known/agent-card.json
    deployment: Deployment

    @asynccontextmanager
    async def client(
        self, tenant: str | None, *, streaming: bool = False, key: str | None = None
    ) -> AsyncIterator[Client]:
        """The a2a-sdk client for ``tenant`` (its bearer key on every request; ``key`` overrides it)."""
        token = key if key is not None else (KEY_OF[tenant] if tenant is not None else None)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(headers=headers, timeout=30) as http:
            yield await create_client(self.url, ClientConfig(streaming=streaming, httpx_client=http))


@contextmanager
def serving_a2a(spec: Path, keys: Mapping[str, str] = KEYS, **options: Any) -> Iterator[ServedA2A]:
    """``evolve a2a`` for ``spec`` with ``keys`` (key → tenant); ``options`` go to ``create_a2a_app``."""
    from evolve.serve.protocols.a2a import create_a2a_app
    from evolve.spec import load_spec

    deployment = Deployment(load_spec(spec))
    try:
        with running(lambda url: create_a2a_app(deployment, url=url, tenant_of=tenant_lookup(keys), **options)) as url:
            yield ServedA2A(url, deployment)
    finally:
        deployment.close()


def user_message(text: str = "", *, data: Any = None, **fields: Any) -> A2AMessage:
    """A user's A2A message: a text part and/or a data part, and any other fields (``task_id``, ``metadata``...)."""
    from a2a.helpers import new_data_part

    parts = ([Part(text=text)] if text else []) + ([new_data_part(data)] if data is not None else [])
    return A2AMessage(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=parts, **fields)


# ---- a plain A2A agent, made with the SDK alone ---------------------------------------------------------------

Reply = str | tuple[str, str] | tuple[str, str, dict[str, Any]]


class ScriptedAgent(AgentExecutor):
    """Answers each message with ``reply(text, metadata)``: a string completes the task with that text as its
    artifact; ``("message", text)`` replies with a message; ``("failed", reason, metadata)`` fails the task.
    ``delay`` seconds pass first; ``seen`` records every (text, metadata) it got."""

    def __init__(self, reply: Callable[[str, dict[str, Any]], Reply], *, delay: float = 0.0) -> None:
        self.reply = reply
        self.delay = delay
        self.seen: list[tuple[str, dict[str, Any]]] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None and context.task_id and context.context_id
        text, meta = context.get_user_input(), MessageToDict(context.message.metadata)
        self.seen.append((text, meta))
        await asyncio.sleep(self.delay)
        out = self.reply(text, meta)
        if isinstance(out, tuple) and out[0] == "message":
            await event_queue.enqueue_event(
                A2AMessage(role=Role.ROLE_AGENT, message_id=str(uuid.uuid4()), parts=[Part(text=out[1])])
            )
            return
        await event_queue.enqueue_event(new_task_from_user_message(context.message))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if isinstance(out, tuple):
            said = updater.new_agent_message([Part(text=out[1])])
            await updater.update_status(TaskState.TASK_STATE_FAILED, said, metadata=out[2] if len(out) > 2 else None)
            return
        await updater.add_artifact([Part(text=out)], name="answer", last_chunk=True)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


@contextmanager
def plain_agent(agent: ScriptedAgent, *, key: str | None = None) -> Iterator[str]:
    """``agent`` served as a plain A2A agent (JSON-RPC, protocol 1.0), behind ``key`` when given; yields its URL."""

    def app_at(url: str) -> ASGIApp:
        card = AgentCard(
            name="plain-scripted-agent", description="A scripted A2A agent made with the SDK alone.", version="1",
            supported_interfaces=[AgentInterface(url=url + "/", protocol_binding="JSONRPC", protocol_version="1.0")],
            capabilities=AgentCapabilities(streaming=False), default_input_modes=["text/plain"],
            default_output_modes=["text/plain"], skills=[AgentSkill(id="echo", name="echo", description="echo")],
        )  # fmt: skip
        handler = DefaultRequestHandler(agent_executor=agent, task_store=InMemoryTaskStore(), agent_card=card)
        app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])
        if key is not None:
            wanted = f"Bearer {key}"
            app.add_middleware(
                BearerAuth, tenant_of=lambda r: "caller" if r.headers.get("authorization") == wanted else None,
                public=("/.well-known/agent-card.json",),
            )  # fmt: skip
        return app

    with running(app_at) as url:
        yield url
