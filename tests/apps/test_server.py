"""`evolve serve` on 127.0.0.1, driven by the real openai SDK and LangChain's ChatOpenAI."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

import apps.serve_cli
from apps.cli import main
from connectors import ConfigError, ConnectorError
from connectors.streaming import split_words
from evolve.serve.protocols import openai_http
from evolve.serve.protocols.keys import load_keys
from tests.support.fake_openai import FakeOpenAIServer, Reply, chat_body, error_body
from tests.support.serve import ANSWER, KEY_OF, QUESTION, Served, serving, write_serve_spec

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": QUESTION}]


def post(served: Served, path: str, body: Any, *, tenant: str | None = "alice", **headers: str) -> httpx2.Response:
    if tenant is not None:
        headers["Authorization"] = f"Bearer {KEY_OF[tenant]}"
    content = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return httpx2.post(f"{served.url}{path}", content=content, headers=headers, timeout=30)


def assert_openai_error(response: httpx2.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert "Traceback" not in response.text and "sk-test" not in response.text
    return error


def snapshot(served: Served, tenant: str) -> dict[str, tuple[float, int]]:
    store = served.deployment.store
    assert store is not None
    return {it.id: (it.q, it.visits) for it in store.items(f"{served.deployment.run_name(tenant)}/solver")}


def seed(served: Served, tenant: str, tag: str) -> list[str]:
    """Memories in the tenant's namespace: some near the question, some far from it."""
    store = served.deployment.store
    assert store is not None
    ns = f"{served.deployment.run_name(tenant)}/solver"
    intents = [QUESTION, "Door code of the Harbor warehouse?", "harbor door", "summit alarm", "lunch menu"]
    return [
        store.add(f"{intent} {tag}", f"lesson {i} for {tenant}", namespace=ns).id for i, intent in enumerate(intents)
    ]


def model_calls(served: Served) -> list[Any]:
    return served.deployment.chat.backend.calls  # type: ignore[attr-defined]  # the spec's ScriptedChat


# ---- the openai SDK and LangChain, unchanged but for the base URL ----------------------------------------


def test_the_openai_sdk_gets_a_plain_completion(served: Served) -> None:
    completion = served.client("alice").chat.completions.create(model="codes", messages=USER)
    assert completion.choices[0].message.content == ANSWER
    assert completion.choices[0].finish_reason == "stop" and completion.choices[0].message.role == "assistant"
    assert completion.model == "codes"  # the served model: the run's name
    assert completion.id.startswith("chatcmpl-") and completion.object == "chat.completion"
    usage = completion.usage
    assert usage is not None and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens > 0
    extension = completion.model_extra["evolve"]  # type: ignore[index]
    assert extension["prompt_version"] == served.deployment.graph("alice").head().id
    assert len(extension["recall_ids"]) == 1  # one agent, one recall
    recorded = served.deployment.response(completion.id, tenant="alice")
    assert recorded["answer"] == ANSWER and recorded["query"] == QUESTION


def test_the_openai_sdk_streams_the_answer_in_chunks(served: Served) -> None:
    stream = served.client("alice").chat.completions.create(
        model="codes", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ANSWER and sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert len(chunks[-2].model_extra["evolve"]["recall_ids"]) == 1  # type: ignore[index]  # on the finish chunk
    assert served.deployment.response(chunks[0].id, tenant="alice")["answer"] == ANSWER  # the id takes feedback


def test_a_stream_ends_with_done(served: Served) -> None:
    response = post(served, "/chat/completions", {"model": "codes", "messages": USER, "stream": True})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = [line.removeprefix("data: ") for line in response.text.splitlines() if line]
    assert events[-1] == "[DONE]" and all(json.loads(e)["object"] == "chat.completion.chunk" for e in events[:-1])
    assert "usage" not in json.loads(events[-2])  # usage only when stream_options.include_usage


def test_models_list_the_served_team(served: Served) -> None:
    client = served.client("bob")
    assert [m.id for m in client.models.list()] == ["codes"]
    assert client.models.retrieve("codes").id == "codes"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


def test_langchain_chat_openai_invokes_and_streams(served: Served) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=served.url, api_key=KEY_OF["alice"], model="codes", max_retries=0)
    message = llm.invoke(QUESTION)
    assert message.content == ANSWER and message.response_metadata["finish_reason"] == "stop"
    assert message.usage_metadata is not None and message.usage_metadata["total_tokens"] > 0
    pieces = [str(chunk.content) for chunk in llm.stream(QUESTION)]
    assert "".join(pieces) == ANSWER and len([p for p in pieces if p]) > 1


# ---- feedback and tenants ------------------------------------------------------------------------------------


def test_feedback_moves_the_q_of_exactly_the_recalled_memories(served: Served) -> None:
    seed(served, "alice", "feedback")
    completion = served.client("alice").chat.completions.create(model="codes", messages=USER)
    (recall_id,) = completion.model_extra["evolve"]["recall_ids"]  # type: ignore[index]
    recalled = set(served.deployment.store.explain(recall_id, namespace="codes@alice/solver")["selected"])  # type: ignore[union-attr]
    assert len(recalled) == 2  # k2
    before = snapshot(served, "alice")

    body = {"response_id": completion.id, "score": 1.0, "comment": "right code"}
    receipt = post(served, "/feedback", body, **{"Idempotency-Key": "rating-1"}).json()

    assert receipt["applied"] and receipt["reinforced"] == 2 and receipt["reward"] == 1.0
    assert receipt["feedback_id"] == f"{completion.id}:rating-1" and receipt["response_id"] == completion.id
    after = snapshot(served, "alice")
    assert {i for i in after if after[i] != before[i]} == recalled
    assert all(after[i][1] == before[i][1] + 1 and after[i][0] > before[i][0] for i in recalled)

    repeat = post(served, "/feedback", {**body, "score": 0.0}, **{"Idempotency-Key": "rating-1"}).json()
    assert not repeat["applied"] and repeat["reinforced"] == 0 and snapshot(served, "alice") == after
    other = post(served, "/feedback", {**body, "score": 0.0, "key": "second-rater"}).json()
    assert other["applied"] and other["reward"] == -1.0 and snapshot(served, "alice") != after


def test_a_tenant_never_sees_another_tenants_responses_or_memories(served: Served) -> None:
    alice_ids = seed(served, "alice", "isolation")
    bob_ids = seed(served, "bob", "isolation")
    alice_answer = served.client("alice").chat.completions.create(model="codes", messages=USER)
    before = snapshot(served, "alice")

    stolen = post(served, "/feedback", {"response_id": alice_answer.id, "score": 0.0}, tenant="bob")
    unknown = post(served, "/feedback", {"response_id": "chatcmpl-nosuch", "score": 0.0}, tenant="bob")
    assert assert_openai_error(stolen, 404)["code"] == assert_openai_error(unknown, 404)["code"]
    assert snapshot(served, "alice") == before

    calls = model_calls(served)
    seen = len(calls)
    bob_answer = served.client("bob").chat.completions.create(model="codes", messages=USER)
    (recall_id,) = bob_answer.model_extra["evolve"]["recall_ids"]  # type: ignore[index]
    selected = set(served.deployment.store.explain(recall_id, namespace="codes@bob/solver")["selected"])  # type: ignore[union-attr]
    assert selected and selected <= set(snapshot(served, "bob")) and not selected & set(alice_ids)
    prompt = "\n".join(m.content for m in calls[seen][0])
    assert "for bob" in prompt and "for alice" not in prompt and set(bob_ids) & selected


def test_each_tenant_answers_from_its_own_prompts(served: Served) -> None:
    graph = served.deployment.graph("carol")
    seed_version = graph.head().id
    evolved = graph.commit({"solver.system": "Carol's evolved prompt.", "solver.library": ""}, parents=[seed_version])
    calls = model_calls(served)
    try:
        seen = len(calls)
        carol = served.client("carol").chat.completions.create(model="codes", messages=USER)
        bob = served.client("bob").chat.completions.create(model="codes", messages=USER)
        assert [c[0][0].content for c in calls[seen:]] == ["Carol's evolved prompt.", "Reply with the code only."]
        assert carol.model_extra["evolve"]["prompt_version"] == evolved.id  # type: ignore[index]
        assert bob.model_extra["evolve"]["prompt_version"] != evolved.id  # type: ignore[index]
    finally:
        graph.rollback(seed_version)
    again = served.client("carol").chat.completions.create(model="codes", messages=USER)
    assert again.model_extra["evolve"]["prompt_version"] == seed_version  # type: ignore[index]
    assert calls[-1][0][0].content == "Reply with the code only."


def test_concurrent_requests_of_several_tenants_are_each_answered_and_recorded(served: Served) -> None:
    def ask(tenant: str) -> tuple[str, str, str | None]:
        completion = served.client(tenant).chat.completions.create(model="codes", messages=USER)
        return tenant, completion.id, completion.choices[0].message.content

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, ["alice", "bob", "carol"] * 6))
    assert [text for _, _, text in answers] == [ANSWER] * 18 and len({i for _, i, _ in answers}) == 18
    for tenant, response_id, _ in answers:
        assert served.deployment.response(response_id, tenant=tenant)["answer"] == ANSWER


# ---- errors -----------------------------------------------------------------------------------------------------


def test_a_missing_or_wrong_key_is_401(served: Served) -> None:
    wrong = openai.OpenAI(base_url=served.url, api_key="sk-test-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        wrong.chat.completions.create(model="codes", messages=USER)
    assert caught.value.status_code == 401 and "sk-test-wrong" not in str(caught.value.body)
    for path, body, headers in [
        ("/chat/completions", {"model": "codes", "messages": USER}, {}),
        ("/chat/completions", "{not json", {}),  # the key is checked before the body
        ("/chat/completions", {"model": "codes", "messages": USER}, {"Authorization": f"Basic {KEY_OF['alice']}"}),
        ("/chat/completions", {"model": "codes", "messages": USER}, {"Authorization": "Bearer"}),
        ("/feedback", {"response_id": "chatcmpl-x", "score": 1.0}, {}),
    ]:
        response = post(served, path, body, tenant=None, **headers)
        assert assert_openai_error(response, 401)["code"] == "invalid_api_key"
        assert response.headers["www-authenticate"] == "Bearer"
    unauthorized = httpx2.get(f"{served.url}/models", timeout=10)
    assert_openai_error(unauthorized, 401)
    assert httpx2.get(f"{served.url.removesuffix('/v1')}/healthz", timeout=10).json() == {"status": "ok"}


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        ("/chat/completions", '{"model": "codes", "messages": [', "not valid JSON"),
        ("/chat/completions", {"model": "codes"}, "messages: Field required"),
        ("/chat/completions", {"model": "codes", "messages": []}, "messages: List should have at least 1 item"),
        ("/chat/completions", {"model": "codes", "messages": USER, "n": 2}, "only n=1"),
        ("/chat/completions", {"model": "codes", "messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
        ("/chat/completions", {"model": "codes", "messages": USER, "temperature": 9}, "temperature: Input should be"),
        (
            "/chat/completions",
            {"model": "codes", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "only text content parts",
        ),
        ("/chat/completions", {"model": "codes", "messages": [{"role": "system", "content": "hi"}]}, "user message"),
        ("/chat/completions", [1, 2], "body: Input should be a valid dictionary"),
        ("/feedback", {"response_id": "chatcmpl-x", "score": 1.5}, "score: Input should be less than or equal to 1"),
        ("/feedback", {"response_id": "chatcmpl-x", "score": "good"}, "score: Input should be a valid number"),
        ("/feedback", {"score": 1.0}, "response_id: Field required"),
    ],
)
def test_a_malformed_body_is_400_with_a_readable_message(served: Served, path: str, body: Any, expected: str) -> None:
    error = assert_openai_error(post(served, path, body), 400)
    assert expected in error["message"] and error["type"] == "invalid_request_error"


def test_extra_openai_fields_are_accepted_and_parts_and_developer_messages_are_read(served: Served) -> None:
    messages = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "user", "content": [{"type": "text", "text": QUESTION}]},
    ]
    body = {
        "model": "codes",
        "messages": messages,
        "max_completion_tokens": 8,
        "logprobs": False,
        "user": "u-1",
        "n": 1,
    }
    response = post(served, "/chat/completions", body)
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == ANSWER
    prompt, params = model_calls(served)[-1]
    assert "Instructions from the app:\nBe brief." in prompt[-1].content and params["max_tokens"] == 8


def test_a_failing_model_is_502_plain_or_streaming(served: Served) -> None:
    lunch: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "What is on the lunch menu?"}
    ]  # the script has no reply for it
    with pytest.raises(openai.InternalServerError) as caught:
        served.client("carol").chat.completions.create(model="codes", messages=lunch)
    assert caught.value.status_code == 502
    for stream in (False, True):
        error = assert_openai_error(
            post(served, "/chat/completions", {"model": "codes", "messages": lunch, "stream": stream}, tenant="carol"),
            502,
        )
        assert error["code"] == "upstream_error" and "no reply" in error["message"]


def test_a_team_on_an_api_model_answers_and_its_upstream_failure_is_502(tmp_path: Path) -> None:
    upstream = FakeOpenAIServer()
    upstream.start()
    model = f'chat = "openai/upstream-model"\nbase_url = "{upstream.url}"\noptions = {{ retries = 0 }}'
    try:
        with serving(write_serve_spec(tmp_path, model=model)) as live:
            upstream.script(Reply(200, chat_body("4471", prompt_tokens=30, completion_tokens=2)))
            completion = live.client("alice").chat.completions.create(model="codes", messages=USER)
            assert completion.choices[0].message.content == "4471" and completion.usage.total_tokens == 32  # type: ignore[union-attr]
            sent = upstream.requests[-1]["json"]
            assert sent["model"] == "upstream-model" and sent["messages"][0]["content"] == "Reply with the code only."
            assert sent["max_tokens"] == 12 and QUESTION in sent["messages"][-1]["content"]
            assert "presence_penalty" not in sent and "frequency_penalty" not in sent

            upstream.script(Reply(200, chat_body("4471", finish_reason="length")))
            cut = live.client("alice").chat.completions.create(
                model="codes", messages=USER, max_tokens=2, presence_penalty=0.5, frequency_penalty=-0.25
            )  # passed upstream, and the upstream's cut passed back
            sent = upstream.requests[-1]["json"]
            assert (sent["max_tokens"], sent["presence_penalty"], sent["frequency_penalty"]) == (2, 0.5, -0.25)
            assert cut.choices[0].finish_reason == "length"

            upstream.script(Reply(500, error_body("upstream exploded", "server_error")))
            response = post(live, "/chat/completions", {"model": "codes", "messages": USER, "stream": True})
            assert assert_openai_error(response, 502)["code"] == "upstream_error"
    finally:
        upstream.stop()


def test_an_unexpected_error_is_a_generic_500(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(served.deployment, "answer", broken)
    response = post(served, "/chat/completions", {"model": "codes", "messages": USER})
    error = assert_openai_error(response, 500)
    assert "secret" not in response.text and error["code"] == "internal_error"


def test_a_failure_after_the_first_byte_ends_the_stream_with_an_error_event(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = openai_http.stream_events

    def failing(*args: Any) -> Iterator[dict[str, Any]]:
        events = real(*args)
        yield next(events)
        events.close()
        raise ConnectorError("the backend went away")

    monkeypatch.setattr(openai_http, "stream_events", failing)
    stream = served.client("alice").chat.completions.create(model="codes", messages=USER, stream=True)
    with pytest.raises(openai.APIError, match="went away"):
        list(stream)
    raw = post(served, "/chat/completions", {"model": "codes", "messages": USER, "stream": True})
    events = [line.removeprefix("data: ") for line in raw.text.splitlines() if line]
    assert json.loads(events[-1])["error"]["code"] == "upstream_error" and "[DONE]" not in events


@pytest.mark.parametrize("text", ["The door code is 4471.", "  two\n\nlines  ", "", "one"])
def test_stream_pieces_join_back_to_the_answer(text: str) -> None:
    assert "".join(split_words(text)) == text


# ---- keys and the command line ----------------------------------------------------------------------------------


def test_keys_come_from_a_file_the_environment_and_flags(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text('[keys]\n"sk-file-1" = "alice"\n')
    found = load_keys(file=keys, pairs=["sk-flag==2=bob"], env="sk-env-3=carol, ,sk-file-1=alice")
    assert found == {"sk-file-1": "alice", "sk-env-3": "carol", "sk-flag==2": "bob"}  # a key may hold '='


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "at least one API key"),
        ({"pairs": ["sk-secret-9"]}, "must look like KEY=TENANT"),
        ({"pairs": ["sk-secret-9=../etc"]}, "tenant name"),
        ({"pairs": ["sk-secret-9=alice", "sk-secret-9=bob"]}, "two tenants"),
        ({"file": Path("missing.toml")}, "does not exist"),
    ],
)
def test_bad_keys_are_refused_without_echoing_them(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        load_keys(**kwargs)
    assert "sk-secret-9" not in str(caught.value)


def test_serving_without_keys_exits_2_with_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", str(write_serve_spec(tmp_path)), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evolve: ") and "at least one API key" in err and "Traceback" not in err


def test_the_listening_socket_is_tcp_so_kept_alive_replies_are_not_delayed() -> None:
    """asyncio sets TCP_NODELAY only on sockets that name IPPROTO_TCP; without it each reply on a
    kept-alive connection (the openai SDK's) waited ~40 ms for a delayed ACK."""
    with apps.serve_cli.listen("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP and sock.getsockname()[1] > 0
        with pytest.raises(ConfigError, match="cannot listen on 127.0.0.1"):
            apps.serve_cli.listen("127.0.0.1", sock.getsockname()[1])  # the port is taken


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_evolve_serve_runs_as_its_own_process(tmp_path: Path, repo_root: Path) -> None:
    """The real command on a free port: wait for /healthz, then the SDK as any app would use it."""
    spec, port = write_serve_spec(tmp_path), free_port()
    keys = tmp_path / "keys.toml"
    keys.write_text('[keys]\n"sk-proc-alice" = "alice"\n')
    env = {**os.environ, "EVOLVE_API_KEYS": "sk-proc-bob=bob"}
    cmd = [sys.executable, "-m", "apps.cli", "serve", str(spec), "--port", str(port), "--keys", str(keys)]
    proc = subprocess.Popen(cmd, cwd=repo_root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read()  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "evolve serve did not answer /healthz"
            try:
                if httpx2.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                time.sleep(0.1)
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-proc-alice", max_retries=0)
        completion = client.chat.completions.create(model="codes", messages=USER)
        assert completion.choices[0].message.content == ANSWER
        streamed = client.chat.completions.create(model="codes", messages=USER, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == ANSWER
        rated = httpx2.post(f"{base}/v1/feedback", json={"response_id": completion.id, "score": 1},
                            headers={"Authorization": "Bearer sk-proc-alice"}, timeout=10)  # fmt: skip
        assert rated.json()["applied"] is True
        bob = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-proc-bob", max_retries=0)
        with pytest.raises(openai.NotFoundError):  # alice's response id means nothing to bob
            bob.post("/feedback", body={"response_id": completion.id, "score": 1}, cast_to=object)
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=30)
    assert f"at http://127.0.0.1:{port}/v1" in output and "tenants: alice, bob" in output
    assert "sk-proc" not in output and "Traceback" not in output
    assert proc.returncode == 128 + signal.SIGTERM  # a graceful shutdown, then the exit status SIGTERM implies
    assert list((tmp_path / "serve.db.faiss").glob("*.faiss")), "the deployment saved its index on the way out"
