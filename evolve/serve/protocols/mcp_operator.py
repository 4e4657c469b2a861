"""``evolve mcp``'s operator tools: the memory's defences against a bad writer (``memory.defences.trust``) for an MCP client.

A server of its own, beside the tenants' (``evolve.serve.protocols.mcp``), so that no tenant's session even
lists these tools and an operator's session has no tenant's: ``evolve.serve.protocols.mcp_http`` serves it to
an HTTP session whose bearer key is an operator key, and over stdio to ``evolve mcp SPEC --admin`` (the
process's owner, who can open the database anyway, is the operator). Four tools (``evolve.serve.operator``'s shapes):

- ``quarantined(namespace, writer)``: what ``[memory] trust = "quarantine"`` holds back from every recall;
- ``release(writer, ids, namespace)``: lets held memories in (at ``q_init``, no visits);
- ``distrust(writer, namespace, action)``: removes (or resets) what a writer wrote, drops its held ones;
- ``undo(writer, namespace)``: puts back what the distrust took.

Example:
    >>> # create_operator_server(TenantMemory(load_spec("data/facility_codes.toml")).store).run("stdio")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from connectors import ConfigError
from evolve.serve import operator
from evolve.serve.protocols.mcp import INSTALL_HINT, as_tool
from memory import MemoryStore

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

INSTRUCTIONS = """Operator tools for the defences of Evolve's memory against a bad writer.
Every memory records its writer, '<kind>:<name>': a served tenant's rated answers are 'tenant:<T>', what an MCP
client remembered 'mcp:<T>', a promotion 'promoted:<T>', an import 'import:<file>', a training run 'run:<name>'.
`quarantined` lists what the trust policy held back and `release` lets it in; `distrust` removes (or resets)
what a writer wrote, and `undo` puts it back. A namespace is the store's whole name, as `quarantined` lists it."""

QUARANTINED = (
    "The memories the trust policy ([memory] trust = 'quarantine') holds back from every recall, oldest first: "
    "id, namespace, writer, intent and experience. Filter by namespace and/or writer."
)
RELEASE = (
    "Let held memories in: those of a writer, of these ids and/or of a namespace (at least one). Released, they "
    "start at the initial Q with no visits and are recalled like any other. Returns how many were released."
)
DISTRUST = (
    "Stop trusting a writer after the fact: action 'remove' (default) removes every memory it wrote (logged, "
    "undoable) and drops its held ones; 'reset' sets their Q back to the initial Q with no visits. Twice is a "
    "no-op (zeros). Returns the counts: removed, reset, dropped, total."
)
UNDO = "Undo every distrust of a writer: its removed memories restored, reset ones given their Q back, dropped ones held again."

Writer = Annotated[str, Field(description="The writer, '<kind>:<name>' (e.g. 'tenant:Zürich-Nordhafen').")]
WriterFilter = Annotated[str | None, Field(description="Only this writer's, '<kind>:<name>' (default: any).")]
Namespace = Annotated[
    str | None, Field(description="Only this namespace, the store's whole name (default: every namespace).")
]
Ids = Annotated[list[str] | None, Field(description="The held memories' ids, as `quarantined` lists them.")]
Action = Annotated[
    Literal["remove", "reset"], Field(description="'remove' the writer's memories (default) or 'reset' their Q.")
]


def create_operator_server(store: MemoryStore, *, name: str = "evolve-memory-operator") -> MCPServer:
    """The MCP server of the four operator tools over ``store`` (the module docstring).

    Raises:
        ConfigError: the ``mcp`` package is not installed.
    """
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp_types import ToolAnnotations
    except ImportError as e:
        raise ConfigError(INSTALL_HINT) from e

    server: MCPServer = MCPServer(name, instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool(description=QUARANTINED, annotations=ToolAnnotations(title="Held memories", read_only_hint=True))
    def quarantined(namespace: Namespace = None, writer: WriterFilter = None) -> dict[str, Any]:
        return {"held": as_tool(lambda: operator.held(store, namespace=namespace, writer=writer))}

    @server.tool(description=RELEASE, annotations=ToolAnnotations(title="Release held memories", idempotent_hint=True))
    def release(writer: WriterFilter = None, ids: Ids = None, namespace: Namespace = None) -> dict[str, Any]:
        return as_tool(lambda: operator.release(store, writer=writer, ids=ids, namespace=namespace))

    hints = ToolAnnotations(title="Distrust a writer", destructive_hint=True, idempotent_hint=True)

    @server.tool(description=DISTRUST, annotations=hints)
    def distrust(writer: Writer, namespace: Namespace = None, action: Action = "remove") -> dict[str, Any]:
        return as_tool(lambda: operator.distrust(store, writer, namespace=namespace, action=action))

    @server.tool(description=UNDO, annotations=ToolAnnotations(title="Undo a distrust", destructive_hint=False))
    def undo(writer: Writer, namespace: Namespace = None) -> dict[str, Any]:
        return as_tool(lambda: operator.undo(store, writer, namespace=namespace))

    return server


__all__ = ["create_operator_server"]
