"""Long answers on every protocol: one that ``max_tokens`` cut says so (OpenAI's ``finish_reason: "length"``
whole and streamed, the LangChain runnable's message, the A2A task's ``evolve.finish_reason`` and status
message, read back by Evolve's A2A client), and one that takes long reports ``working`` on A2A first."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest
from a2a.types import GetTaskRequest, SendMessageConfiguration, SendMessageRequest, Task, TaskState
from google.protobuf.json_format import MessageToDict

from connectors import ChatClient, Completion, Message, Usage
from connectors.a2a_chat import A2AChat
from connectors.fakes import ScriptedChat
from evolve.serve.deployment import Deployment
from evolve.serve.protocols.a2a import create_a2a_app
from evolve.serve.protocols.keys import tenant_lookup
from evolve.serve.protocols.openai_http import create_app
from evolve.spec import load_spec
from tests.support.a2a import KEY_OF as A2A_KEY_OF
from tests.support.a2a import KEYS as A2A_KEYS
from tests.support.a2a import ZURICH, ServedA2A, user_message
from tests.support.serve import KEYS, Served, running, write_serve_spec

LONG = "Tell me the whole history of the Harbor warehouse."
SLOW = "Think hard: which Harbor door opens first?"
CUT = "The Harbor warehouse was built in"  # what max_tokens left of the answer
WAIT = 1.5  # seconds the slow answer takes


def reply(messages: Sequence[Message]) -> Completion:
    """A cut answer to LONG, a slow one to SLOW, a whole one to anything else."""
    asked = messages[-1].content
    if LONG in asked:
        return Completion(CUT, "scripted", Usage(20, 6), finish_reason="length")
    if SLOW in asked:
        time.sleep(WAIT)
    return Completion("The door code is 4471.", "scripted", Usage(20, 5), finish_reason="stop")


@dataclass
class Live:
    deployment: Deployment
    openai: Served
    a2a: ServedA2A


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    spec = load_spec(write_serve_spec(tmp_path_factory.mktemp("long")))
    deployment = Deployment(spec, chat=ChatClient(ScriptedChat(reply)))
    try:
        with (
            running(lambda _: create_app(deployment, KEYS)) as http,
            running(lambda url: create_a2a_app(deployment, url=url, tenant_of=tenant_lookup(A2A_KEYS))) as a2a,
        ):
            yield Live(deployment, Served(f"{http}/v1", deployment), ServedA2A(a2a, deployment))
    finally:
        deployment.close()


def test_a_cut_chat_completion_says_length_whole_and_streamed(live: Live) -> None:
    client = live.openai.client("alice")
    whole = client.chat.completions.create(model="codes", messages=[{"role": "user", "content": LONG}])
    assert whole.choices[0].finish_reason == "length" and whole.choices[0].message.content == CUT
    chunks = list(client.chat.completions.create(model="codes", messages=[{"role": "user", "content": LONG}],
                                                 stream=True))  # fmt: skip
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    asked = client.chat.completions.create(model="codes", messages=[{"role": "user", "content": "Harbor code?"}])
    assert asked.choices[0].finish_reason == "stop"


def test_a_cut_answer_says_length_to_langchain(live: Live) -> None:
    from evolve.serve.protocols.langchain import EvolveRunnable

    message = EvolveRunnable(live.deployment, tenant="alice").invoke(LONG)
    assert message.content == CUT and message.response_metadata["finish_reason"] == "length"


async def sent(served: ServedA2A, text: str, *, streaming: bool = False) -> Task:
    async with served.client(ZURICH, streaming=streaming) as client:
        events = [e async for e in client.send_message(SendMessageRequest(message=user_message(text)))]
    if streaming:  # the last event completes the task: fetch it whole
        async with served.client(ZURICH) as client:
            return await client.get_task(GetTaskRequest(id=events[-1].status_update.task_id))
    return events[-1].task


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_cut_a2a_answer_is_marked_on_the_task_its_artifact_and_its_status(live: Live, streaming: bool) -> None:
    task = await sent(live.a2a, LONG, streaming=streaming)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED and task.artifacts[-1].parts[0].text == CUT
    assert MessageToDict(task.metadata)["evolve.finish_reason"] == "length"
    assert MessageToDict(task.artifacts[-1].metadata)["evolve.finish_reason"] == "length"
    assert "cut off at its token limit (max_tokens)" in task.status.message.parts[0].text
    whole = await sent(live.a2a, "Harbor code?", streaming=streaming)
    assert MessageToDict(whole.metadata)["evolve.finish_reason"] == "stop" and not whole.status.HasField("message")


def test_evolves_a2a_client_keeps_the_cut(live: Live) -> None:
    chat = A2AChat(live.a2a.url, api_key=A2A_KEY_OF[ZURICH], timeout=30)
    assert chat.complete([Message("user", LONG)], max_tokens=6).finish_reason == "length"
    assert chat.complete([Message("user", "Harbor code?")]).finish_reason == "stop"


async def test_a_long_a2a_answer_sent_to_return_immediately_reports_working_first(live: Live) -> None:
    ask = SendMessageRequest(
        message=user_message(SLOW), configuration=SendMessageConfiguration(return_immediately=True)
    )
    async with live.a2a.client(ZURICH) as client:
        started = time.monotonic()
        (event,) = [e async for e in client.send_message(ask)]
        assert time.monotonic() - started < WAIT and event.task.status.state != TaskState.TASK_STATE_COMPLETED
        states = []
        while not states or states[-1] != TaskState.TASK_STATE_COMPLETED:
            assert time.monotonic() - started < 20, states
            states.append((await client.get_task(GetTaskRequest(id=event.task.id))).status.state)
            await asyncio.sleep(0.1)
    assert TaskState.TASK_STATE_WORKING in states and states[-1] == TaskState.TASK_STATE_COMPLETED
