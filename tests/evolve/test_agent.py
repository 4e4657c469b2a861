from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from connectors import ConfigError, HashEmbedder, Message, ScriptedChat, load_chat
from connectors.chat import ChatClient
from evolve import Agent, MemoryView, Team
from evolve.agent import render_messages
from memory import MemoryStore, RetrievalConfig


def test_chain_agents_see_their_predecessors_outputs() -> None:
    planner_model = ScriptedChat(["plan: add the numbers"])
    solver_model = ScriptedChat(lambda msgs: "4" if "plan: add the numbers" in msgs[-1].content else "?")
    team = Team([Agent("planner", ChatClient(planner_model)), Agent("solver", ChatClient(solver_model))])
    [act] = team.act(["2 + 2?"])
    assert act.answer == "4"
    assert [s.agent for s in act.steps] == ["planner", "solver"]
    assert "<output of planner>" in solver_model.calls[0][0][-1].content


def test_dag_order_and_single_sink() -> None:
    m = load_chat("fake/scripted", replies=["x"])
    team = Team([Agent("c", m), Agent("a", m), Agent("b", m)], edges=[("a", "c"), ("b", "c")])
    assert team.order.index("c") == 2 and team.sink == "c"
    with pytest.raises(ConfigError, match="exactly one final agent"):
        Team([Agent("a", m), Agent("b", m)], edges=[])
    with pytest.raises(ConfigError, match="cycle"):
        Team([Agent("a", m), Agent("b", m)], edges=[("a", "b"), ("b", "a")])
    with pytest.raises(ConfigError, match="unique"):
        Team([Agent("a", m), Agent("a", m)])


def test_recalled_experiences_are_quoted_data_best_last() -> None:
    store = MemoryStore("sqlite://", embedder=HashEmbedder())
    store.add("door code of the harbor warehouse", "the code is 1111", namespace="ns")
    store.add("door code of the harbor warehouse annex", "the code is 2222", namespace="ns")
    agent = Agent("a", load_chat("fake/scripted"), memory=MemoryView(store, "ns", RetrievalConfig(k1=5, k2=2)))
    [recall] = agent.memory.recall_many(["door code of the harbor warehouse"])  # type: ignore[union-attr]
    messages = render_messages(agent, "door code of the harbor warehouse?", recall, {})
    assert messages[0] == Message("system", agent.system)  # experiences never enter the system prompt
    user = messages[1].content
    assert user.count("<experience") == 2 and user.rstrip().endswith("door code of the harbor warehouse?")
    best = recall.items[0].experience
    assert user.rindex(best) > user.rindex(recall.items[1].experience)


def test_a_backend_failure_marks_only_that_episode() -> None:
    from connectors import ConnectorError

    def flaky(msgs: list[Message]) -> str:
        if "bad" in msgs[-1].content:
            raise ConnectorError("upstream 500")
        return "ok"

    team = Team([Agent("a", ChatClient(ScriptedChat(flaky), retries=0))])
    good, bad = team.act(["good task", "bad task"])
    assert good.answer == "ok" and good.error is None
    assert bad.error is not None and "upstream 500" in bad.error


def test_threaded_answers_keep_prompt_order_and_reuse_the_teams_threads() -> None:
    def slow_echo(messages: Sequence[Message]) -> str:
        time.sleep(0.002 * (int(messages[-1].content) % 3))  # answers finish out of order
        return messages[-1].content

    team = Team([Agent("echo", ChatClient(ScriptedChat(slow_echo)))], workers=3)
    prompts = [str(i) for i in range(12)]
    assert [a.answer for a in team.act(prompts)] == prompts
    threads = threading.active_count()
    assert [a.answer for a in team.act(prompts[::-1])] == prompts[::-1]
    assert threading.active_count() == threads  # no new pool per call
