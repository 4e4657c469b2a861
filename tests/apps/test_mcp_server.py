"""``evolve mcp``: Evolve's memory as an MCP server, used through the official SDK's own client — over stdio
(``python -m apps.cli mcp SPEC --tenant``, started as MCP clients start it) and streamable HTTP (bearer keys
mapped to tenants): the five tools and their schemas, ratings that move the ranking, idempotent feedback,
explain, resources, tenants that never see or rate each other's memories, the shared memory, and errors."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from subprocess import PIPE
from typing import Any

import httpx
import pytest
from mcp_types import LATEST_PROTOCOL_VERSION

from apps.cli import main
from connectors import Message
from evolve.build import agent_namespace
from evolve.serve.deployment import Deployment
from evolve.spec import load_spec
from tests.support.extras import import_without
from tests.support.mcp import (
    KEYS,
    OSAKA,
    ROOT,
    ZURICH,
    ServedMCP,
    call,
    failed,
    read_json,
    serving_mcp,
    stdio_session,
)
from tests.support.serve import QUESTION, write_serve_spec

TOOLS = {"recall", "remember", "feedback", "explain", "stats"}
# One tenant per test that writes, so that no test ranks another's memories.
LODZ = "Łódź-Kontraktlogistik-Nachtschicht-03"
PIRAEUS = "Πειραιάς-Ναυτιλιακή-Αποθήκη-Βόρεια-5"
MONTREAL = "Montréal-Entrepôt-Frigorifique-Équipe-11"
GDANSK = "Gdańsk-Seehafen-Kühlhaus-Nachtschicht-08"
ALL_KEYS = {**KEYS, "sk-mcp-lodz-91aa07": LODZ, "sk-mcp-piraeus-3b6f18": PIRAEUS, "sk-mcp-montreal-c40d5e": MONTREAL,
            "sk-mcp-gdansk-e2f4a9": GDANSK}  # fmt: skip
TASK = "Door code of the Zürich-Nordhafen cold store, loading bay 4?"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedMCP]:
    with serving_mcp(write_serve_spec(tmp_path_factory.mktemp("mcp")), ALL_KEYS) as live:
        yield live


# ---- stdio: the session an MCP client (Claude Desktop, Cursor) runs --------------------------------------------


async def test_over_stdio_a_failure_rated_down_and_a_success_rated_up_swap_two_tied_memories(tmp_path: Path) -> None:
    async with stdio_session(write_serve_spec(tmp_path), "--tenant", ZURICH) as session:
        await swap_two_tied_memories(session, ZURICH)


async def test_over_http_a_failure_rated_down_and_a_success_rated_up_swap_two_tied_memories(served: ServedMCP) -> None:
    async with served.session(GDANSK) as session:
        await swap_two_tied_memories(session, GDANSK)


async def swap_two_tied_memories(session: Any, tenant: str) -> None:
    """Two memories of one task tie; the one a failure is rated on drops below, the one a success is rated on
    rises above: the ranking the next recall gives is the ratings'."""
    assert {t.name for t in (await session.list_tools()).tools} == TOOLS
    for lesson in ("Ask the shift lead for the code.", "Read it off the bay's site plan: 5318."):
        await call(session, "remember", task=TASK, outcome="success", what_worked=lesson)

    both = (await call(session, "recall", query=TASK, k=2))["memories"]
    assert len(both) == 2 and both[0]["similarity"] == pytest.approx(both[1]["similarity"])  # a tie
    first = await call(session, "recall", query=TASK, k=1)
    (misleading,) = first["memories"]
    down = await call(session, "feedback", recall_id=first["recall_id"], success=False)
    assert down["applied"] and down["reinforced"] == 1

    second = await call(session, "recall", query=TASK, k=1)
    (helpful,) = second["memories"]
    assert helpful["id"] != misleading["id"]  # rated down, the other one now comes first
    await call(session, "feedback", recall_id=second["recall_id"], success=True)

    ranked = (await call(session, "recall", query=TASK, k=2))["memories"]
    assert [m["id"] for m in ranked] == [helpful["id"], misleading["id"]]
    assert ranked[0]["q"] > 0 > ranked[1]["q"] and ranked[0]["visits"] == ranked[1]["visits"] == 1
    assert all(m["source"] == "own" and "similarity" in m["why"] and "Q" in m["why"] for m in ranked)

    prompts = await read_json(session, "evolve://prompts/head")
    assert prompts["run"] == f"codes@{tenant}"
    assert prompts["prompts"]["solver.system"] == "Reply with the code only."
    stored = await read_json(session, f"evolve://memory/{helpful['id']}")
    assert stored["q"] == ranked[0]["q"] and "5318" in stored["experience"]


def test_over_stdio_stdout_carries_the_protocol_only(tmp_path: Path) -> None:
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": LATEST_PROTOCOL_VERSION,
         "capabilities": {}, "clientInfo": {"name": "raw-test-client", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]  # fmt: skip
    command = [sys.executable, "-m", "apps.cli", "mcp", str(write_serve_spec(tmp_path)), "--tenant", OSAKA]
    server = subprocess.Popen(command, stdin=PIPE, stdout=PIPE, stderr=PIPE, text=True, cwd=ROOT)
    assert server.stdin is not None and server.stdout is not None
    try:
        server.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        server.stdin.flush()
        lines: list[dict[str, Any]] = []
        while not any(line.get("id") == 2 for line in lines):  # stdin stays open until the last answer
            line = server.stdout.readline()
            assert line, "the server closed stdout before answering"
            lines.append(json.loads(line))  # every line is JSON-RPC
        server.stdin.close()  # how a client ends a stdio server
        rest = server.stdout.read()  # to the end: the server exits
        stderr = server.stderr.read() if server.stderr is not None else ""
        server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
    assert [line.get("id") for line in lines] == [1, 2] and all(line["jsonrpc"] == "2.0" for line in lines)
    assert {t["name"] for t in lines[1]["result"]["tools"]} == TOOLS
    assert rest == "" and server.returncode == 0
    assert f"evolve mcp: memory of run 'codes@{OSAKA}'" in stderr


def test_stdio_needs_a_tenant_and_http_needs_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EVOLVE_API_KEYS", raising=False)
    spec = str(write_serve_spec(tmp_path))
    assert main(["mcp", spec]) == 2
    assert "over stdio serves one tenant: name it with --tenant NAME" in capsys.readouterr().err
    assert main(["mcp", spec, "--tenant", "a/b"]) == 2
    assert "a tenant name is" in capsys.readouterr().err
    assert main(["mcp", spec, "--transport", "http", "--tenant", ZURICH]) == 2
    assert "each bearer key names its tenant" in capsys.readouterr().err
    assert main(["mcp", spec, "--transport", "http", "--port", "0"]) == 2
    assert "evolve mcp --transport http needs at least one API key" in capsys.readouterr().err
    for http_only in (["--host", "0.0.0.0"], ["--log-level", "debug"], ["--port", "8200"]):  # never dropped
        assert main(["mcp", spec, "--tenant", ZURICH, *http_only]) == 2
        assert "are for --transport http" in capsys.readouterr().err


# ---- HTTP: tools, feedback, explain, resources -----------------------------------------------------------------


async def test_the_five_tools_say_when_to_use_them_and_what_they_take(served: ServedMCP) -> None:
    async with served.session(ZURICH) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        templates = (await session.list_resource_templates()).resource_templates
        resources = (await session.list_resources()).resources
    assert set(tools) == TOOLS
    assert "BEFORE" in tools["recall"].description and "AFTER" in tools["remember"].description
    assert "OUTCOME IS KNOWN" in tools["feedback"].description
    recall = tools["recall"].input_schema
    assert recall["required"] == ["query"]
    assert recall["properties"]["k"].items() >= {"minimum": 1, "maximum": 50, "default": 5}.items()
    remember = tools["remember"].input_schema
    assert remember["required"] == ["task", "outcome"] and remember["properties"]["outcome"]["enum"] == [
        "success", "failure",
    ]  # fmt: skip
    feedback = tools["feedback"].input_schema
    assert feedback["required"] == ["recall_id"]
    assert set(feedback["properties"]) == {"recall_id", "reward", "success", "key"}
    assert tools["explain"].input_schema["required"] == ["recall_id"]
    assert [str(r.uri) for r in resources] == ["evolve://prompts/head"]
    assert [t.uri_template for t in templates] == ["evolve://memory/{memory_id}"]


async def test_feedback_is_applied_once_per_key(served: ServedMCP) -> None:
    async with served.session(LODZ) as session:
        mine = await call(session, "remember", task=TASK, outcome="success", what_worked="Code 5318 from the plan.")
        found = await call(session, "recall", query=TASK, k=1)
        assert [m["id"] for m in found["memories"]] == [mine["id"]]
        rate = {"recall_id": found["recall_id"], "reward": 0.8, "key": "ticket-4471"}
        first, again = await call(session, "feedback", **rate), await call(session, "feedback", **rate)
        after = await read_json(session, f"evolve://memory/{mine['id']}")
        other_key = await call(session, "feedback", **{**rate, "key": "ticket-4472"})
        moved = await read_json(session, f"evolve://memory/{mine['id']}")
        bad = await failed(session, "feedback", recall_id=found["recall_id"], reward=0.5, success=True)
        out_of_range = await failed(session, "feedback", recall_id=found["recall_id"], reward=1.5)
    assert (first["applied"], first["reinforced"]) == (True, 1)
    assert (again["applied"], again["reinforced"]) == (False, 0)
    assert (after["q"], after["visits"]) == (pytest.approx(0.3 * 0.8), 1)  # α = 0.3: the repeat changed nothing
    assert other_key["applied"] and moved["visits"] == 2
    assert "exactly one of reward" in bad and "reward" in out_of_range


async def test_explain_shows_every_candidate_and_remember_then_recall_finds_the_memory(served: ServedMCP) -> None:
    async with served.session(PIRAEUS) as session:
        other = await call(session, "remember", task="Lunch menu of the canteen on Friday?", outcome="failure",
                            what_worked="Guessed.", instead="Ask the canteen.")  # fmt: skip
        mine = await call(session, "remember", task=TASK, outcome="success", what_worked="Site plan: 5318.")
        found = await call(session, "recall", query=TASK, k=1)
        why = await call(session, "explain", recall_id=found["recall_id"])
        stats = await call(session, "stats")
    assert found["memories"][0]["id"] == mine["id"] and "Site plan: 5318." in found["memories"][0]["experience"]
    assert other["success"] is False and "Ask the canteen." in other["experience"]
    candidates = {c["id"]: c for c in why["candidates"]}
    assert set(candidates) == {mine["id"], other["id"]} and why["selected"] == [mine["id"]]
    assert candidates[mine["id"]]["selected"] and not candidates[other["id"]]["selected"]
    assert candidates[mine["id"]]["sim"] > candidates[other["id"]]["sim"]
    assert all({"q", "score", "source"} <= set(c) for c in why["candidates"]) and why["query"] == TASK
    assert stats["count"] == 2 and stats["namespace"] == "solver"


async def test_a_memory_remembered_over_mcp_is_recalled_by_evolve_serve_for_the_same_tenant(
    served: ServedMCP,
) -> None:
    async with served.session(ZURICH) as session:
        mine = await call(session, "remember", task=QUESTION, outcome="success", what_worked="The plan says 4471.")
    deployment = Deployment(load_spec(served.memory.spec.path))  # type: ignore[arg-type]
    try:
        answer = deployment.answer([Message("user", QUESTION)], tenant=ZURICH)
        store = deployment.store
        assert store is not None
        (recall_id,) = answer.recall_ids
        assert mine["id"] in store.explain(recall_id, namespace=f"codes@{ZURICH}/solver")["selected"]
    finally:
        deployment.close()


# ---- tenants ---------------------------------------------------------------------------------------------------


async def test_a_tenant_never_sees_rates_or_explains_another_tenants_memories(served: ServedMCP) -> None:
    async with served.session(ZURICH) as zurich, served.session(OSAKA) as osaka:
        mine = await call(zurich, "remember", task=TASK, outcome="success", what_worked="Zürich's own lesson.")
        theirs = await call(zurich, "recall", query=TASK, k=5)
        assert mine["id"] in {m["id"] for m in theirs["memories"]}
        before = await read_json(zurich, f"evolve://memory/{mine['id']}")

        seen = await call(osaka, "recall", query=TASK, k=50)
        rated = await failed(osaka, "feedback", recall_id=theirs["recall_id"], success=False)
        explained = await failed(osaka, "explain", recall_id=theirs["recall_id"])
        unknown = await failed(osaka, "explain", recall_id="01a21bab0000000000000000000000ff")
        escape = await failed(osaka, "recall", query=TASK, namespace=f"../codes@{ZURICH}/solver")
        with pytest.raises(Exception, match="no memory"):
            await read_json(osaka, f"evolve://memory/{mine['id']}")
        assert (await call(osaka, "stats"))["count"] == 0

        after = await read_json(zurich, f"evolve://memory/{mine['id']}")
    assert seen["memories"] == []
    assert rated.replace(theirs["recall_id"], "ID") == explained.replace("explain", "feedback").replace(
        theirs["recall_id"], "ID"
    )  # fmt: skip
    assert "unknown recall id" in rated and unknown.split(":", 1)[1].startswith(" unknown recall id")
    assert "unknown namespace" in escape and "['solver']" in escape
    assert (after["q"], after["visits"]) == (before["q"], before["visits"])


async def test_the_trained_runs_memory_is_shared_read_only(served: ServedMCP) -> None:
    store = served.memory.store
    trained = store.add(
        "Door code of the Montréal cold store, dock 2?", "Trained: the dock 2 code is 2209.",
        namespace=agent_namespace("codes", "solver"),
    )  # fmt: skip
    async with served.session(MONTREAL) as montreal, served.session(OSAKA) as osaka:
        found = await call(montreal, "recall", query="Door code of the Montréal cold store, dock 2?", k=1)
        assert [(m["id"], m["source"]) for m in found["memories"]] == [(trained.id, "shared")]
        await call(montreal, "feedback", recall_id=found["recall_id"], success=True)
        again = await call(montreal, "recall", query="Door code of the Montréal cold store, dock 2?", k=1)
        elsewhere = await call(osaka, "recall", query="Door code of the Montréal cold store, dock 2?", k=1)
    assert again["memories"][0]["q"] > 0  # this tenant's Q of it moved...
    assert store.get(trained.id, namespace="codes/solver").q == trained.q  # ...the shared memory did not
    assert elsewhere["memories"][0]["id"] == trained.id and elsewhere["memories"][0]["q"] == trained.q


async def test_bad_arguments_are_tool_errors_that_say_what_was_expected(served: ServedMCP) -> None:
    async with served.session(OSAKA) as session:
        too_many = await failed(session, "recall", query=TASK, k=51)
        outcome = await failed(session, "remember", task=TASK, outcome="maybe")
        empty = await failed(session, "remember", task="", outcome="success")
    assert "less than or equal to 50" in too_many and "outcome" in outcome and "intent" in empty
    assert "Traceback" not in too_many + outcome + empty


def test_a_request_without_a_valid_key_is_refused_with_401(served: ServedMCP) -> None:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for headers in ({}, {"Authorization": "Bearer sk-mcp-not-a-key"}, {"Authorization": "sk-mcp-zurich-7c2e91"}):
        response = httpx.post(served.url, json=ping, headers=headers)
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
        assert response.json()["error"]["code"] == "invalid_api_key"


def test_without_the_mcp_extra_the_command_says_what_to_install(tmp_path: Path) -> None:
    assert (
        import_without("mcp", "apps.cli") == "imported"
        and import_without("mcp", "evolve.serve.protocols.mcp") == "imported"
    )
    code = (
        "import sys; sys.modules['mcp'] = None\nfrom apps.cli import main\n"
        f"sys.exit(main(['mcp', {str(write_serve_spec(tmp_path))!r}, '--tenant', {ZURICH!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "pip install -e '.[mcp]'" in done.stderr


def test_the_library_example_runs() -> None:
    import doctest

    import evolve.serve.tenant_memory

    result = doctest.testmod(evolve.serve.tenant_memory)
    assert result.attempted > 0 and result.failed == 0
