"""``Team.stream``: every agent but the last acts as in ``act``, the last one's answer is streamed, and the
steps at the end are the ones ``act`` gives (recall, messages, usage, finish)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from connectors import ChatClient, ConnectorError, HashEmbedder, Message, ScriptedChat, Tool
from evolve import Agent, MemoryView, Team
from evolve.episode import Step
from memory import MemoryStore, RetrievalConfig

QUESTION = "What is the door code of the Harbor warehouse?"


def solver_reply(msgs: list[Message]) -> str:
    return "The door code is 4471." if "<output of planner>" in msgs[-1].content else "?"


def team_with_memory() -> tuple[Team, ScriptedChat, ScriptedChat]:
    store = MemoryStore("sqlite://", embedder=HashEmbedder())
    for i, intent in enumerate(["door code of the Harbor warehouse", "Harbor gate", "lunch menu"]):
        store.add(intent, f"lesson {i}", namespace="solver")
    planner, solver = ScriptedChat(["look up the Harbor code"]), ScriptedChat(solver_reply)
    view = MemoryView(store, "solver", RetrievalConfig(k1=5, k2=2))
    agents = [Agent("planner", ChatClient(planner)), Agent("solver", ChatClient(solver), memory=view)]
    return Team(agents), planner, solver


def without_recall_ids(steps: tuple[Step, ...]) -> list[Step]:
    return [replace(s, recall_id=None) for s in steps]


def test_the_final_agent_streams_and_the_steps_are_those_act_gives() -> None:
    team, planner, solver = team_with_memory()
    [act] = team.act([QUESTION], params={"seed": 3, "max_tokens": 20})

    stream = team.stream(QUESTION, params={"seed": 3, "max_tokens": 20})
    assert stream.error is None and stream.steps is None  # the answer is still coming
    deltas = list(stream)

    assert deltas == ["The ", "door ", "code ", "is ", "4471."] and "".join(deltas) == act.answer
    assert stream.steps is not None and without_recall_ids(stream.steps) == without_recall_ids(act.steps)
    assert stream.steps[-1].recall_id is not None and stream.steps[-1].recall_namespace == "solver"
    assert stream.steps[-1].finish == "stop" and stream.steps[-1].usage.completion_tokens == 5
    assert solver.calls[-1] == solver.calls[0]  # the same messages and parameters (a fresh seed would differ)
    assert len(planner.calls) == 2


def test_closing_the_stream_keeps_the_text_sent_as_the_final_step() -> None:
    team, _, _ = team_with_memory()
    stream = team.stream(QUESTION)
    assert next(stream) == "The "
    stream.close()
    assert stream.steps is not None and [s.agent for s in stream.steps] == ["planner", "solver"]
    assert (stream.steps[-1].output, stream.steps[-1].finish) == ("The ", "cancelled")


def test_a_failure_before_the_answer_is_the_streams_error_and_nothing_is_sent() -> None:
    def broken(msgs: list[Message]) -> str:
        raise ConnectorError("upstream 500")

    planner = Agent("planner", ChatClient(ScriptedChat(broken), retries=0))
    stream = Team([planner, Agent("solver", ChatClient(ScriptedChat(solver_reply)))]).stream(QUESTION)
    assert stream.error is not None and stream.error.startswith("planner: upstream 500")
    assert isinstance(stream.cause, ConnectorError) and list(stream) == [] and stream.steps == ()

    solo = Team([Agent("solver", ChatClient(ScriptedChat(broken), retries=0))]).stream(QUESTION)
    assert solo.error is not None and solo.error.startswith("solver: upstream 500") and list(solo) == []


@pytest.mark.parametrize("closed", [False, True])
def test_a_final_agent_with_tools_answers_whole_after_its_tool_loop(closed: bool) -> None:
    def door(warehouse: str) -> str:
        """The door code of a warehouse."""
        return "4471"

    replies = ["[door(warehouse='Harbor')]", "It is 4471."]
    team = Team([Agent("solver", ChatClient(ScriptedChat(replies)), tools=[Tool.from_function(door)])])
    stream = team.stream(QUESTION)
    if not closed:
        assert list(stream) == ["It is 4471."]
        assert stream.steps is not None and [r.result for r in stream.steps[-1].calls] == ["4471"]
    else:
        stream.close()
        assert stream.steps is not None and stream.steps[-1].finish == "cancelled" and stream.steps[-1].output == ""
