"""The operator's defences over a served store (``memory.defences.trust``, issue 40), as JSON-ready dicts: one shape for
``evolve serve``'s ``/v1/admin/memory/...`` routes (``evolve.serve.protocols.openai_admin``) and ``evolve mcp``'s
operator tools (``evolve.serve.protocols.mcp_operator``), as ``evolve memory distrust|undo|release|quarantined``
does from the shell.

A writer is ``"<kind>:<name>"``: a served tenant's rated answers are ``tenant:<T>``, what an MCP client
remembers ``mcp:<T>``, a promotion ``promoted:<T>`` (``memory.defences.trust``). A namespace is the store's whole
name (``<run>@<tenant>/<agent>``), as ``held`` lists it; none given: every namespace.

Example:
    >>> from memory import MemoryStore
    >>> from connectors import HashEmbedder
    >>> store = MemoryStore("sqlite://", embedder=HashEmbedder(dim=32))
    >>> _ = store.add("Door code of the Harbor warehouse?", "It is 9999.", namespace="codes@acme/solver",
    ...               writer="tenant:acme")
    >>> distrust(store, "tenant:acme")
    {'writer': 'tenant:acme', 'action': 'remove', 'removed': 1, 'reset': 0, 'dropped': 0, 'total': 1}
    >>> distrust(store, "tenant:acme")["total"]  # twice: nothing left to do
    0
    >>> undo(store, "tenant:acme")["removed"]
    1
    >>> store.close()
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from memory import DistrustReport, MemoryItem, MemoryStore


def held(store: MemoryStore, *, namespace: str | None = None, writer: str | None = None) -> list[dict[str, Any]]:
    """The memories ``[memory] trust = "quarantine"`` holds back from every recall (of ``namespace`` and
    ``writer``; None: all), oldest first."""
    return [held_body(item) for item in store.quarantined(namespace, writer)]


def distrust(
    store: MemoryStore, writer: str, *, namespace: str | None = None, action: str = "remove"
) -> dict[str, Any]:
    """Remove (``action="reset"``: reset to ``q_init``, no visits) what ``writer`` wrote; twice: zeros."""
    return report_body(store.distrust(writer, namespace=namespace, action=action))


def undo(store: MemoryStore, writer: str, *, namespace: str | None = None) -> dict[str, Any]:
    """Undo every distrust of ``writer``: the counts of what came back."""
    return report_body(store.undo_distrust(writer, namespace=namespace))


def release(
    store: MemoryStore, *, writer: str | None = None, ids: Sequence[str] | None = None, namespace: str | None = None
) -> dict[str, Any]:
    """Let held memories in (at ``q_init``, no visits): how many."""
    return {"released": store.release(writer=writer, ids=None if ids is None else list(ids), namespace=namespace)}


def report_body(report: DistrustReport) -> dict[str, Any]:
    return {**dataclasses.asdict(report), "total": report.total}


def held_body(item: MemoryItem) -> dict[str, Any]:
    return {
        "id": item.id,
        "namespace": item.namespace,
        "writer": item.meta.get("writer"),
        "intent": item.intent,
        "experience": item.experience,
        "kind": item.kind,
        "created_at": item.created_at,
    }


__all__ = ["distrust", "held", "release", "undo"]
