"""Real clients of ``evolve serve``'s Responses API: the OpenAI Agents SDK running an agent with a function tool,
with its Responses model and with its Chat Completions model, whole and streamed, and LangChain's
``ChatOpenAI(use_responses_api=True)`` with ``bind_tools``. Each conversation ends with the tool's result in the
answer, and the app's rating of that answer reaches the memories it recalled."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI

from evolve.serve.rating import HEADER, rate
from tests.support.serve import KEY_OF, Served, serving, write_serve_spec

ASK = "What is the door code of the Harbor warehouse?"
FINAL = "The Harbor door code is 4471."
SCRIPT = (  # after the tool's result the answer, before it a call (the first key found in the observation wins)
    f'chat = "fake/scripted"\noptions = {{ replies = {{ "tool result" = "{FINAL}", '
    '"door code" = "[door_code(site=\'Harbor\')]" } }'
)


def door_code(site: str) -> str:
    """The door code of a site."""
    return "4471" if site == "Harbor" else "unknown"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    set_tracing_disabled(True)  # the Agents SDK exports traces to OpenAI otherwise
    with serving(write_serve_spec(tmp_path_factory.mktemp("serve-clients"), model=SCRIPT)) as live:
        yield live


def namespace(served: Served, tenant: str) -> str:
    return f"{served.deployment.run_name(tenant)}/solver"


def remember(served: Served, tenant: str) -> None:
    """Memories near the question in the tenant's namespace: what an answer recalls and a rating reinforces."""
    store = served.deployment.store
    assert store is not None
    for i in range(2):
        store.add(f"{ASK} ({i})", f"lesson {i}", namespace=namespace(served, tenant), id=f"{tenant}-lesson-{i}")


def reached_memory(served: Served, tenant: str, response_id: str) -> None:
    """Rate the answer as the app would and check that memories it recalled moved up."""
    store = served.deployment.store
    assert store is not None
    before = {m.id: m.q for m in store.items(namespace(served, tenant))}
    receipt = rate(served.url, KEY_OF[tenant], response_id, 1.0, comment="right code")
    assert receipt["applied"] is True and receipt["reinforced"] >= 1
    after = {m.id: m.q for m in store.items(namespace(served, tenant))}
    assert any(after[i] > q for i, q in before.items())


def agent_on(model: Any) -> Agent:
    return Agent(name="desk", instructions="Answer with the code.", tools=[function_tool(door_code)], model=model)


@pytest.mark.parametrize("streamed", [False, True])
def test_the_agents_sdk_responses_model_runs_a_tool_and_its_rating_reaches_memory(
    served: Served, streamed: bool
) -> None:
    tenant = "bob" if streamed else "alice"
    remember(served, tenant)

    async def run() -> Any:
        client = openai.AsyncOpenAI(base_url=served.url, api_key=KEY_OF[tenant], max_retries=0)
        agent = agent_on(OpenAIResponsesModel("codes", client))
        if not streamed:
            return await Runner.run(agent, ASK)
        result = Runner.run_streamed(agent, ASK)
        async for _ in result.stream_events():
            pass
        return result

    result = asyncio.run(run())
    assert result.final_output == FINAL
    calls = [item for r in result.raw_responses for item in r.output if item.type == "function_call"]
    assert [(c.name, c.arguments) for c in calls] == [("door_code", '{"site": "Harbor"}')]
    assert all(r.response_id.startswith("resp_") for r in result.raw_responses) and len(result.raw_responses) == 2
    reached_memory(served, tenant, result.last_response_id)


def test_the_agents_sdk_chat_completions_model_runs_a_tool_and_its_rating_reaches_memory(served: Served) -> None:
    remember(served, "carol")
    seen: list[str] = []  # the Agents SDK keeps no chat completion's id: the app reads the header every answer has

    async def keep_id(response: Any) -> None:
        seen.append(response.headers[HEADER])

    async def run() -> Any:
        http = openai.DefaultAsyncHttpxClient(event_hooks={"response": [keep_id]})
        client = openai.AsyncOpenAI(base_url=served.url, api_key=KEY_OF["carol"], max_retries=0, http_client=http)
        return await Runner.run(agent_on(OpenAIChatCompletionsModel("codes", client)), ASK)

    result = asyncio.run(run())
    assert result.final_output == FINAL and len(seen) == 2 and all(s.startswith("chatcmpl-") for s in seen)
    assert served.deployment.response(seen[-1], tenant="carol")["messages"][-1]["role"] == "tool"  # its result
    reached_memory(served, "carol", seen[-1])


def test_langchain_chat_openai_on_the_responses_api_with_bind_tools(served: Served) -> None:
    remember(served, "alice")
    llm = ChatOpenAI(base_url=served.url, api_key=KEY_OF["alice"], model="codes", max_retries=0,  # type: ignore[arg-type]
                     use_responses_api=True).bind_tools([door_code])  # fmt: skip
    history: list[BaseMessage] = [HumanMessage(ASK)]
    asked = llm.invoke(history)
    assert [(c["name"], c["args"]) for c in asked.tool_calls] == [("door_code", {"site": "Harbor"})]  # type: ignore[attr-defined]
    history += [asked, ToolMessage(door_code("Harbor"), tool_call_id=asked.tool_calls[0]["id"])]  # type: ignore[attr-defined]

    answered = llm.invoke(history)
    assert answered.text == FINAL and answered.response_metadata["id"].startswith("resp_")
    assert answered.usage_metadata is not None and answered.usage_metadata["total_tokens"] > 0  # type: ignore[attr-defined]
    streamed = None
    for chunk in llm.stream(history):
        streamed = chunk if streamed is None else streamed + chunk
    assert streamed is not None and streamed.text == FINAL
    reached_memory(served, "alice", answered.response_metadata["id"])
    assert rate(served.url, KEY_OF["alice"], answered, 0.5, key="second-look")["applied"]  # the message itself


def test_langchain_with_use_previous_response_id_continues_the_stored_conversation(served: Served) -> None:
    llm = ChatOpenAI(base_url=served.url, api_key=KEY_OF["bob"], model="codes", max_retries=0,  # type: ignore[arg-type]
                     use_responses_api=True, use_previous_response_id=True).bind_tools([door_code])  # fmt: skip
    history: list[BaseMessage] = [HumanMessage(ASK)]
    asked = llm.invoke(history)
    history += [asked, ToolMessage(door_code("Harbor"), tool_call_id=asked.tool_calls[0]["id"])]  # type: ignore[attr-defined]
    answered = llm.invoke(history)  # sends the tool's result and the previous response's id (resp_…) only
    assert answered.text == FINAL
    kept = served.deployment.response(answered.response_metadata["id"], tenant="bob")["messages"]
    assert [m["role"] for m in kept] == ["user", "assistant", "tool"] and kept[0]["content"] == ASK
