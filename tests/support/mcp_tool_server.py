"""A tiny MCP tool server for tests: warehouse door codes, and a tool that takes its time.

Built on the official SDK's ``MCPServer`` (FastMCP before mcp 2). Stdio by default; ``--http PORT``
serves streamable HTTP on ``http://127.0.0.1:PORT/mcp`` instead:

    python -m tests.support.mcp_tool_server            # stdio: an MCP client starts it as a subprocess
    python -m tests.support.mcp_tool_server --http 9000 [--key KEY]   # KEY: the bearer key it requires

It imports nothing of Evolve, so a copy of the file runs anywhere the ``mcp`` package is installed.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

DOOR_CODES = {
    "harbor": "7291",
    "zürich-nordhafen": "5318",
    "東京-ロジスティクス": "0846",
}
"""The codes a model cannot know without the tool (keys: a site's name, lower case)."""

server = MCPServer("warehouse-tools", instructions="Door codes of the company's warehouses.")


def _site_key(site: str) -> str:
    """``"the Harbor warehouse"`` and ``"Harbor"`` name one site: a model words it either way."""
    key = " ".join(site.lower().split())
    key = key.removeprefix("the ").removesuffix(" warehouse").removeprefix("warehouse ")
    return key.strip(" .")


@server.tool()
def door_code(site: str) -> str:
    """The door code of a warehouse.

    Args:
        site: the warehouse's name, as the question gives it.
    """
    code = DOOR_CODES.get(_site_key(site))
    if code is None:
        raise ToolError(f"no warehouse called {site!r} (known: Harbor, Zürich-Nordhafen, 東京-ロジスティクス)")
    return code


@server.tool()
async def wait(seconds: float) -> str:
    """Wait a number of seconds, then say so (a slow tool)."""
    await anyio.sleep(seconds)
    return f"waited {seconds:g} s"


def http_app(key: str | None = None) -> Any:
    """The streamable HTTP app (endpoint ``/mcp``); with ``key``, it answers 401 to any request without
    ``Authorization: Bearer <key>``. Once per process: the SDK's session manager runs once."""
    app = server.streamable_http_app(host="127.0.0.1")
    if key is None:
        return app
    expected = f"Bearer {key}".encode()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"a bearer key is required"})
            return
        await app(scope, receive, send)

    return guarded


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument("--key", help="with --http: answer only requests that carry this bearer key")
    args = parser.parse_args(argv)
    if args.http is None:
        server.run()
    else:
        import uvicorn

        uvicorn.run(http_app(args.key), host="127.0.0.1", port=args.http, log_level="warning")


if __name__ == "__main__":
    main()
