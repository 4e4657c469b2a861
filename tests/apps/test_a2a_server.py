"""``evolve a2a``: a team served as an A2A agent, used through the a2a-sdk's own client — discovery, tasks
whole and streamed, ratings that reach memory, tenants that never see each other's tasks, keys, errors
in JSON-RPC's shape — and a second team whose member is that agent, answering through it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, A2AClientError
from a2a.helpers import get_data_parts
from a2a.types import (
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict

from apps.cli import main
from connectors import ConfigError, Message
from evolve.jobs.served import feedback_traces
from evolve.serve.deployment import Deployment
from evolve.spec import load_spec
from tests.support.a2a import KEY_OF, KEYS, OSAKA, ZURICH, ServedA2A, serving_a2a, user_message
from tests.support.extras import import_without
from tests.support.serve import ANSWER, QUESTION, write_serve_spec

RUN = "codes"
RESPONSE_ID = "evolve.response_id"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedA2A]:
    with serving_a2a(write_serve_spec(tmp_path_factory.mktemp("a2a"))) as live:
        yield live


async def ask(served: ServedA2A, tenant: str, message: Any, *, streaming: bool = False) -> list[StreamResponse]:
    async with served.client(tenant, streaming=streaming) as client:
        return [event async for event in client.send_message(SendMessageRequest(message=message))]


async def answered(served: ServedA2A, tenant: str = ZURICH, text: str = QUESTION, **fields: Any) -> Task:
    (event,) = await ask(served, tenant, user_message(text, **fields))
    return event.task


def meta(proto: Any) -> dict[str, Any]:
    return MessageToDict(proto.metadata)


def snapshot(served: ServedA2A, tenant: str) -> dict[str, tuple[float, int]]:
    store = served.deployment.store
    assert store is not None
    return {m.id: (m.q, m.visits) for m in store.items(f"{served.deployment.run_name(tenant)}/solver")}


def seed(served: ServedA2A, tenant: str, tag: str) -> list[str]:
    """Memories in the tenant's namespace: some near the question, some far from it."""
    store = served.deployment.store
    assert store is not None
    ns = f"{served.deployment.run_name(tenant)}/solver"
    intents = [QUESTION, "Door code of the Harbor warehouse?", "harbor door", "summit alarm", "lunch menu"]
    return [store.add(f"{it} {tag}", f"lesson {i} for {tenant}", namespace=ns).id for i, it in enumerate(intents)]


def recalled(served: ServedA2A, tenant: str, task: Task) -> set[str]:
    """The memories the task's answer recalled (what a rating must move)."""
    response = served.deployment.response(meta(task)[RESPONSE_ID], tenant=tenant)
    (recall_id,) = [s["recall_id"] for s in response["steps"] if s.get("recall_id")]
    ns = f"{served.deployment.run_name(tenant)}/solver"
    return set(served.deployment.store.explain(recall_id, namespace=ns)["selected"])  # type: ignore[union-attr]


async def rate(served: ServedA2A, tenant: str, message: Any) -> dict[str, Any]:
    (event,) = await ask(served, tenant, message)
    assert event.HasField("message"), event
    (receipt,) = get_data_parts(event.message.parts)
    return receipt


# ---- discovery and tasks ---------------------------------------------------------------------------------------


async def test_the_card_is_public_and_describes_the_team(served: ServedA2A) -> None:
    async with httpx.AsyncClient() as http:  # no key: discovery is open
        card = await A2ACardResolver(http, served.url).get_agent_card()
        raw = (await http.get(f"{served.url}/.well-known/agent-card.json")).text
    assert card.name == RUN and "solver: Reply with the code only." in card.description
    assert card.capabilities.streaming and not card.capabilities.push_notifications
    assert [s.id for s in card.skills] == ["answer"] and "rating" in card.skills[0].description
    assert {(i.url, i.protocol_version) for i in card.supported_interfaces} == {
        (f"{served.url}/", "1.0"), (f"{served.url}/", "0.3")
    }  # fmt: skip
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert not any(secret in raw for secret in [*KEYS, *KEYS.values(), "Zürich", "Ōsaka"])


async def test_a_message_is_answered_by_a_completed_task_whose_artifact_is_the_answer(served: ServedA2A) -> None:
    task = await answered(served)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    (artifact,) = task.artifacts
    assert artifact.name == "answer" and [p.text for p in artifact.parts] == [ANSWER]
    response_id = meta(task)[RESPONSE_ID]
    assert meta(artifact)[RESPONSE_ID] == response_id and meta(task)["evolve.usage"]["completion_tokens"] > 0
    recorded = served.deployment.response(response_id, tenant=ZURICH)
    assert recorded["answer"] == ANSWER and recorded["query"] == QUESTION and recorded["run"] == f"{RUN}@{ZURICH}"
    async with served.client(ZURICH) as client:
        fetched = await client.get_task(GetTaskRequest(id=task.id))
    assert fetched.status.state == TaskState.TASK_STATE_COMPLETED and fetched.artifacts[0].parts[0].text == ANSWER
    assert fetched.history[0].parts[0].text == QUESTION


async def test_a_streamed_task_reports_each_state_and_sends_the_text_as_it_is_generated(served: ServedA2A) -> None:
    events = await ask(served, ZURICH, user_message(QUESTION), streaming=True)
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[:2] == ["task", "status_update"] and kinds[-1] == "status_update"
    assert events[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
    assert events[1].status_update.status.state == TaskState.TASK_STATE_WORKING
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    *deltas, whole = chunks
    assert len(deltas) > 1 and "".join(d.artifact.parts[0].text for d in deltas) == ANSWER  # word by word
    assert [d.append for d in deltas] == [False] + [True] * (len(deltas) - 1) and not any(d.last_chunk for d in deltas)
    assert not whole.append and whole.last_chunk and whole.artifact.parts[0].text == ANSWER  # replaces the chunks
    done = events[-1].status_update
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert served.deployment.response(meta(done)[RESPONSE_ID], tenant=ZURICH)["answer"] == ANSWER


async def test_a_follow_up_in_the_same_context_is_answered_with_the_earlier_turn(served: ServedA2A) -> None:
    first = await answered(served)
    calls = served.deployment.chat.backend.calls  # type: ignore[attr-defined]  # the spec's ScriptedChat
    seen = len(calls)
    again = await answered(served, text="And the Harbor code once more?", context_id=first.context_id)
    assert again.context_id == first.context_id and again.status.state == TaskState.TASK_STATE_COMPLETED
    prompt = calls[seen][0][-1].content
    assert "Conversation so far" in prompt and QUESTION in prompt and ANSWER in prompt


async def test_the_turns_and_sampling_a_message_brings_reach_the_team(served: ServedA2A) -> None:
    calls = served.deployment.chat.backend.calls  # type: ignore[attr-defined]
    seen = len(calls)
    context = [{"role": "system", "content": "Answer for the night shift."}]
    params = {"max_tokens": 7, "temperature": 0.25, "seed": 42, "presence_penalty": -0.5, "frequency_penalty": 1.5}
    task = await answered(served, metadata={"evolve.context": context, "evolve.params": params})
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    (messages, sent), *_ = calls[seen:]
    assert "Instructions from the app:\nAnswer for the night shift." in messages[-1].content
    assert {k: sent[k] for k in params} == params and isinstance(sent["max_tokens"], int)


async def test_the_speakers_names_a_message_brings_reach_the_team(served: ServedA2A) -> None:
    calls = served.deployment.chat.backend.calls  # type: ignore[attr-defined]
    seen = len(calls)
    context = [{"role": "assistant", "content": "The Harbor file is open.", "name": "researcher"}]
    task = await answered(served, metadata={"evolve.context": context, "evolve.name": "alice"})
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    prompt = calls[seen][0][-1].content
    assert "assistant (researcher): The Harbor file is open." in prompt
    assert prompt.endswith(f"Reply to alice: {QUESTION}")


# ---- ratings -----------------------------------------------------------------------------------------------------


async def test_a_rating_moves_the_q_of_exactly_the_recalled_memories_once_per_key(served: ServedA2A) -> None:
    seed(served, ZURICH, "rating")
    task = await answered(served)
    chosen = recalled(served, ZURICH, task)
    assert len(chosen) == 2  # k2
    before = snapshot(served, ZURICH)

    rating = {"rating": 1.0, "comment": "right code", "key": "reviewer-7"}
    message = user_message(data=rating, reference_task_ids=[task.id], context_id=task.context_id)
    receipt = await rate(served, ZURICH, message)
    assert receipt["applied"] and receipt["reinforced"] == 2 and receipt["reward"] == 1.0
    assert receipt["task_id"] == task.id and receipt["response_id"] == meta(task)[RESPONSE_ID]
    after = snapshot(served, ZURICH)
    assert {i for i in after if after[i] != before[i]} == chosen
    assert all(after[i][1] == before[i][1] + 1 and after[i][0] > before[i][0] for i in chosen)

    repeat = await rate(served, ZURICH, user_message(data={**rating, "rating": 0.0}, reference_task_ids=[task.id]))
    assert not repeat["applied"] and repeat["reinforced"] == 0 and snapshot(served, ZURICH) == after

    on_the_task = user_message(metadata={"evolve.rating": 0.0}, task_id=task.id, text="wrong after all")
    other = await rate(served, ZURICH, on_the_task)  # sent on the finished task itself, under the default key
    assert other["applied"] and other["reward"] == -1.0 and snapshot(served, ZURICH) != after
    traces = feedback_traces(served.deployment.engine, served.deployment.run_name(ZURICH))
    assert any(t.feedback.endswith("Their comment: wrong after all") for t in traces)  # its text is the comment


async def test_malformed_messages_are_json_rpc_errors_and_leave_no_task(served: ServedA2A) -> None:
    async with served.client(ZURICH) as client:
        before = (await client.list_tasks(ListTasksRequest())).total_size
    task = await answered(served)
    from a2a.types import Part

    cases: list[tuple[Any, type[Exception], str]] = [
        (user_message(QUESTION, metadata={"evolve.params": {"tools": []}}), InvalidParamsError, "evolve.params"),
        (
            user_message(QUESTION, metadata={"evolve.params": {"presence_penalty": 2.5}}),
            InvalidParamsError,
            "out of range",
        ),
        (user_message(data={"rating": 1.5}, reference_task_ids=[task.id]), InvalidParamsError, r"\[0, 1\]"),
        (user_message(data={"rating": 1.0}), InvalidParamsError, "referenceTaskIds"),
        (user_message(data={"note": "the Harbor code?"}), InvalidParamsError, "data part only as a rating"),
        (user_message("   "), InvalidParamsError, "no text to answer"),
        (user_message(QUESTION, metadata={"evolve.name": ""}), InvalidParamsError, "evolve.name"),
    ]
    picture = user_message(QUESTION)
    picture.parts.append(Part(url="https://example.com/harbor.png"))
    cases.append((picture, ContentTypeNotSupportedError, "url part"))
    for message, error, said in cases:
        with pytest.raises(error, match=said):
            await ask(served, ZURICH, message)
    async with served.client(ZURICH) as client:
        assert (await client.list_tasks(ListTasksRequest())).total_size == before + 1  # only the answered one


async def test_a_failed_answer_fails_the_task_with_its_reason(served: ServedA2A) -> None:
    task = await answered(served, text="What is the lunch menu today?")  # the scripted team has no reply
    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert "no reply" in task.status.message.parts[0].text and "Traceback" not in str(task)
    assert meta(task)["evolve.error"] == {"kind": "ConnectorError", "retryable": False}


# ---- tenants and keys --------------------------------------------------------------------------------------------


async def test_a_tenant_cannot_see_continue_or_rate_another_tenants_task(served: ServedA2A) -> None:
    seed(served, ZURICH, "isolation")
    task = await answered(served, ZURICH)
    before = snapshot(served, ZURICH)
    async with served.client(OSAKA) as client:
        for task_id in (task.id, "no-such-task-0000"):  # another's task and none at all: the same error
            with pytest.raises(TaskNotFoundError, match="^Task not found$"):
                await client.get_task(GetTaskRequest(id=task_id))
        listed = await client.list_tasks(ListTasksRequest())
    assert task.id not in {t.id for t in listed.tasks}
    steal = [
        user_message(data={"rating": 0.0}, reference_task_ids=[task.id]),
        user_message(data={"rating": 0.0}, reference_task_ids=["no-such-task-0000"]),
        user_message(data={"rating": 0.0, "response_id": meta(task)[RESPONSE_ID]}),
        user_message(data={"rating": 0.0}, task_id=task.id),
        user_message("Continue with the Harbor code", task_id=task.id),
    ]
    for message in steal:
        with pytest.raises(TaskNotFoundError):
            await ask(served, OSAKA, message)
    assert snapshot(served, ZURICH) == before


async def test_a_long_running_server_keeps_a_bounded_number_of_finished_tasks(tmp_path: Path) -> None:
    """Finished tasks beyond ``max_tasks`` are forgotten oldest first (memory stays bounded); a forgotten task's
    answer was recorded, so it is still rated by its response id."""
    with serving_a2a(write_serve_spec(tmp_path), max_tasks=2) as live:
        tasks = [await answered(live) for _ in range(3)]
        async with live.client(ZURICH) as client:
            with pytest.raises(TaskNotFoundError):
                await client.get_task(GetTaskRequest(id=tasks[0].id))
            kept = [await client.get_task(GetTaskRequest(id=t.id)) for t in tasks[1:]]
        assert [t.id for t in kept] == [t.id for t in tasks[1:]]
        receipt = await rate(
            live, ZURICH, user_message(data={"rating": 1.0, "response_id": meta(tasks[0])[RESPONSE_ID]})
        )
        assert receipt["applied"] and receipt["response_id"] == meta(tasks[0])[RESPONSE_ID]


@pytest.mark.parametrize("key", [None, "sk-a2a-not-a-key"])
async def test_a_missing_or_wrong_key_is_a_401_in_json_rpc_shape(served: ServedA2A, key: str | None) -> None:
    async with served.client(None, key=key) as client:
        with pytest.raises(A2AClientError, match="401") as caught:
            await client.send_message(SendMessageRequest(message=user_message(QUESTION))).__anext__()
    assert isinstance(caught.value.__cause__, httpx.HTTPStatusError)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
    reply = httpx.post(f"{served.url}/", json=body, headers={**headers, "A2A-Version": "1.0"})
    assert reply.status_code == 401 and reply.headers["www-authenticate"].startswith("Bearer")
    assert reply.json()["error"]["message"].startswith("missing or invalid API key") and "sk-a2a" not in reply.text


def test_a_v0_3_client_is_answered_too(served: ServedA2A) -> None:
    message = {"role": "user", "messageId": "m-03", "kind": "message", "parts": [{"kind": "text", "text": QUESTION}]}
    body = {"jsonrpc": "2.0", "id": 7, "method": "message/send", "params": {"message": message}}
    reply = httpx.post(f"{served.url}/", json=body, headers={"Authorization": f"Bearer {KEY_OF[OSAKA]}"})
    task = reply.json()["result"]
    assert task["status"]["state"] == "completed" and task["artifacts"][0]["parts"][0]["text"] == ANSWER


# ---- a team whose member is another team ---------------------------------------------------------------------------


def write_relay_spec(folder: Path, remote: str) -> Path:
    """Team Y: a researcher that is the remote team X (over A2A), then a writer (scripted) that relays its answer."""
    spec = folder / "relay.toml"
    spec.write_text(
        f"""
[run]
name = "harbor-relay-desk"
database = "sqlite:///{folder / "relay.db"}"

[model]
chat = "fake/scripted"
options = {{ replies = {{ "4471" = "Relayed: the Harbor door code is 4471." }} }}

[embedder]
name = "hash"

[environment]
tasks = "unused.jsonl"

[[agents]]
name = "researcher"
system = "You look codes up at the codes desk."
a2a = "{remote}"
a2a_key_env = "EVOLVE_TEST_CODES_DESK_KEY"

[[agents]]
name = "writer"
system = "Relay the researcher's answer."
after = ["researcher"]
"""
    )
    return spec


def test_a_team_with_a_remote_a2a_member_answers_through_it(
    served: ServedA2A, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVOLVE_TEST_CODES_DESK_KEY", KEY_OF[OSAKA])
    relay = Deployment(load_spec(write_relay_spec(tmp_path, served.url)))
    calls = served.deployment.chat.backend.calls  # type: ignore[attr-defined]
    seen = len(calls)
    try:
        answer = relay.answer([Message("user", QUESTION)], tenant="Hamburg-Speicherstadt-Zentrale-03")
    finally:
        relay.close()
    researcher, writer = answer.steps
    assert (researcher.agent, researcher.output) == ("researcher", ANSWER)  # team X's answer, in Y's trajectory
    assert researcher.recall_id is None  # a remote member remembers on its own side
    assert ANSWER in writer.messages[-1].content and answer.text == "Relayed: the Harbor door code is 4471."
    remote_prompt = calls[seen][0][-1].content  # what team X's model saw: Y's question, Y's role as instructions
    assert QUESTION in remote_prompt and "You look codes up at the codes desk." in remote_prompt


def test_a_remote_member_in_a_spec_is_checked_and_has_no_local_memory_unless_asked(tmp_path: Path) -> None:
    spec = load_spec(write_relay_spec(tmp_path, "http://codes-desk.internal:8100"))
    assert [a.remembers for a in spec.agents] == [False, True]
    remembering = spec.agents[0].model_copy(update={"memory": True})
    assert "memory" in remembering.model_fields_set and remembering.remembers
    text = write_relay_spec(tmp_path, "http://codes-desk.internal:8100").read_text()
    for wrong, said in [
        (text.replace('a2a = "http://codes-desk.internal:8100"', 'a2a = "codes-desk:8100"'), "agents.0.a2a"),
        (text.replace('a2a = "http://codes-desk.internal:8100"\n', ""), "a2a_key_env names the key of a remote"),
    ]:
        (tmp_path / "wrong.toml").write_text(wrong)
        with pytest.raises(ConfigError, match=said):
            load_spec(tmp_path / "wrong.toml")


# ---- the command and the extra ---------------------------------------------------------------------------------


def test_evolve_a2a_runs_as_its_own_process(tmp_path: Path, repo_root: Path) -> None:
    """The real command on a port it picks (--port 0): the URL it prints is the card's, and it answers."""
    spec = write_serve_spec(tmp_path)
    env = {**os.environ, "EVOLVE_API_KEYS": f"sk-proc-osaka-4e2a={OSAKA}"}
    cmd = [sys.executable, "-m", "apps.cli", "a2a", str(spec), "--port", "0", "--key", f"sk-proc-zurich-9d1b={ZURICH}"]
    proc = subprocess.Popen(cmd, cwd=repo_root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first, tenants = proc.stdout.readline(), proc.stdout.readline()  # type: ignore[union-attr]
        assert first.startswith("evolve a2a: agent 'codes' at http://127.0.0.1:"), first + proc.stdout.read()  # type: ignore[union-attr]
        card_url = first.rsplit(" ", 1)[1].strip()
        card = httpx.get(card_url, timeout=30).json()
        assert card["name"] == RUN and card["capabilities"]["streaming"] is True
        message = {"role": "ROLE_USER", "messageId": "m-proc", "parts": [{"text": QUESTION}]}
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
        headers = {"Authorization": "Bearer sk-proc-zurich-9d1b", "A2A-Version": "1.0"}
        task = httpx.post(card["supportedInterfaces"][0]["url"], json=body, headers=headers, timeout=30).json()
        assert task["result"]["task"]["artifacts"][0]["parts"][0]["text"] == ANSWER
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=30)
    assert tenants == f"tenants: {ZURICH}, {OSAKA}\n"  # sorted; the keys never shown
    assert "sk-proc" not in first + tenants + output and "Traceback" not in output
    assert proc.returncode == 128 + signal.SIGTERM  # a graceful shutdown


def test_evolve_a2a_without_keys_exits_2_with_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["a2a", str(write_serve_spec(tmp_path)), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evolve: evolve a2a needs at least one API key") and "Traceback" not in err


def test_without_the_a2a_extra_the_server_names_it() -> None:
    out = import_without("a2a", "evolve.serve.protocols.a2a")
    assert out.startswith("ConfigError") and "pip install -e '.[a2a]'" in out
    assert import_without("a2a", "evolve") == "imported" and import_without("a2a", "apps.cli") == "imported"
