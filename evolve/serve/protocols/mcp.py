"""``evolve mcp``: Evolve's Q-valued memory as an MCP server, on the official MCP SDK (``MCPServer``).

Any MCP client (Claude Desktop, Claude Code, Cursor, an agent on the SDK's client) gets five tools over a
tenant's memory (``evolve.serve.tenant_memory.TenantMemory``):

- ``recall(query, k, namespace)`` before a task: the memories most worth reusing, ranked by similarity
  and their learned utility Q, and a ``recall_id``;
- ``remember(task, outcome, what_worked, instead, namespace)`` after it: one new experience;
- ``feedback(recall_id, reward | success, key)`` once the outcome is known: reinforces exactly what that
  recall selected (once per key), which is how memories that help rise and misleading ones sink;
- ``explain(recall_id)`` and ``stats(namespace)``: why a recall chose what it chose; counts and Q.

Resources: ``evolve://prompts/head`` (the run's HEAD prompts, as ``evolve serve`` answers with them) and
``evolve://memory/{memory_id}``. A failure the caller can fix is a tool error (``isError``) whose text
says what was expected; anything else is the SDK's generic tool error, never a traceback.

The server does not know transports: ``tenant_of()`` names the tenant of the call being served (a fixed
name on stdio; on HTTP, what a bearer key maps to, which ``evolve.serve.protocols.mcp_http`` puts in a context
variable the SDK carries into every handler).

Example:
    >>> # memory = TenantMemory(load_spec("data/facility_codes.toml"))
    >>> # create_mcp_server(memory, tenant_of=lambda: "Zürich-Nordhafen").run("stdio")
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import Field

from connectors import ConfigError, EvolveError, StoreError
from connectors.install import extra_hint
from evolve.serve.metrics import Metrics
from evolve.serve.tenant_memory import MAX_K, TenantMemory

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

INSTALL_HINT = f"evolve mcp needs the MCP SDK and uvicorn: {extra_hint('mcp')}"
PROMPTS_URI = "evolve://prompts/head"
MEMORY_URI = "evolve://memory/{memory_id}"

INSTRUCTIONS = """Long-term memory that learns which experiences help. Use it in a loop:
1. Before starting a task, call `recall` with the task: reuse what the memories say and keep the `recall_id`.
2. After finishing, call `remember` with what worked (or, for a failure, what to do instead).
3. Once the outcome is known, call `feedback` with that `recall_id`: success, failure or a reward in [-1, 1].
Feedback is what makes useful memories rank higher next time; give it for every recall you used.
Namespaces (one per agent of the team): {namespaces}."""

RECALL = (
    "Call BEFORE starting a task: the past experiences most worth reusing for it, best first, each with its "
    "learned utility Q, how often it was rated, whether it came from your own memory or the shared one, and "
    "why it was chosen. Keep the returned recall_id: pass it to `feedback` once you know how the task went."
)
REMEMBER = (
    "Call AFTER finishing a task (solved or not): stores one experience so that a later `recall` of a similar "
    "task finds it. Say what worked (the steps, the answer's source) or, for a failure, what to do instead. "
    "Returns the new memory's id."
)
FEEDBACK = (
    "Call ONCE THE OUTCOME IS KNOWN for a task you used a recall for: rewards exactly the memories that recall "
    "selected (success=true or a reward up to 1 raises them; success=false or a negative reward lowers them). "
    "Give either success or reward. Safe to retry: a repeat with the same recall_id and key changes nothing "
    "(applied=false). Returns how many memories were reinforced."
)
EXPLAIN = (
    "Why a recall chose what it chose: every candidate with its similarity, Q, score and whether it was "
    "selected, and the feedback applied since. Use it to debug a surprising recall."
)
STATS = "How many memories the namespace holds, how often they were rated, and the distribution of their Q."

Query = Annotated[str, Field(description="The task or question you are about to work on, in plain words.")]
K = Annotated[int, Field(ge=1, le=MAX_K, description=f"How many memories to return (1-{MAX_K}).")]
Namespace = Annotated[
    str | None, Field(description="The agent whose memory to use (default: the team's first agent with memory).")
]
RecallId = Annotated[str, Field(description="The recall_id that `recall` returned.")]
Task = Annotated[str, Field(description="The task as it was given (what a later recall would be asked).")]
Outcome = Annotated[Literal["success", "failure"], Field(description="Whether the task was solved.")]
WhatWorked = Annotated[
    str, Field(description="What you did: the steps or source that gave the answer (for a failure: what you tried).")
]
Instead = Annotated[str, Field(description="For a failure: what to do instead next time, when you know it.")]
Reward = Annotated[
    float | None, Field(ge=-1.0, le=1.0, description="How much the recalled memories helped: -1 (misled) to 1.")
]
Success = Annotated[bool | None, Field(description="Whether the task succeeded (true: reward 1, false: reward -1).")]
Key = Annotated[
    str | None,
    Field(max_length=200, description="An idempotency key: one feedback per recall_id and key (default 'default')."),
]

T = TypeVar("T")


def create_mcp_server(
    memory: TenantMemory, *, tenant_of: Callable[[], str], name: str = "evolve-memory", metrics: Metrics | None = None
) -> MCPServer:
    """The MCP server over ``memory``; ``tenant_of()`` names the tenant of the request being served; ``metrics``
    (the HTTP app's) count its recalls, memories remembered and ratings.

    Raises:
        ConfigError: the ``mcp`` package is not installed.

    Example:
        >>> # server = create_mcp_server(TenantMemory(spec), tenant_of=lambda: "Zürich-Nordhafen")
        >>> # server.run("stdio")
    """
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp_types import ToolAnnotations
    except ImportError as e:
        raise ConfigError(INSTALL_HINT) from e

    # The SDK configures the root logger when the app has not: at INFO it would log every call.
    instructions = INSTRUCTIONS.format(namespaces=", ".join(memory.agents))
    server: MCPServer = MCPServer(name, instructions=instructions, log_level="WARNING")

    def tenant() -> str:
        found = tenant_of()
        if not isinstance(found, str) or not found:
            raise ConfigError("this request has no tenant (a bearer key or --tenant names it)")
        return found

    @server.tool(description=RECALL, annotations=ToolAnnotations(title="Recall memories", destructive_hint=False))
    def recall(query: Query, k: K = 5, namespace: Namespace = None) -> dict[str, Any]:
        return as_tool(counted(metrics, "recall", lambda: memory.recall(tenant(), query, k=k, agent=namespace)))

    @server.tool(description=REMEMBER, annotations=ToolAnnotations(title="Remember", destructive_hint=False))
    def remember(
        task: Task, outcome: Outcome, what_worked: WhatWorked = "", instead: Instead = "", namespace: Namespace = None
    ) -> dict[str, Any]:
        return as_tool(
            counted(metrics, "remember", lambda: memory.remember(
                tenant(), task, success=outcome == "success", what_worked=what_worked, instead=instead, agent=namespace
            ))
        )  # fmt: skip

    hints = ToolAnnotations(title="Rate a recall", destructive_hint=False, idempotent_hint=True)

    @server.tool(description=FEEDBACK, annotations=hints)
    def feedback(
        recall_id: RecallId, reward: Reward = None, success: Success = None, key: Key = None
    ) -> dict[str, Any]:
        rate = lambda: memory.feedback(tenant(), recall_id, reward=reward, success=success, key=key)  # noqa: E731
        return as_tool(counted(metrics, "feedback", rate))

    @server.tool(description=EXPLAIN, annotations=ToolAnnotations(title="Explain a recall", read_only_hint=True))
    def explain(recall_id: RecallId) -> dict[str, Any]:
        return as_tool(lambda: memory.explain(tenant(), recall_id))

    @server.tool(description=STATS, annotations=ToolAnnotations(title="Memory statistics", read_only_hint=True))
    def stats(namespace: Namespace = None) -> dict[str, Any]:
        return as_tool(lambda: memory.stats(tenant(), agent=namespace))

    add_resources(server, memory, tenant)
    return server


def add_resources(server: MCPServer, memory: TenantMemory, tenant: Callable[[], str]) -> None:
    """The HEAD prompts and one memory by id, as JSON resources of the tenant."""

    @server.resource(
        PROMPTS_URI,
        name="head-prompts",
        description="The team's prompts at HEAD (what `evolve serve` answers with): '<agent>.system' and "
        "'<agent>.library', with the version id.",
        mime_type="application/json",
    )
    def head_prompts() -> str:
        return as_resource(lambda: memory.prompts(tenant()))

    @server.resource(
        MEMORY_URI,
        name="memory",
        description="One memory by id (its intent, experience, Q and visits): your own or a shared one.",
        mime_type="application/json",
    )
    def memory_by_id(memory_id: str) -> str:
        return as_resource(lambda: memory.memory(tenant(), memory_id))


def counted(metrics: Metrics | None, tool: str, call: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """``call`` (a ``recall``, ``remember`` or ``feedback``) telling ``metrics`` what it did once it succeeded: a
    recall and its seconds, a memory remembered, a rating received and whether it was applied."""
    if metrics is None:
        return call

    def run() -> dict[str, Any]:
        started = time.perf_counter()
        out = call()
        if tool == "recall":
            metrics.recalled(time.perf_counter() - started)
        elif tool == "remember":
            metrics.remember()
        else:
            metrics.rated(out.get("applied") is True)
        return out

    return run


def as_tool(call: Callable[[], T]) -> T:
    """``call()``, with Evolve's errors as MCP tool errors (``isError``, the message for the model to read)."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        return call()
    except EvolveError as e:
        raise ToolError(str(e)) from None


def as_resource(call: Callable[[], dict[str, Any]]) -> str:
    """``call()`` as JSON text; an unknown id is the SDK's not-found error, other Evolve errors its resource
    error (both carry the message to the client)."""
    from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError

    try:
        return json.dumps(call(), ensure_ascii=False)
    except StoreError as e:
        raise ResourceNotFoundError(str(e)) from None
    except EvolveError as e:
        raise ResourceError(str(e)) from None


__all__ = ["INSTALL_HINT", "MEMORY_URI", "PROMPTS_URI", "create_mcp_server"]
