"""`evolve mcp`'s operator tools (issue 40), through the official SDK's client: over HTTP an operator key opens a
session of its own (the four operator tools, no tenant's) and a tenant's session never sees them; over stdio
``--admin`` serves them. What a tenant remembers under ``[memory] trust = "quarantine"`` is held until the
operator releases it; a distrust hides it from the tenant's recall and an undo brings it back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from apps.cli import main
from evolve.serve.tenant_memory import TenantMemory
from evolve.spec import load_spec
from tests.support.mcp import KEYS, OSAKA, ZURICH, ServedMCP, call, failed, http_session, serving_mcp, stdio_session
from tests.support.serve import write_serve_spec

OPERATOR = "sk-mcp-ops-5e19c0d7"
OPERATOR_TOOLS = {"quarantined", "release", "distrust", "undo"}
TENANT_TOOLS = {"recall", "remember", "feedback", "explain", "stats"}
TASK = "Door code of the Zürich-Nordhafen cold store, loading bay 4?"
LESSON = "Read it off the bay's site plan: 5318."


def write_spec(folder: Path) -> Path:
    """``write_serve_spec``'s team, whose store holds back what an MCP client remembers (``mcp:*`` is untrusted)."""
    spec = write_serve_spec(folder)
    spec.write_text(spec.read_text().replace("[memory]\n", '[memory]\ntrust = "quarantine"\n'))
    return spec


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedMCP]:
    with serving_mcp(write_spec(tmp_path_factory.mktemp("operator")), KEYS, admin_keys=[OPERATOR]) as live:
        yield live


async def recalled(session: Any) -> list[str]:
    return [m["id"] for m in (await call(session, "recall", query=TASK, k=5))["memories"]]


async def test_an_operator_releases_distrusts_and_undoes_what_a_tenant_remembered(served: ServedMCP) -> None:
    async with (
        served.session(ZURICH) as zurich,
        served.session(OSAKA) as osaka,
        http_session(served.url, OPERATOR) as operator,
    ):
        mine = (await call(zurich, "remember", task=TASK, outcome="success", what_worked=LESSON))["id"]
        theirs = (await call(osaka, "remember", task=TASK, outcome="success", what_worked=LESSON))["id"]
        assert await recalled(zurich) == [] and await recalled(osaka) == []  # held back: an MCP client is untrusted
        held = (await call(operator, "quarantined", writer=f"mcp:{ZURICH}"))["held"]
        assert [(h["id"], h["writer"], h["namespace"]) for h in held] == [
            (mine, f"mcp:{ZURICH}", f"codes@{ZURICH}/solver")
        ]

        assert await call(operator, "release", writer=f"mcp:{ZURICH}") == {"released": 1}
        assert await recalled(zurich) == [mine]
        assert await recalled(osaka) == []  # the other tenant's stays held
        assert [h["id"] for h in (await call(operator, "quarantined"))["held"]] == [theirs]

        removed = await call(operator, "distrust", writer=f"mcp:{ZURICH}")
        assert removed == {"writer": f"mcp:{ZURICH}", "action": "remove", "removed": 1, "reset": 0, "dropped": 0,
                           "total": 1}  # fmt: skip
        assert await recalled(zurich) == []
        assert (await call(operator, "distrust", writer=f"mcp:{ZURICH}", action="remove"))["total"] == 0  # twice
        undone = await call(operator, "undo", writer=f"mcp:{ZURICH}", namespace=f"codes@{ZURICH}/solver")
        assert (undone["action"], undone["removed"], undone["total"]) == ("undo", 1, 1)
        assert await recalled(zurich) == [mine]


async def test_an_operator_session_has_only_the_operator_tools_and_a_tenants_none_of_them(served: ServedMCP) -> None:
    async with http_session(served.url, OPERATOR) as operator, served.session(ZURICH) as zurich:
        tools = {t.name: t for t in (await operator.list_tools()).tools}
        assert set(tools) == OPERATOR_TOOLS
        assert {t.name for t in (await zurich.list_tools()).tools} == TENANT_TOOLS
        assert tools["distrust"].input_schema["required"] == ["writer"]
        assert tools["distrust"].input_schema["properties"]["action"]["enum"] == ["remove", "reset"]
        assert tools["distrust"].annotations is not None and tools["distrust"].annotations.destructive_hint
        assert "Unknown tool: distrust" in await failed(zurich, "distrust", writer=f"mcp:{ZURICH}")
        assert "Unknown tool: recall" in await failed(operator, "recall", query=TASK)


@pytest.mark.parametrize(
    ("tool", "arguments", "says"),
    [
        ("distrust", {"writer": "robot:R2-D2"}, "writer must be '<kind>:<name>' with kind one of run, tenant"),
        ("distrust", {"writer": "tenant:Niemand-Unbekannt-Logistik-GmbH"}, "no memory of this store was written by"),
        ("distrust", {"writer": f"mcp:{ZURICH}", "action": "delete"}, "action"),
        ("undo", {}, "writer"),
        ("release", {}, "release: say which held memories to release"),
        ("quarantined", {"namespace": ""}, "namespace must be a non-empty string"),
    ],
)
async def test_bad_operator_input_is_a_tool_error_that_names_what_was_expected(
    served: ServedMCP, tool: str, arguments: dict[str, Any], says: str
) -> None:
    async with http_session(served.url, OPERATOR) as operator:
        assert says in await failed(operator, tool, **arguments)


def test_without_an_operator_key_no_session_gets_the_operator_tools(tmp_path: Path) -> None:
    with serving_mcp(write_spec(tmp_path), KEYS) as live:
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        headers = {"Authorization": f"Bearer {OPERATOR}", "Accept": "application/json, text/event-stream"}
        refused = httpx.post(live.url, json=request, headers=headers, timeout=30)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"


async def test_over_stdio_admin_serves_the_operator_tools(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    memory = TenantMemory(load_spec(spec))
    try:
        held = memory.remember(ZURICH, TASK, success=True, what_worked=LESSON)["id"]
    finally:
        memory.close()
    async with stdio_session(spec, "--admin") as operator:
        assert {t.name for t in (await operator.list_tools()).tools} == OPERATOR_TOOLS
        assert [h["id"] for h in (await call(operator, "quarantined"))["held"]] == [held]
        assert (await call(operator, "release", ids=[held]))["released"] == 1
    memory = TenantMemory(load_spec(spec))
    try:
        assert [m["id"] for m in memory.recall(ZURICH, TASK)["memories"]] == [held]
    finally:
        memory.close()


def test_admin_is_for_stdio_and_admin_keys_for_http(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = str(write_spec(tmp_path))
    assert main(["mcp", spec, "--admin", "--tenant", ZURICH]) == 2
    assert "or the operator's tools with --admin (one of the two)" in capsys.readouterr().err
    assert main(["mcp", spec, "--admin", "--admin-key", OPERATOR]) == 2
    assert "--admin-key, --host, --port, --log-level, --metrics-tenants and --otel are for --transport http" in (
        capsys.readouterr().err
    )
    assert main(["mcp", spec, "--transport", "http", "--admin"]) == 2
    assert "--tenant and --admin are for --transport stdio" in capsys.readouterr().err
    key = next(iter(KEYS))
    assert main(["mcp", spec, "--transport", "http", "--key", f"{key}={ZURICH}", "--admin-key", key]) == 2
    err = capsys.readouterr().err
    assert f"operator key #1 is also the API key of tenant {ZURICH!r}" in err and key not in err
