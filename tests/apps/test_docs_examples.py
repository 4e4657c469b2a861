"""Every Python example in README.md and the docs (docs/**/*.md) runs, as printed, with only the context it
leaves to the reader; every ``evolve …`` command they show is one the CLI takes.

Each example gets the names it assumes (``tasks``, ``team``, a live ``evolve serve`` …) from a prelude,
and a few documented substitutions where a page shows a production value (a port, a key, a long
training run). An example that no longer runs fails here, with its page and first line.
"""

from __future__ import annotations

import io
import re
import shlex
from contextlib import ExitStack, redirect_stderr
from pathlib import Path
from typing import Any

import pytest

from tests.support.serve import KEY_OF, Served, serving, write_serve_spec

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]

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
    "import asyncio": ("", []),  # the Agents SDK against evolve serve: the live server's too
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
            (
                'load_chat("local/smollm2")',
                "load_chat('fake/scripted', replies=['Dublin.', 'Madrid', 'Rome.', 'Oslo'], cycle=True)",
            ),
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


def blocks(language: str) -> list[tuple[str, str]]:
    """``(page, code)`` for every fenced block in ``language`` on the README and the docs pages."""
    found = []
    for page in PAGES:
        name = page.relative_to(ROOT).as_posix()
        found += [(name, code) for code in re.findall(rf"```{language}\n(.*?)```", page.read_text("utf-8"), re.S)]
    return found


def python_examples() -> list[str]:
    return [code for _, code in blocks("python")]


def slow(code: str) -> bool:
    """Examples that load MiniLM or train adapters."""
    first = first_line(code)
    return "load_embedder" in first or "marft" in first


def first_line(code: str) -> str:
    return code.strip().splitlines()[0]


def run_example(code: str, prelude: str, substitutions: list[tuple[str, str]]) -> dict[str, Any]:
    for shown, runs in substitutions:
        assert shown in code, f"the example no longer contains {shown!r}: update this test's substitution"
        code = code.replace(shown, runs)
    scope: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(prelude + "\n" + code, "docs example", "exec"), scope)  # noqa: S102 - the docs' own code
    return scope


def test_every_example_is_covered_here() -> None:
    firsts = {first_line(code) for code in python_examples()}
    assert firsts == set(EXAMPLES)
    print(f"{len(python_examples())} Python examples on {len(PAGES)} pages, {len(commands())} evolve commands")


def commands() -> list[tuple[str, str]]:
    """``(page, command)`` for every ``evolve …`` line of a bash block (comments off, ``…|…`` choices split)."""
    found = []
    for page, code in blocks("bash"):
        for line in code.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("evolve "):
                found.append((page, line))
    return found


def test_every_evolve_command_in_the_docs_is_one_the_cli_takes() -> None:
    """A command a page shows parses with the parser ``evolve`` runs. A synopsis's ``[…]`` counts as given,
    and its ``a|b`` choices as any one of them (``log|rollback … --to ID``: the one that takes ``--to``)."""
    from apps.cli import parser

    assert len(commands()) >= 20
    for page, line in commands():
        words = shlex.split(line.replace("[", "").replace("]", "").replace("…", ""))[1:]
        words = [NUMBER.get(w, w) for w in words if w != "..."]
        choices = [w.split("|") if "|" in w and not w.startswith("-") else [w] for w in words]
        if not any(parses(parser(), [options[min(i, len(options) - 1)] for options in choices]) for i in range(4)):
            raise AssertionError(f"{page}: `{line}` is not a command evolve takes")


NUMBER = {"N": "3", "K": "2"}  # a synopsis's number placeholders, as a number


def parses(cli: Any, words: list[str]) -> bool:
    said = io.StringIO()
    try:
        with redirect_stderr(said):
            cli.parse_args(words)
    except SystemExit:
        return False
    assert "is deprecated" not in said.getvalue(), f"the docs show an old spelling: {said.getvalue().strip()}"
    return True


def test_the_readme_links_only_to_files_that_exist() -> None:
    for target in re.findall(r"\]\(([^)#]+)", README.read_text("utf-8")):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README.md links to {target}, which is not in the repository"


@pytest.mark.parametrize(
    ("page", "code"),
    [
        pytest.param(page, code, id=f"{page}: {first_line(code)[:60]}", marks=[pytest.mark.slow] if slow(code) else [])
        for page, code in blocks("python")
    ],
)
def test_the_example_runs(
    page: str, code: str, served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first = first_line(code)
    prelude, substitutions = EXAMPLES[first]
    with ExitStack() as live:
        if first == "import asyncio":  # the Agents SDK example requires a call: a model that makes one
            served = live.enter_context(serving(write_serve_spec(tmp_path, model=CALLING)))
        substitutions = substitutions + served_substitutions(first, served) + protocol_server(first, live, tmp_path)
        scope = run_example(code, prelude, substitutions)
    if "store" in scope and hasattr(scope["store"], "close"):
        scope["store"].close()


CALLING = (
    'chat = "fake/scripted"\n'
    'options = { replies = { "4471" = "The door code is 4471.", "Harbor" = "[door_code(site=\'Harbor\')]" } }'
)
"""A scripted model that calls ``door_code`` for the Harbor question and answers in words once the call's result
(4471) is in its prompt."""


def served_substitutions(first: str, served: Served) -> list[tuple[str, str]]:
    """For the ``openai`` SDK and Agents SDK examples: the live test server's URL, key and model."""
    if first in ("from openai import OpenAI", "import asyncio"):
        docs_spec = Path(__file__).parents[2] / "data/facility_codes.toml"
        assert 'name = "facility-codes"' in docs_spec.read_text()  # the docs' served model
        return [
            ('base_url="http://127.0.0.1:8000/v1"', f"base_url={served.url!r}"),
            ('api_key="sk-acme-1"', f"api_key={KEY_OF['alice']!r}"),
            ('model="facility-codes"', f"model={served.deployment.model_id!r}"),  # the test server's run
        ]
    return []


def protocol_server(first: str, live: ExitStack, folder: Path) -> list[tuple[str, str]]:
    """For the MCP and A2A client examples: a live ``evolve mcp`` / ``evolve a2a`` on the test spec, and the
    substitutions that point the example at it."""
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
