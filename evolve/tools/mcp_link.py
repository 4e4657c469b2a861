"""The plumbing of ``evolve.tools.mcp``: where an MCP server is (``Target``), and one live connection to
it (``Link``): an event loop on a daemon thread, where the official SDK's async ``Client`` lives from
connect to close, so that synchronous code can submit coroutines to it and wait for them.

One task enters and leaves the SDK client (its transports' task groups require it); every call is a
task of its own on the same loop. The loop's thread is a daemon: a connection left open never holds
the interpreter at exit (a non-daemon thread, as ``anyio``'s blocking portal makes, would).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import shlex
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from connectors import ConfigError, ConnectorError
from connectors.install import extra_hint

log = logging.getLogger(__name__)

EXTRA = extra_hint("mcp")
STDERR_TAIL = 1500
"""The most characters of a stdio server's stderr quoted in an error."""
CLOSE_WAIT = 10.0
"""Seconds ``close()`` waits for the SDK's shutdown (stdin closed, then SIGTERM, then SIGKILL: ~6 s)."""


@dataclass(frozen=True)
class Target:
    """Where one MCP server is: a command (``argv``, run in ``cwd`` with ``env`` added) or a ``url``."""

    argv: tuple[str, ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None

    def __str__(self) -> str:
        """The command line, or the URL without credentials or query (they may hold a key).

        Example:
            >>> str(target_of(url="https://ops:s3cret@tools.example:8443/mcp?key=s3cret"))
            'https://tools.example:8443/mcp'
            >>> str(target_of(["python", "tools server.py", "--site", "Zürich-Nordhafen"]))
            "python 'tools server.py' --site 'Zürich-Nordhafen'"
        """
        if self.url:
            parts = urlsplit(self.url)
            return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path}"
        return shlex.join(self.argv)


def target_of(
    command: str | Sequence[str] | None = None,
    *,
    url: str | None = None,
    headers: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> Target:
    """The ``Target`` of exactly one of ``command`` (a command line, split as a shell does, or an argv
    list) and ``url`` (``http://`` or ``https://``); ConfigError says what is wrong."""
    if (command is None) == (url is None):
        raise ConfigError(
            'an MCP server is a command (MCPConnection("python tools_server.py")) or a URL '
            f'(MCPConnection(url="http://127.0.0.1:9000/mcp")): give exactly one, got command={command!r}, url={url!r}'
        )
    if url is not None:
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
            raise ConfigError(f"an MCP server's url must be http://host[:port]/path or https://..., got {url!r:.120}")
        if env is not None or cwd is not None:
            raise ConfigError("env and cwd apply to an MCP server run as a command, not to a url")
        return Target(url=url, headers=_pairs("headers", headers))
    if headers is not None:
        raise ConfigError("headers apply to an MCP server at a url, not to one run as a command")
    return Target(argv=_argv(command), env=_pairs("env", env), cwd=None if cwd is None else str(cwd))


def _argv(command: object) -> tuple[str, ...]:
    try:
        argv = shlex.split(command) if isinstance(command, str) else list(command)  # type: ignore[call-overload]
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"an MCP server's command must be a command line or a list of strings ({e}), got {command!r:.120}"
        ) from None
    if not argv or not all(isinstance(a, str) for a in argv) or not argv[0]:
        raise ConfigError(
            f'an MCP server\'s command must name a program, e.g. "python tools_server.py", got {command!r:.120}'
        )
    return tuple(argv)


def _pairs(what: str, mapping: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    if mapping is None:
        return ()
    if not isinstance(mapping, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
    ):
        raise ConfigError(f"an MCP server's {what} must map strings to strings, got {type(mapping).__name__}")
    if what == "headers" and not all(f"{k}{v}".isascii() for k, v in mapping.items()):
        bad = [k for k, v in mapping.items() if not f"{k}{v}".isascii()]  # names only: a value may be a key
        raise ConfigError(f"HTTP headers must be ASCII text; not so: {bad}")
    return tuple(mapping.items())


def sdk() -> Any:
    try:
        import mcp
    except ImportError as e:
        raise ConfigError(f"tools from MCP servers need the mcp package, which is not installed: {EXTRA}") from e
    return mcp


class Link:
    """One open connection: its event loop on a daemon thread, the SDK client, the server's stderr."""

    def __init__(self, target: Target, connect_timeout: float) -> None:
        sdk()  # a ConfigError naming the extra, here rather than on the loop's thread
        self.target = target
        self.errlog: IO[bytes] | None = tempfile.TemporaryFile("a+b") if target.argv else None  # noqa: SIM115
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"mcp {target}"[:60], daemon=True)
        self.thread.start()
        self.client: Any = None
        self.refused = ""  # the last HTTP error status the server answered
        self.stop = asyncio.Event()  # set (from any thread, through the loop) to leave the client's block
        self.task: asyncio.Task[None] | None = None
        self.finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        ready: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.held = asyncio.run_coroutine_threadsafe(self._hold(ready), self.loop)
        try:
            self.client = ready.result(connect_timeout)
        except BaseException as e:
            stderr = self.stderr_tail() or (f" (it answered HTTP {self.refused})" if self.refused else "")
            self.close()
            raise ConnectorError(f"could not connect to the MCP server `{target}`: {describe(e, connect_timeout)}{stderr}",
                                 retryable=True) from None  # fmt: skip

    async def _hold(self, ready: concurrent.futures.Future[Any]) -> None:
        """Enter the SDK client, hand it over, and keep it until ``stop``: one task enters and exits it,
        as its transports' task groups require."""
        self.task = asyncio.current_task()
        try:
            from mcp import Client

            async with Client(self._transport()) as client:
                ready.set_result(client)
                await self.stop.wait()
        except BaseException as e:
            if not ready.done():
                ready.set_exception(e)
            elif not isinstance(e, asyncio.CancelledError):
                log.warning("the MCP connection to %s ended with %s: %s", self.target, type(e).__name__, e)
            if not isinstance(e, Exception):
                raise
        finally:
            self.finished.set_result(None)

    def _transport(self) -> Any:
        if self.target.url:
            return _http(self.target.url, dict(self.target.headers), self)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        program, *args = self.target.argv
        if program in ("python", "python3"):
            program = sys.executable
        params = StdioServerParameters(
            command=program, args=args, env=dict(self.target.env) or None, cwd=self.target.cwd
        )
        return stdio_client(params, errlog=self.errlog)  # type: ignore[arg-type]

    def submit(self, coroutine: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    @property
    def alive(self) -> bool:
        return self.client is not None and not self.finished.done()

    def stderr_tail(self) -> str:
        """The last lines the server wrote to stderr, as a sentence to append to an error, or ''."""
        if self.errlog is None or self.errlog.closed:
            return ""
        size = os.fstat(self.errlog.fileno()).st_size
        start = max(0, size - STDERR_TAIL)
        text = os.pread(self.errlog.fileno(), size - start, start).decode("utf-8", "replace").strip()
        return f"; the server's stderr ends with:\n{text}" if text else ""

    def close(self) -> None:
        """Stop the client (the SDK ends a stdio server: stdin closed, then SIGTERM, then SIGKILL), then the loop."""
        if threading.current_thread() is self.thread:  # garbage-collected on the loop itself: cannot wait here
            self.held.add_done_callback(lambda _: self.loop.call_soon_threadsafe(self.loop.stop))
            self.stop.set()
            return
        if self.thread.is_alive():
            if self.task is None:
                self.held.cancel()  # it never started
            elif not self.finished.done():
                # connected: leave the client's block; still connecting: give the handshake up
                self.loop.call_soon_threadsafe(self.stop.set if self.client is not None else self.task.cancel)
                try:
                    self.finished.result(CLOSE_WAIT)
                except concurrent.futures.TimeoutError:
                    log.warning("the MCP connection to %s did not close within %g s", self.target, CLOSE_WAIT)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(CLOSE_WAIT)
        if not self.thread.is_alive():
            self.loop.close()
        if self.errlog is not None:
            self.errlog.close()


@asynccontextmanager
async def _http(url: str, headers: dict[str, str], link: Link) -> AsyncIterator[Any]:
    """The streamable HTTP transport with ``headers`` on every request (the SDK's client takes them
    through an HTTP client it does not close itself)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(30.0, read=300.0)  # the SDK's own defaults: a response stream may stay open

    async def note(response: Any) -> None:  # the SDK's error says "an error response", not which one
        if response.status_code >= 400:
            link.refused = f"{response.status_code} {response.reason_phrase}".strip()

    async with httpx2.AsyncClient(headers=headers, timeout=timeout, event_hooks={"response": [note]}) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


def describe(e: BaseException, timeout: float) -> str:
    """What went wrong, in a few words."""
    if isinstance(e, (TimeoutError, concurrent.futures.TimeoutError)):
        return f"no MCP handshake within {timeout:g} s"
    if getattr(e, "code", None) == -32000:  # mcp_types.CONNECTION_CLOSED
        return "the server closed the connection (it exited, or wrote something that is not MCP to stdout)"
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(describe(x, timeout) for x in e.exceptions)
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


__all__ = ["CLOSE_WAIT", "EXTRA", "Link", "Target", "describe", "sdk", "target_of"]
