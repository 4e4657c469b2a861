"""Tools from MCP servers: an agent calls an MCP server's tools as it calls its Python tools.

``MCPConnection`` connects to one server — a command run as a subprocess (stdio), or a URL (streamable
HTTP) — with the official ``mcp`` SDK, and ``tools()`` gives the server's tools as ``connectors.Tool``
objects (name, description, the tool's ``inputSchema``) whose function calls the tool on the server.
The agent's tool loop runs them like any tool: the step budget bounds the calls, and a tool's error
result, a timeout or a lost connection is an observation the model reads (``evolve.tools.runs``).

Evolve's core is synchronous, the SDK asynchronous: each connection keeps one event loop on a daemon
thread, where the SDK's ``Client`` (its ``ClientSession`` and transport) lives from connect to close,
and a tool's function submits ``call_tool`` to that loop and waits for it (at most ``timeout`` seconds;
then the call is cancelled on the server too).

A command runs with the SDK's safe environment (``PATH``, ``HOME``... — no API keys) plus ``env``, in
``cwd``; ``python`` / ``python3`` as the program means this interpreter (``sys.executable``), so the
server sees the packages Evolve sees. The server's stderr is kept, and its last lines are quoted when
connecting fails.

A connection stays open until ``close()`` (or the end of a ``with`` block); one nobody refers to any
more — no tool of it in any agent — is closed when garbage-collected, and any still open at exit then.
A pickled tool (a team sent to Ray workers) reconnects on its first call, in the process it lands in.

Example:
    >>> # with MCPConnection("python warehouse_tools.py") as server:
    >>> #     agent = Agent("clerk", load_chat("local/smollm2"), tools=server.tools())
    >>> #     Team([agent]).act(["What is the door code of the Harbor warehouse?"])
"""

from __future__ import annotations

import concurrent.futures
import inspect
import json
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connectors import ConfigError, ConnectorError, ProviderTimeout, Tool
from connectors.tools import check_schema
from evolve.tools.mcp_link import Link, Target, describe, target_of


class MCPToolError(ConnectorError):
    """An MCP tool answered with an error result (``isError``): the message is the tool's own text."""


class MCPConnection:
    """A connection to one MCP server, whose tools an agent may call.

    Args:
        command: the server as a command run as a subprocess that speaks MCP on stdio: a command line
            (split as a shell does) or an argv list.
        url: the server's streamable HTTP endpoint instead (``http://127.0.0.1:9000/mcp``).
        headers: HTTP headers for every request to ``url`` (``{"Authorization": "Bearer ..."}``).
        env: environment variables for the command, besides the SDK's safe default ones.
        cwd: the command's working directory (relative paths in it are relative to this).
        timeout: seconds one tool call may take before it is cancelled and fails.
        connect_timeout: seconds to start the server and complete the MCP handshake.

    Raises:
        ConfigError: not exactly one of ``command`` and ``url``, or a malformed one.
        ConnectorError: the server could not be started or reached, or did not speak MCP.

    Example:
        >>> # with MCPConnection("python -m warehouse_tools") as server:
        >>> #     server.tools(only=["door_code"])[0].fn(site="Harbor")
        >>> # '7291'
    """

    def __init__(
        self,
        command: str | Sequence[str] | None = None,
        *,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 30.0,
    ) -> None:
        if not timeout > 0 or not connect_timeout > 0:
            raise ConfigError(f"MCPConnection timeouts must be > 0 seconds, got {timeout!r} and {connect_timeout!r}")
        self._setup(target_of(command, url=url, headers=headers, env=env, cwd=cwd), timeout, connect_timeout)
        self._session()  # connect now: a server that cannot start is an error here, not at the first call

    def _setup(self, target: Target, timeout: float, connect_timeout: float) -> None:
        self.target = target
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._live: Link | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._closed = False

    @classmethod
    def _reopen(cls, target: Target, timeout: float, connect_timeout: float) -> MCPConnection:
        """A copy of a pickled connection: it connects on its first call."""
        copy = cls.__new__(cls)
        copy._setup(target, timeout, connect_timeout)
        return copy

    def __reduce__(self) -> tuple[Any, ...]:
        return (MCPConnection._reopen, (self.target, self.timeout, self.connect_timeout))

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._live is not None and self._live.alive else "not connected"
        return f"MCPConnection({str(self.target)!r}, {state})"

    def _session(self) -> Link:
        """The open connection: made on first use, and made again after the server went away."""
        with self._lock:
            if self._closed:
                raise ConnectorError(f"the MCP connection to `{self.target}` is closed")
            if self._live is not None and not self._live.alive:
                self._drop()
            if self._live is None:
                self._live = Link(self.target, self.connect_timeout)
                self._finalizer = weakref.finalize(self, Link.close, self._live)
            return self._live

    def _drop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # closes the live connection, once
        self._live, self._finalizer = None, None

    def tools(self, only: Sequence[str] | None = None) -> list[Tool]:
        """The server's tools (those named in ``only``, in that order), each calling the server when run.

        Raises:
            ConfigError: a name in ``only`` the server does not have, or a tool whose name or input
                schema Evolve cannot take (the message names the server).
        """
        listed = {t.name: t for t in self._list()}
        if only is not None:
            missing = [name for name in only if name not in listed]
            if missing:
                raise ConfigError(f"the MCP server `{self.target}` has no tool {missing} (it has {sorted(listed)})")
            listed = {name: listed[name] for name in only}
        return [self._tool(t) for t in listed.values()]

    def _list(self) -> list[Any]:
        live = self._session()
        found: list[Any] = []
        cursor: str | None = None
        for _ in range(100):  # pages; a server that pages forever is not worth more
            page = self._wait(live, live.client.list_tools(cursor=cursor), "listing its tools", self.timeout)
            found.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return found

    def _tool(self, listed: Any) -> Tool:
        description = inspect.cleandoc(listed.description or listed.title or "")
        schema = dict(listed.input_schema or {"type": "object"})
        try:
            check_schema(listed.name, schema)
            return Tool(listed.name, description, schema, MCPCall(self, listed.name))
        except ConfigError as e:
            raise ConfigError(f"the MCP server `{self.target}`: {e}") from None

    def call(self, name: str, arguments: Mapping[str, Any], *, timeout: float | None = None) -> str:
        """Call tool ``name`` with ``arguments``; its result as text (``result_text``).

        Raises:
            MCPToolError: the tool answered with an error result.
            ProviderTimeout: no answer within ``timeout`` (default: the connection's); the call is cancelled.
            ConnectorError: the server refused the request or the connection failed (the next call reconnects).
        """
        live = self._session()
        limit = self.timeout if timeout is None else timeout
        result = self._wait(live, live.client.call_tool(name, dict(arguments), read_timeout_seconds=limit),
                            f"tool {name!r}", limit)  # fmt: skip
        text = result_text(result)
        if result.is_error:
            raise MCPToolError(text or f"tool {name!r} failed without saying why")
        return text

    def _wait(self, live: Link, coroutine: Any, what: str, limit: float) -> Any:
        """The coroutine's result, run on the connection's loop; errors as Evolve's errors."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        late = f"the MCP server `{self.target}`: {what} did not answer within {limit:g} s"
        future = live.submit(coroutine)
        try:
            return future.result(limit + 1.0)  # the SDK's own read timeout comes first, as an MCPError
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ProviderTimeout(late) from None
        except MCPError as e:
            if e.code == REQUEST_TIMEOUT:
                raise ProviderTimeout(late) from None
            if e.code != CONNECTION_CLOSED:
                raise ConnectorError(f"the MCP server `{self.target}` refused {what}: {e.message}") from None
            error: BaseException = e
        except Exception as e:
            error = e
        stderr = live.stderr_tail()
        self._forget(live)  # the connection is broken: the next call makes a new one
        raise ConnectorError(
            f"the MCP server `{self.target}`: {what} failed ({describe(error, limit)}); the connection is closed and "
            f"the next call reconnects{stderr}",
            retryable=True,
        ) from None

    def _forget(self, live: Link) -> None:
        with self._lock:
            if self._live is live:
                self._drop()

    def close(self) -> None:
        """End the connection (a stdio server's process ends with it); its tools fail from then on."""
        with self._lock:
            self._closed = True
            self._drop()

    def __enter__(self) -> MCPConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class MCPCall:
    """A ``Tool.fn`` that calls one tool of an MCP server: ``fn(**arguments) -> str``."""

    connection: MCPConnection
    name: str

    def __call__(self, **arguments: Any) -> str:
        return self.connection.call(self.name, arguments)


def result_text(result: Any) -> str:
    """A ``CallToolResult`` as the text a model reads: its text blocks joined (a resource's text too;
    an image, audio or link as a short mark), or its structured content as JSON when it has no text."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        elif kind == "resource_link":
            parts.append(f"[resource: {block.uri}]")
        else:
            parts.append(f"[{kind or 'content'}: {getattr(block, 'mime_type', None) or 'binary'}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)


def is_url(entry: str) -> bool:
    """Whether a spec's ``mcp`` entry is a URL (``http://``, ``https://``) rather than a command.

    Example:
        >>> is_url("http://127.0.0.1:9000/mcp"), is_url("python tools_server.py --flag")
        (True, False)
    """
    return entry.strip().lower().startswith(("http://", "https://"))


def check_entry(entry: object) -> str:
    """``entry`` unchanged if it can name an MCP server (a URL, or a command line a shell could split);
    ConfigError (a ValueError: a spec validator may raise it) otherwise."""
    if not isinstance(entry, str) or not entry.strip():
        raise ConfigError(f'an mcp entry is a command ("python tools_server.py") or a URL, got {entry!r:.120}')
    if is_url(entry):
        target_of(url=entry.strip())
    else:
        target_of(entry)
    return entry


def connect(entry: str, *, cwd: str | Path | None = None, timeout: float = 30.0) -> MCPConnection:
    """A connection to the MCP server a spec's ``mcp`` entry names: a URL, or a command line run in ``cwd``.

    Example:
        >>> # connect("python tools_server.py --flag", cwd="/srv/agent")  # or "http://127.0.0.1:9000/mcp"
    """
    check_entry(entry)
    if is_url(entry):
        return MCPConnection(url=entry.strip(), timeout=timeout)
    return MCPConnection(entry, cwd=cwd, timeout=timeout)


class MCPConnections:
    """The MCP servers that agents name by spec entries: each entry connected once, on first use, and
    shared by every team built with this object (a served tenant's team is built per request); closed
    together.

    Args:
        cwd: where commands run (a spec's folder, so that relative paths in them are the spec's).
        timeout: seconds one tool call may take.

    Example:
        >>> # with MCPConnections(cwd=spec.path.parent) as servers:
        >>> #     team = build_team(spec, chat, store, mcp=servers)
    """

    def __init__(self, cwd: str | Path | None = None, *, timeout: float = 30.0) -> None:
        self.cwd = cwd
        self.timeout = timeout
        self._open: dict[str, MCPConnection] = {}
        self._lock = threading.Lock()

    def connection(self, entry: str) -> MCPConnection:
        """The (shared) connection of one entry."""
        key = entry.strip()
        with self._lock:
            if key not in self._open:
                self._open[key] = connect(entry, cwd=self.cwd, timeout=self.timeout)
            return self._open[key]

    def tools(self, entries: Sequence[str]) -> list[Tool]:
        """Every tool of the servers ``entries`` name, in order. ConfigError when two of them offer a tool
        of the same name (an agent's tools need unique names)."""
        tools: list[Tool] = []
        offered: dict[str, str] = {}
        for entry in entries:
            connection = self.connection(entry)
            for tool in connection.tools():
                if tool.name in offered:
                    raise ConfigError(
                        f"tool {tool.name!r} is offered by both MCP servers `{offered[tool.name]}` and "
                        f"`{connection.target}`; an agent's tools need unique names: give it one of these servers"
                    )
                offered[tool.name] = str(connection.target)
                tools.append(tool)
        return tools

    def close(self) -> None:
        """Close every connection opened so far."""
        with self._lock:
            opened, self._open = list(self._open.values()), {}
        for connection in opened:
            connection.close()

    def __enter__(self) -> MCPConnections:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "MCPCall",
    "MCPConnection",
    "MCPConnections",
    "MCPToolError",
    "check_entry",
    "connect",
    "is_url",
    "result_text",
]
