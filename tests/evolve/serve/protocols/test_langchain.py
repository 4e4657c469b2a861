"""An evolving team as a LangChain Runnable: AIMessages with the response id, feedback on exactly its recalls."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("langchain_core", reason="the langchain extra (pip install -e '.[langchain]') is not installed")

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402

from connectors import ConfigError, ScriptedChat, load_chat  # noqa: E402
from connectors.chat import ChatClient  # noqa: E402
from evolve.serve.answers import UnknownResponse  # noqa: E402
from evolve.serve.deployment import Deployment  # noqa: E402
from evolve.serve.protocols.langchain import EvolveRunnable  # noqa: E402
from evolve.spec import RunSpec  # noqa: E402
from tests.support.extras import import_without  # noqa: E402

QUESTION = "What is the door code of the Harbor warehouse?"


@pytest.fixture
def scripted() -> ScriptedChat:
    return ScriptedChat(["4471"])


@pytest.fixture
def deployment(tmp_path: Path, scripted: ScriptedChat) -> Iterator[Deployment]:
    spec = RunSpec.model_validate(
        {
            "run": {"name": "codes", "database": f"sqlite:///{tmp_path / 'serve.db'}"},
            "model": {"chat": "fake/scripted", "options": {"replies": ["unused"]}},
            "embedder": {"name": "hash"},
            "environment": {"tasks": "unused.jsonl"},
            "memory": {"k1": 10, "k2": 2},
            "agents": [{"name": "solver", "system": "Reply with the code only."}],
        }
    )
    d = Deployment(spec, chat=ChatClient(scripted))
    yield d
    d.close()


def seed(d: Deployment, tenant: str) -> list[str]:
    assert d.store is not None
    ns = f"{d.run_name(tenant)}/solver"
    intents = [QUESTION, "Door code of the Harbor warehouse?", "harbor warehouse door", "summit alarm", "lunch menu"]
    return [d.store.add(text, f"lesson {i}", namespace=ns).id for i, text in enumerate(intents)]


def qs(d: Deployment, ids: list[str]) -> dict[str, tuple[float, int]]:
    assert d.store is not None
    every = {m.id: (m.q, m.visits) for m in d.store.items()}
    return {i: every[i] for i in ids}


def test_invoke_returns_an_ai_message_carrying_the_response_id(deployment: Deployment) -> None:
    agent = EvolveRunnable(deployment, tenant="alice")
    message = agent.invoke(QUESTION)

    assert isinstance(message, AIMessage) and message.content == "4471"
    assert message.id is not None and message.id == message.response_metadata["response_id"]
    assert message.response_metadata["run"] == "codes@alice" and message.response_metadata["model_name"] == "codes"
    assert message.usage_metadata is not None and message.usage_metadata["total_tokens"] > 0
    recorded = deployment.response(message.id, tenant="alice")
    assert recorded["answer"] == "4471" and recorded["query"] == QUESTION


def test_feedback_on_the_message_moves_exactly_the_recalled_memories_once(deployment: Deployment) -> None:
    ids = seed(deployment, "alice")
    agent = EvolveRunnable(deployment, tenant="alice")
    message = agent.invoke(QUESTION)
    (recall_id,) = message.response_metadata["recall_ids"]
    recalled = set(deployment.store.explain(recall_id, namespace="codes@alice/solver")["selected"])  # type: ignore[union-attr]
    before = qs(deployment, ids)

    receipt = agent.feedback(message, 1.0, comment="right code")

    after = qs(deployment, ids)
    assert receipt.applied and receipt.reinforced == 2 and len(recalled) == 2
    assert {i for i in ids if after[i] != before[i]} == recalled
    assert not agent.feedback(message.id, 1.0).applied  # type: ignore[arg-type]  # the same key: nothing twice
    assert qs(deployment, ids) == after


def test_a_prompt_template_chain_with_history_reaches_the_team(deployment: Deployment, scripted: ScriptedChat) -> None:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You answer facility questions."), ("human", "hello"), ("ai", "Hi!"), ("human", "{question}")]
    )
    chain = prompt | EvolveRunnable(deployment) | StrOutputParser()

    assert chain.invoke({"question": QUESTION}) == "4471"

    observation = scripted.calls[0][0][-1].content
    assert "You answer facility questions." in observation and "assistant: Hi!" in observation
    assert observation.endswith(f"Reply to: {QUESTION}")


def test_the_tenant_comes_from_the_runnable_or_the_calls_config(deployment: Deployment) -> None:
    agent = EvolveRunnable(deployment, tenant="alice")
    for_bob = agent.invoke([HumanMessage(QUESTION)], config={"configurable": {"tenant": "bob"}})
    assert for_bob.response_metadata["run"] == "codes@bob"
    with pytest.raises(UnknownResponse):
        agent.feedback(for_bob, 1.0)  # alice's feedback cannot reach bob's answer
    assert agent.feedback(for_bob, 1.0, tenant="bob").applied


def test_sampling_parameters_reach_the_model_and_unknown_ones_are_refused(
    deployment: Deployment, scripted: ScriptedChat
) -> None:
    agent = EvolveRunnable(deployment)
    agent.invoke(QUESTION, temperature=0.3, max_tokens=16)
    assert scripted.calls[0][1]["temperature"] == 0.3 and scripted.calls[0][1]["max_tokens"] == 16
    with pytest.raises(ConfigError, match="logit_bias"):
        agent.invoke(QUESTION, logit_bias={})


def test_async_and_batch_calls_answer_too(deployment: Deployment) -> None:
    agent = EvolveRunnable(deployment, tenant="alice")
    message = asyncio.run(agent.ainvoke([SystemMessage("Be brief."), HumanMessage(QUESTION)]))
    batch = agent.batch([QUESTION, "Door code of the Harbor warehouse?"])
    assert message.content == "4471" and [m.content for m in batch] == ["4471", "4471"]
    assert len({message.id, *(m.id for m in batch)}) == 3


def test_bad_input_is_a_config_error(deployment: Deployment) -> None:
    agent = EvolveRunnable(deployment)
    with pytest.raises(ConfigError, match="tool"):
        agent.invoke([ToolMessage(content="42", tool_call_id="c1")])
    with pytest.raises(ConfigError, match="user message"):
        agent.invoke([SystemMessage("only instructions")])
    with pytest.raises(ConfigError, match="AIMessage"):
        agent.feedback(AIMessage(content="not ours"), 1.0)
    with pytest.raises(ConfigError, match="score"):
        agent.feedback(agent.invoke(QUESTION), 1.5)
    with pytest.raises(ConfigError, match="Deployment"):
        EvolveRunnable(load_chat("fake/scripted", replies=["x"]))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="tenant"):
        EvolveRunnable(deployment, tenant="")


def test_without_the_extra_the_runnable_names_it() -> None:
    out = import_without("langchain_core", "evolve.serve.protocols.langchain")
    assert out.startswith("ConfigError") and "pip install -e '.[langchain]'" in out
    assert import_without("langchain_core", "evolve") == "imported"
