"""The agent's tool loop: calls, results and answers through Team.act and a whole episode, with tools
that fail, hang or are called wrongly; memory keeps the calls, never a broken record."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from connectors import Completion, ConfigError, HashEmbedder, Message, Observation, Tool, ToolCall, load_chat
from connectors.prompted_tools import prompted_batch
from evolve.agent import Agent, MemoryView, Team
from evolve.envs.tasks import Task
from evolve.episode import condense
from evolve.evolver import Evolver
from evolve.tools.loop import DESCRIBED, RETRY
from memory import MemoryStore
from tests.support.fake_openai import FakeOpenAIServer, Reply, chat_body

SITE = "Équipe support — nuit (fr), Tour Eiffel B"


def door_code(site: str) -> str:
    """The door code of a site.

    Args:
        site: the site's full name, as the badge office writes it.
    """
    if site != SITE:
        raise KeyError(f"no site called {site!r}")
    return "4471"


def slow(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "late"


def scripted(*replies: str) -> Any:
    return load_chat("fake/scripted", replies=list(replies))


def test_an_agent_calls_its_tool_reads_the_result_and_answers() -> None:
    model = scripted(
        f'<tool_call>{{"name": "door_code", "arguments": {{"site": "{SITE}"}}}}</tool_call>', "The code is 4471."
    )
    agent = Agent("solver", model, tools=[Tool.from_function(door_code)])

    [act] = Team([agent]).act([f"What is the door code of {SITE}?"])

    assert act.answer == "The code is 4471." and act.error is None
    [step] = act.steps
    assert [(r.call.name, dict(r.call.arguments), r.result, r.ok) for r in step.calls] == [
        ("door_code", {"site": SITE}, "4471", True)
    ]
    second_prompt = model.backend.calls[1][0]
    assert second_prompt[-2].tool_calls[0].name == "door_code"
    assert (second_prompt[-1].role, second_prompt[-1].content) == ("tool", "4471")
    assert condense(act.steps) == f"Called door_code(site={SITE!r}) -> 4471\nAnswer given: The code is 4471."


@pytest.mark.parametrize(
    ("reply", "seen"),
    [
        ('[door_code(site="Louvre")]', "error: KeyError: \"no site called 'Louvre'\""),  # the tool raises
        ("[door_code(site=12)]", None),  # the schema refuses the argument: the model is told and asked again
        ("[open_door(site='x')]", None),  # no such tool: the model is told
        ('<tool_call>{"name": "door_code", "arguments": {"site": </tool_call>', None),  # arguments not JSON
    ],
)
def test_a_failing_tool_or_a_bad_call_is_an_observation_and_the_agent_still_answers(
    reply: str, seen: str | None
) -> None:
    model = scripted(reply, "I could not find it.")
    agent = Agent("solver", model, tools=[Tool.from_function(door_code)])

    [act] = Team([agent]).act(["Door code of the Louvre?"])

    assert act.error is None and act.answer == "I could not find it."
    [step] = act.steps
    last = model.backend.calls[1][0][-1]
    if seen is not None:  # the call ran and failed: its error is the tool message the model reads
        assert (last.role, last.content) == ("tool", seen) and step.calls[0].ok is False
    else:  # nothing could be run: the model reads why, and the step records the problem
        assert last.role == "user" and last.content.startswith(RETRY.split(":")[0]) and step.problems
        assert not step.calls


def test_a_hanging_tool_times_out_and_the_budget_bounds_the_loop() -> None:
    model = scripted("[slow(seconds=5)]")  # the model calls the tool again and again
    agent = Agent("solver", model, tools=[Tool.from_function(slow)], tool_rounds=2, tool_timeout=0.2)

    started = time.monotonic()
    [act] = Team([agent]).act(["Wait for it."])

    assert time.monotonic() - started < 2.0
    assert len(model.backend.calls) == 2  # the budget: two model calls
    assert [r.result for r in act.steps[0].calls] == ["error: tool 'slow' did not answer within 0.2 s"] * 2


class Lookup:
    """An environment whose tools are only described: the calls are the answer, checked at step."""

    def __init__(self) -> None:
        self.actions: list[str] = []

    def reset(self, task: Task) -> str:
        self.task = task
        return task.prompt

    def tools(self) -> list[Tool]:
        return [
            Tool(
                "door_code", "The door code of a site.", {"type": "object", "properties": {"site": {"type": "string"}}}
            )
        ]

    def step(self, action: str) -> Observation:
        self.actions.append(action)
        ok = action == f"[door_code(site={SITE!r})]"
        return Observation("Correct." if ok else f"Wrong. A correct call: door_code(site={SITE!r})", float(ok), True)


def test_an_environments_described_tools_make_the_calls_the_answer_and_memory_keeps_them(tmp_path: Any) -> None:
    store = MemoryStore(f"sqlite:///{tmp_path / 'memory.db'}", embedder=HashEmbedder())
    model = scripted(f"[door_code(site={SITE!r})]", "[door_code(site='Tour Eiffel')]")
    agent = Agent("solver", model, memory=MemoryView(store))
    tasks = [Task(id=f"porte — {SITE}", prompt=f"Door code of {SITE}?", answer="4471"),
             Task(id="porte — Tour Eiffel", prompt="Door code of the Eiffel tower?", answer="4471")]  # fmt: skip
    envs: list[Lookup] = []

    def make() -> Lookup:
        envs.append(Lookup())
        return envs[-1]

    Evolver(Team([agent]), tasks, memory=store, env_factory=make).run(rounds=1)

    assert [e.actions for e in envs] == [[f"[door_code(site={SITE!r})]"], ["[door_code(site='Tour Eiffel')]"]]
    texts = sorted(i.experience for i in store.items())
    assert any(f"Called door_code(site={SITE!r})" in t and "Outcome: success" in t for t in texts)
    assert all(DESCRIBED not in t for t in texts)


class BatchingBackend:
    """A backend that batches prompts with their own tools, as LocalChat and VLLMChat do."""

    name = "batching"
    tools_each = True

    def __init__(self) -> None:
        self.batches: list[list[list[Message]]] = []
        self.prefills: list[str] = []

    def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        return self.complete_batch([messages], **params)[0]

    def complete_batch(self, prompts: Sequence[Sequence[Message]], **params: Any) -> list[Completion]:
        def generate(batch: list[list[Message]], prefill: str, offered: list[Any]) -> list[Completion]:
            self.batches.append(batch)
            self.prefills.append(prefill)
            return [Completion("plain answer", self.name) for _ in batch]

        return prompted_batch(
            generate, prompts, params.get("tools"), params.get("tool_choice"), params.get("tools_each")
        )


def test_each_observation_gets_its_own_tools_in_one_batch() -> None:
    from connectors import ChatClient

    backend = BatchingBackend()
    agent = Agent("solver", ChatClient(backend))
    own = [[Tool("alpha_lookup", "A.", {"type": "object"})], [Tool("beta_lookup", "B.", {"type": "object"})]]

    acts = Team([agent]).act(["first?", "second?"], tools=own, params={"tool_choice": "required"})

    assert [a.answer for a in acts] == ["[plain answer", "[plain answer"]  # tool_choice reached the backend
    [batch] = backend.batches  # one generate call for both prompts
    assert backend.prefills == ["["]
    assert "alpha_lookup" in batch[0][0].content and "beta_lookup" not in batch[0][0].content
    assert "beta_lookup" in batch[1][0].content and "alpha_lookup" not in batch[1][0].content


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def test_native_function_calling_through_the_openai_sdk(openai_server: FakeOpenAIServer) -> None:
    call = chat_body(None, finish_reason="tool_calls")
    call["choices"][0]["message"]["tool_calls"] = [
        {"id": "call_7", "type": "function", "function": {"name": "door_code", "arguments": f'{{"site": "{SITE}"}}'}}
    ]
    openai_server.script(Reply(body=call), Reply(body=chat_body("4471")))
    agent = Agent(
        "solver", load_chat("openai/test-model", base_url=openai_server.url), tools=[Tool.from_function(door_code)]
    )

    [act] = Team([agent]).act([f"Door code of {SITE}?"])

    assert act.answer == "4471" and act.steps[0].calls[0].result == "4471"
    first, second = (r["json"] for r in openai_server.requests)
    assert first["tools"] == [Tool.from_function(door_code).spec()]
    assert second["messages"][-1] == {"role": "tool", "content": "4471", "tool_call_id": "call_7"}
    assert second["messages"][-2]["tool_calls"][0]["id"] == "call_7"


def test_bad_tool_settings_are_clear_errors() -> None:
    model = scripted("x")
    with pytest.raises(ConfigError, match="tools must be a list of connectors.Tool"):
        Agent("a", model, tools=[door_code])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="tool names must be unique"):
        Agent("a", model, tools=[Tool.from_function(door_code), Tool.from_function(door_code)])
    with pytest.raises(ConfigError, match="tool_rounds must be an integer >= 1"):
        Agent("a", model, tool_rounds=0)
    with pytest.raises(ConfigError, match="not a valid JSON Schema"):
        Tool("door_code", "d", {"type": "object", "properties": {"site": {"type": "no-such-type"}}})
    with pytest.raises(ConfigError, match="expected one per observation"):
        Team([Agent("a", model)]).act(["one", "two"], tools=[[]])
    assert ToolCall("door_code", {"site": SITE}).name == "door_code"


def test_the_run_log_keeps_a_steps_calls_and_problems() -> None:
    from evolve.episode import Step
    from evolve.run_log import steps_from_json, steps_to_json
    from evolve.tools.runs import ToolRun

    run = ToolRun(ToolCall("door_code", {"site": SITE}, id="call_1"), "4471", True)
    steps = (Step("solver", (), "The code is 4471.", calls=(run,), problems=("unknown tool 'open_door'",)),)

    assert steps_from_json(steps_to_json(steps)) == steps
