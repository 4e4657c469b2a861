"""``evolve mcp`` for tests: a live streamable HTTP server (uvicorn in a thread) with two tenants' keys, and
the official SDK's client sessions to it and to ``evolve mcp --tenant`` started over stdio."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from evolve.serve.tenant_memory import TenantMemory
from tests.support.serve import running

ROOT = Path(__file__).resolve().parents[2]

# Tenants with long Unicode names, as real deployments name them.
ZURICH = "Zürich-Nordhafen-Logistik-Team-07"
OSAKA = "Ōsaka-Hafenbetrieb-Disposition-Süd-12"
KEYS = {"sk-mcp-zurich-7c2e91": ZURICH, "sk-mcp-osaka-4d0b63": OSAKA}


@dataclass
class ServedMCP:
    url: str  # the endpoint clients configure: http://127.0.0.1:PORT/mcp
    memory: TenantMemory
    keys: Mapping[str, str]  # key → tenant

    def session(self, tenant: str) -> Any:
        """An initialized SDK client session carrying the tenant's bearer key (``async with``)."""
        (key,) = [k for k, t in self.keys.items() if t == tenant]
        return http_session(self.url, key)


@contextmanager
def serving_mcp(spec: Path, keys: Mapping[str, str] = KEYS, *, admin_keys: Sequence[str] = ()) -> Iterator[ServedMCP]:
    """``evolve mcp --transport http`` for ``spec`` (with the operator's ``admin_keys``): uvicorn in a thread on a
    free port of 127.0.0.1."""
    from evolve.serve.protocols.mcp_http import ENDPOINT, http_app
    from evolve.spec import load_spec

    memory = TenantMemory(load_spec(spec))
    try:
        with running(lambda _: http_app(memory, dict(keys), admin_keys=admin_keys)) as url:
            yield ServedMCP(url + ENDPOINT, memory, dict(keys))
    finally:
        memory.close()


@asynccontextmanager
async def http_session(url: str, key: str) -> AsyncIterator[ClientSession]:
    headers, timeout = {"Authorization": f"Bearer {key}"}, httpx2.Timeout(30.0, read=300.0)  # the SDK's timeouts
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


@asynccontextmanager
async def stdio_session(spec: Path, *args: str) -> AsyncIterator[ClientSession]:
    """``python -m apps.cli mcp SPEC *args`` started by the SDK's stdio client, as an MCP client starts it."""
    command = StdioServerParameters(
        command=sys.executable, args=["-m", "apps.cli", "mcp", str(spec), *args], cwd=str(ROOT)
    )
    async with stdio_client(command) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured result; fails the test on a tool error."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, text_of(result)
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def failed(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The message of a call that must be a tool error (``isError``)."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return text_of(result)


async def read_json(session: ClientSession, uri: str) -> Any:
    (contents,) = (await session.read_resource(uri)).contents
    return json.loads(contents.text)  # type: ignore[union-attr]


def text_of(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)
