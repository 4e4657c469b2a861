"""Tools from MCP servers: an agent calls a real MCP server's tools (the official SDK on both sides, over
stdio and streamable HTTP) as it calls Python tools — results in the next turn and the trajectory,
errors and timeouts as observations, the step budget — from the library and from a spec."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connectors import ConfigError, ConnectorError, ProviderTimeout, Tool, load_chat
from evolve.agent import Agent, Team
from evolve.build import build, build_team
from evolve.spec import load_spec
from evolve.tools.mcp import MCPConnection, MCPConnections, MCPToolError, result_text

ROOT = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, "-m", "tests.support.mcp_tool_server"]
SERVER_FILE = ROOT / "tests" / "support" / "mcp_tool_server.py"
KEY = "mcp-test-key-Zurich-Nordhafen-07"
SITE = "Zürich-Nordhafen"


def call(name: str, **arguments: Any) -> str:
    """What a model writes to call a tool (the prompted format a scripted model can say)."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}</tool_call>"


def scripted(*replies: str) -> Any:
    return load_chat("fake/scripted", replies=list(replies))


@pytest.fixture(scope="module")
def stdio() -> Iterator[MCPConnection]:
    """The tool server as a subprocess on stdio, shared by this module's tests."""
    with MCPConnection(SERVER, cwd=ROOT, timeout=10) as connection:
        yield connection


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """The tool server over streamable HTTP (uvicorn in a thread), answering only requests with ``KEY``."""
    import uvicorn

    from tests.support.mcp_tool_server import http_app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(http_app(KEY), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the MCP tool server did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def test_an_agent_calls_an_mcp_tool_and_reads_its_result_in_the_next_turn(stdio: MCPConnection) -> None:
    tools = stdio.tools()
    model = scripted(call("door_code", site=SITE), "The door code is 5318.")
    agent = Agent("clerk", model, tools=tools)

    [act] = Team([agent]).act([f"What is the door code of the {SITE} warehouse?"])

    assert [t.name for t in tools] == ["door_code", "wait"]
    assert tools[0].parameters["required"] == ["site"] and tools[0].description.startswith("The door code of")
    assert act.answer == "The door code is 5318." and act.error is None
    [step] = act.steps
    assert [(r.call.name, dict(r.call.arguments), r.result, r.ok) for r in step.calls] == [
        ("door_code", {"site": SITE}, "5318", True)
    ]
    second_prompt = model.backend.calls[1][0]  # what the model read in its next turn
    assert (second_prompt[-1].role, second_prompt[-1].content) == ("tool", "5318")


def test_a_tool_error_and_a_timeout_are_observations_and_the_agent_still_answers(stdio: MCPConnection) -> None:
    model = scripted(call("door_code", site="Atlantis"), call("wait", seconds=5), "I could not find it.")
    agent = Agent("clerk", model, tools=stdio.tools(), tool_timeout=0.5)

    [act] = Team([agent]).act(["What is the door code of the Atlantis warehouse?"])

    assert act.error is None and act.answer == "I could not find it."
    refused, late = act.steps[0].calls
    assert not refused.ok and refused.result.startswith("error: MCPToolError: ")
    assert "no warehouse called 'Atlantis'" in refused.result
    assert (late.ok, late.result) == (False, "error: tool 'wait' did not answer within 0.5 s")
    assert [m.content for m in model.backend.calls[2][0] if m.role == "tool"] == [refused.result, late.result]


def test_a_call_past_the_connections_timeout_is_cancelled_and_the_connection_goes_on(stdio: MCPConnection) -> None:
    with pytest.raises(ProviderTimeout, match=r"tool 'wait' did not answer within 0.3 s"):
        stdio.call("wait", {"seconds": 5}, timeout=0.3)
    with pytest.raises(MCPToolError, match="no warehouse called 'Atlantis'"):
        stdio.call("door_code", {"site": "Atlantis"})
    assert stdio.call("door_code", {"site": "東京-ロジスティクス"}) == "0846"


def test_the_step_budget_bounds_the_calls_to_an_mcp_tool(stdio: MCPConnection) -> None:
    model = scripted(call("door_code", site="Harbor"))  # the model calls again and again
    agent = Agent("clerk", model, tools=stdio.tools(only=["door_code"]), tool_rounds=2)

    [act] = Team([agent]).act(["What is the door code of the Harbor warehouse?"])

    assert len(model.backend.calls) == 2 and [r.result for r in act.steps[0].calls] == ["7291", "7291"]
    assert act.steps[0].finish == "tool_calls"  # it never answered: the budget ended the turn


def test_an_agent_calls_an_mcp_tool_over_http_with_its_bearer_key(http_url: str) -> None:
    with MCPConnection(url=http_url, headers={"Authorization": f"Bearer {KEY}"}) as server:
        model = scripted(call("door_code", site="the Harbor warehouse"), "7291")
        [act] = Team([Agent("clerk", model, tools=server.tools())]).act(["Door code of the Harbor warehouse?"])
    assert act.answer == "7291" and [r.result for r in act.steps[0].calls] == ["7291"]

    with pytest.raises(ConnectorError, match=r"could not connect to the MCP server `http://127.0.0.1:\d+/mcp`") as e:
        MCPConnection(url=http_url, headers={"Authorization": "Bearer wrong-key"})
    assert "HTTP 401" in str(e.value) and "wrong-key" not in str(e.value)


def test_a_server_that_cannot_start_or_a_wrong_setting_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(
        ConnectorError, match=r"(?s)`python -m warehouse_tools_nowhere`.*No module named warehouse_tools_nowhere"
    ) as e:
        MCPConnection("python -m warehouse_tools_nowhere", cwd=tmp_path)
    assert e.value.retryable
    with pytest.raises(ConnectorError, match=r"`no-such-mcp-server --port 1`: FileNotFoundError"):
        MCPConnection("no-such-mcp-server --port 1")
    with pytest.raises(ConfigError, match="give exactly one"):
        MCPConnection("python tools.py", url="http://127.0.0.1:9000/mcp")
    with pytest.raises(ConfigError, match="give exactly one"):
        MCPConnection()
    with pytest.raises(ConfigError, match="headers apply to an MCP server at a url"):
        MCPConnection("python tools.py", headers={"Authorization": "Bearer x"})
    with pytest.raises(ConfigError, match="url must be http"):
        MCPConnection(url="ftp://127.0.0.1/mcp")
    with pytest.raises(ConfigError, match=r"has no tool \['open_gate'\]"):
        MCPConnection(SERVER, cwd=ROOT).tools(only=["open_gate"])


def _children() -> set[int]:
    """This process's child processes (Linux)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.add(int(entry.name))
    return found


def test_a_server_that_dies_is_an_observation_once_and_the_next_call_reconnects() -> None:
    before = _children()
    with MCPConnection(SERVER, cwd=ROOT) as server:
        [child] = _children() - before
        door_code = server.tools(only=["door_code"])[0]
        os.kill(child, 9)
        model = scripted(call("door_code", site="Harbor"), call("door_code", site="Harbor"), "7291")
        [act] = Team([Agent("clerk", model, tools=[door_code])]).act(["Door code of the Harbor warehouse?"])
    lost, again = act.steps[0].calls
    assert not lost.ok and "the connection is closed and the next call reconnects" in lost.result
    assert (again.ok, again.result, act.answer) == (True, "7291", "7291")
    assert child not in _children()


def test_copies_of_a_team_share_the_connection_and_one_sent_to_ray_workers_reconnects(stdio: MCPConnection) -> None:
    from evolve.envs.tasks import Task, TaskEnv
    from evolve.executors import Rollout
    from evolve.ray_executor import pack, unpack

    tools = stdio.tools()
    model = scripted(call("door_code", site="Harbor"), "The door code is 7291.")
    team = Team([Agent("clerk", model, system="Find door codes.", tools=tools)])

    renamed = team.with_prompts({"clerk.system": "Find door codes, then answer with the code."})
    replaced = dataclasses.replace(team.agents["clerk"], name="night-clerk")
    assert renamed.agents["clerk"].tools == tuple(tools) and replaced.tools == tuple(tools)
    assert all(t.fn.connection is stdio for t in renamed.agents["clerk"].tools)  # type: ignore[union-attr]

    tasks = [Task(id="harbor-warehouse-door", prompt="What is the door code of the Harbor warehouse?", answer="7291")]
    rollout = unpack(pack(Rollout(team, lambda: TaskEnv(tasks), run="Zürich-Nordhafen-Logistik-Team-07", round=1)))
    door_code = rollout.team.agents["clerk"].tools[0]
    assert door_code.fn.connection is not stdio and "not connected" in repr(door_code.fn.connection)  # type: ignore[union-attr]
    [episode] = rollout(tasks)  # what a worker runs: its copy connects on the first call
    assert episode.reward == 1.0 and episode.steps[0].calls[0].result == "7291"
    door_code.fn.connection.close()  # type: ignore[union-attr]


def test_tool_names_must_stay_unique_across_python_and_mcp_tools(stdio: MCPConnection) -> None:
    def door_code(site: str) -> str:
        """A local door code book."""
        return "0000"

    with pytest.raises(ConfigError, match="tool names must be unique"):
        Agent("clerk", scripted("ok"), tools=[Tool.from_function(door_code), *stdio.tools()])
    servers = MCPConnections(cwd=ROOT)
    with pytest.raises(ConfigError, match="tool 'door_code' is offered by both MCP servers"):
        servers.tools(
            [
                "python -m tests.support.mcp_tool_server",
                shlex.join([sys.executable, "-m", "tests.support.mcp_tool_server"]),
            ]
        )
    servers.close()


def test_docstring_examples_run() -> None:
    import doctest

    import evolve.tools.mcp
    import evolve.tools.mcp_link

    for module in (evolve.tools.mcp, evolve.tools.mcp_link):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0


def test_result_text_joins_text_and_falls_back_to_structured_content() -> None:
    from mcp_types import CallToolResult, ImageContent, TextContent

    both = CallToolResult(content=[TextContent(text="5318"), ImageContent(data="", mime_type="image/png")])
    assert result_text(both) == "5318\n[image: image/png]"
    assert result_text(CallToolResult(content=[], structured_content={"code": "5318"})) == '{"code": "5318"}'


SPEC = """
[run]
name = "Zürich-Nordhafen-Logistik-Team-07"
database = "sqlite:///evolve.db"

[model]
chat = "fake/scripted"
options = {{ replies = [{call}, "The door code is 5318."] }}

[embedder]
name = "hash"

[environment]
tasks = "tasks.jsonl"
paraphrase = false

[[agents]]
name = "clerk"
system = "Find door codes with your tools."
mcp = [{mcp}]
"""


def write_spec(folder: Path, mcp: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    task = {
        "id": "zürich-nordhafen-door",
        "prompt": f"What is the door code of the {SITE} warehouse?",
        "answer": "5318",
    }
    (folder / "tasks.jsonl").write_text(json.dumps(task, ensure_ascii=False) + "\n", encoding="utf-8")
    (folder / "spec.toml").write_text(SPEC.format(call=json.dumps(call("door_code", site=SITE)), mcp=mcp))
    return folder / "spec.toml"


def test_a_spec_gives_an_agent_its_mcp_servers_tools_and_a_run_uses_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "Zürich-Nordhafen agent"
    folder.mkdir()
    shutil.copy(SERVER_FILE, folder / "warehouse_tools.py")
    spec = load_spec(write_spec(folder, '"python warehouse_tools.py"'))  # relative: the spec's folder
    monkeypatch.chdir(tmp_path)  # not the spec's folder

    evolver = build(spec, progress=False)
    [metrics] = evolver.run(rounds=1)

    assert [t.name for t in evolver.team.agents["clerk"].tools] == ["door_code", "wait"]
    assert metrics.success_rate == 1.0 and metrics.errors == 0
    [memory] = evolver.memory.items()  # type: ignore[union-attr]
    assert f"Called door_code(site={SITE!r}) -> 5318" in memory.experience
    evolver.memory.close()  # type: ignore[union-attr]


def test_tenants_teams_built_with_one_mcp_connections_share_one_server(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path / "spec", '"python -m tests.support.mcp_tool_server"'))
    with MCPConnections(cwd=ROOT) as servers:  # -m finds the module from the repository's root
        teams = [
            build_team(spec.for_tenant(tenant), scripted(call("door_code", site="Harbor"), "7291"), None, mcp=servers)
            for tenant in ("Zürich-Nordhafen-Logistik", "東京-ロジスティクス")
        ]
        connections = {t.fn.connection for team in teams for t in team.agents["clerk"].tools}  # type: ignore[union-attr]
        answers = [team.act(["Door code of the Harbor warehouse?"])[0].answer for team in teams]
    assert len(connections) == 1 and answers == ["7291", "7291"]
    with pytest.raises(ConnectorError, match="is closed"):
        connections.pop().call("door_code", {"site": "Harbor"})


def test_a_spec_refuses_an_empty_or_repeated_mcp_entry(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="an mcp entry is a command"):
        load_spec(write_spec(tmp_path / "empty", '"  "'))
    with pytest.raises(ConfigError, match="each MCP server is named once"):
        load_spec(write_spec(tmp_path / "twice", '"python tools.py", "python tools.py"'))
    with pytest.raises(ConfigError, match="No closing quotation"):
        load_spec(write_spec(tmp_path / "quote", "'python \"tools.py'"))


@pytest.mark.slow
def test_smollm2_solves_a_task_with_a_tool_from_an_mcp_server(stdio: MCPConnection) -> None:
    """SmolLM2-135M (greedy) calls the server's door_code tool and answers with the code it returned.

    It writes the call only when the task spells it out: asked "... Use the door_code tool." it copies the
    prompted format's placeholder (``[door_code(site=...)]``), and given an example call in its system
    prompt it copies the example's site instead of the asked one. The code itself it cannot know: asked
    without the tool, it answers without it."""
    chat = load_chat("local/smollm2")
    task = 'What is the door code of the Harbor warehouse? Call door_code(site="Harbor").'
    clerk = Agent("clerk", chat, tools=stdio.tools(only=["door_code"]), params={"max_tokens": 32}, tool_rounds=3)

    [act] = Team([clerk]).act([task])
    [alone] = Team([dataclasses.replace(clerk, tools=())]).act(["What is the door code of the Harbor warehouse?"])

    [run] = act.steps[0].calls
    assert (run.call.name, dict(run.call.arguments), run.result, run.ok) == (
        "door_code",
        {"site": "Harbor"},
        "7291",
        True,
    )
    assert "7291" in act.answer and act.error is None
    assert "7291" not in alone.answer
