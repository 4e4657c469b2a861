"""Every Python example in README.md runs, as printed, with only the context it leaves to the reader.

Each example gets the names it assumes (``tasks``, ``team``, a live ``evolve serve`` …) from a prelude,
and a few documented substitutions where the README shows a production value (a port, a key, a long
training run). A README example that no longer runs fails here, with the example's first line.
"""

from __future__ import annotations

import re
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.support.serve import KEY_OF, Served

README = Path(__file__).resolve().parents[2] / "README.md"

TEAM = """
from connectors import HashEmbedder, load_chat
from evolve import Agent, MemoryView, Task, Team
from memory import MemoryStore

store = MemoryStore("sqlite:///readme.db", embedder=HashEmbedder())
tasks = [Task(id=f"door-{i}", prompt=f"What is the door code of warehouse {i}?", answer="4471") for i in range(4)]
critic_model = load_chat("fake/scripted", replies=["NO CHANGE"])
team = Team([Agent("solver", load_chat("fake/scripted", replies=["4471"]), system="Reply with the code only.",
                   memory=MemoryView(store))])
"""

# first line of the example -> (prelude, [(README text, what runs instead)])
EXAMPLES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "from connectors import HashEmbedder, load_chat": ("", []),
    "from connectors import Tool, parse_tool_calls": ("", []),
    "from connectors import Tool, load_chat": ("", []),
    "from connectors import load_embedder": (
        'task_texts = ["fix the failing date parser", "sort a list", "parse an ISO date", "book a flight"]',
        [("trajectory=...", 'trajectory="parsed with fromisoformat"'), ("feedback=...", 'feedback="passed"')],
    ),
    "from evolve import Evolver, PromptEvolution, PromptGraph, split_tasks": (
        TEAM,
        [("run(rounds=5)", "run(rounds=1)")],
    ),
    "from optimizers.marft import AgentPolicies, Args, Trainer": ("", [("Args(steps=150)", "Args(steps=2)")]),
    "from connectors import HashEmbedder": ("", []),
    "from openai import OpenAI": ("", []),  # base URL and key: the live server's (see test below)
    "import httpx2  # the MCP SDK's HTTP client": ("", []),  # a live evolve mcp (see test below)
    "import httpx": ("", []),  # a live evolve a2a (see test below)
    "from evolve.tools.mcp import MCPConnection": (
        f"ROOT = {str(README.parent)!r}\n"
        'def my_python_tool(city: str) -> str:\n    """The weather in a city."""\n    return "18 C"\n',
        [
            (
                'MCPConnection("python warehouse_tools.py")',
                "MCPConnection(['python', '-m', 'tests.support.mcp_tool_server'], cwd=ROOT)",
            ),
            (
                'load_chat("openai/gpt-4o-mini")',
                "load_chat('fake/scripted', replies=[\"[door_code(site='Harbor')]\", 'The door code is 7291.'])",
            ),
        ],
    ),
    "from uuid import uuid4": (TEAM, []),
    "from evolve import Agent, ParallelTeam, Task, compose, diagnose": (
        "",
        [
            ('load_chat("local/smollm2")', "load_chat('fake/scripted', replies=['Dublin.', 'Madrid', 'Rome.', 'Oslo'], cycle=True)"),
            ('load_embedder("minilm")', "__import__('connectors').HashEmbedder(64)"),
        ],
    ),
    "graph = builder.compile(store=MemoryStoreAdapter(store))": (
        TEAM
        + """
from langgraph.graph import START, MessagesState, StateGraph
from memory.integrations.langgraph_store import MemoryStoreAdapter

builder = StateGraph(MessagesState)
builder.add_node("echo", lambda state: {"messages": []})
builder.add_edge(START, "echo")
""",
        [],
    ),
}
WEIGHTS_TEAM = TEAM.replace(
    'load_chat("fake/scripted", replies=["4471"])', "ChatClient(AdapterChat(['4471']))"
).replace(
    "from connectors import HashEmbedder, load_chat",
    "from connectors import ChatClient, HashEmbedder, load_chat\nfrom connectors.fakes import ScriptedChat\n\n"
    "class AdapterChat(ScriptedChat):  # as LocalChat: a base model here that takes LoRA adapters\n"
    "    serves_adapters, folder, adapters = True, 'base-model', {}\n"
    "    def load_adapter(self, name, folder): self.adapters[name] = folder",
)
# Training SmolLM2 adapters takes a GPU's minutes; one round shows the loop runs with weight updates allowed
# (escalation itself is tested in tests/evolve/weights/).
EXAMPLES["from evolve import Evolver, WeightUpdates"] = (WEIGHTS_TEAM, [("run(rounds=10)", "run(rounds=1)")])


def python_examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def first_line(code: str) -> str:
    return code.strip().splitlines()[0]


def run_example(code: str, prelude: str, substitutions: list[tuple[str, str]]) -> dict[str, Any]:
    for shown, runs in substitutions:
        assert shown in code, f"the README example no longer contains {shown!r}: update this test's substitution"
        code = code.replace(shown, runs)
    scope: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(prelude + "\n" + code, "README.md example", "exec"), scope)  # noqa: S102 - the README's own code
    return scope


def test_every_example_is_covered_here() -> None:
    firsts = [first_line(code) for code in python_examples()]
    assert sorted(firsts) == sorted(EXAMPLES)


@pytest.mark.parametrize(
    "first",
    [pytest.param(f, marks=pytest.mark.slow) if "load_embedder" in f or "marft" in f else f for f in EXAMPLES],
)
def test_the_example_runs(first: str, served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = next(c for c in python_examples() if first_line(c) == first)
    prelude, substitutions = EXAMPLES[first]
    if first == "from openai import OpenAI":
        substitutions = [
            ('base_url="http://127.0.0.1:8000/v1"', f"base_url={served.url!r}"),
            ('api_key="sk-acme-1"', f"api_key={KEY_OF['alice']!r}"),
            ('model="facility-codes"', f"model={served.deployment.model_id!r}"),  # the test server's run
        ]
        assert (
            'name = "facility-codes"' in (Path(__file__).parents[2] / "data/facility_codes.toml").read_text()
        )  # the README's served model
    with ExitStack() as live:
        substitutions = substitutions + protocol_server(first, live, tmp_path)
        scope = run_example(code, prelude, substitutions)
    if "store" in scope and hasattr(scope["store"], "close"):
        scope["store"].close()


def protocol_server(first: str, live: ExitStack, folder: Path) -> list[tuple[str, str]]:
    """For the MCP and A2A client examples: a live ``evolve mcp`` / ``evolve a2a`` on the test spec, and the
    substitutions that point the example at it."""
    from tests.support.serve import write_serve_spec

    if first.startswith("import httpx2"):
        from tests.support.mcp import KEYS, serving_mcp

        served = live.enter_context(serving_mcp(write_serve_spec(folder)))
        return [('"http://127.0.0.1:8200/mcp"', repr(served.url)), ("sk-zurich-3f9c", next(iter(KEYS)))]
    if first == "import httpx":
        from tests.support.a2a import KEYS as A2A_KEYS
        from tests.support.a2a import serving_a2a

        a2a = live.enter_context(serving_a2a(write_serve_spec(folder)))
        return [('"http://127.0.0.1:8100"', repr(a2a.url)), ("sk-acme-1", next(iter(A2A_KEYS)))]
    return []
