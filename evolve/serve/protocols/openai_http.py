"""``evolve serve``: an OpenAI-compatible HTTP API over an evolved team.

Any app that speaks the OpenAI API talks to an evolved team by changing its base URL:

- ``POST /v1/chat/completions`` answers with the tenant's team (memory recall plus the HEAD prompts,
  ``evolve.serve.deployment.Deployment``), plain or streamed; the response id is the handle for feedback, and an
  ``evolve`` field (ignored by apps that do not know it) carries the recall ids and the prompt version;
- ``POST /v1/responses`` (and ``GET``/``DELETE /v1/responses/{id}``) is OpenAI's Responses API on the same team,
  memory, tenants and feedback (``evolve.serve.protocols.openai_responses``);
- ``POST /v1/feedback`` ``{"response_id", "score" (0..1), "comment"?, "key"?}`` reinforces exactly the
  memories that response recalled (once per idempotency key: the body's ``key`` or the
  ``Idempotency-Key`` header) and queues it for the prompt optimizer's next job;
- ``GET /v1/models`` lists the one served model (its id is the run's name, and ``model`` must name it:
  anything else is a 404 ``model_not_found``, as OpenAI answers); ``GET /healthz`` (no key) is for
  liveness probes; ``GET /metrics`` (no key, unless tenant labels are on) is Prometheus's
  (``evolve.serve.protocols.telemetry``: requests, latencies, tokens, ratings, memory, jobs);
- ``/v1/admin/memory/...`` are the operator's (``evolve.serve.protocols.openai_admin``): distrust a writer, undo
  it, list and release held memories, opened by an operator key only.

A bearer key maps to a tenant; each tenant has its own memories, prompts and responses. An operator key
(``evolve.serve.protocols.keys``) is no tenant's: on a tenant route it is a 403 ``operator_key``. Errors use
OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``: 401 for a missing or wrong key, 400
for a malformed body, 404 for a response id the tenant does not own, 429 (with ``Retry-After`` when the
provider gave one) when the team's model is rate limited, 504 when it timed out, 502 when it failed
otherwise, 500 (logged, with a generic message) for anything else — never a traceback.

Streaming is real for a plain text answer: the agents before the last one act first, then the
answering agent's text is sent as its model generates it (``Deployment.stream``: token by token on
a local model, as the server sends it on an OpenAI-compatible one; vLLM and LangChain models send their
whole answer as one chunk). The stream starts once that agent's first text is there, so a failure of the
team until then is still a plain HTTP error with the right status; a failure after the first byte ends
the stream with an error event. The answer is recorded when its text ends, or when the client goes away
mid-stream (with the text sent so far), so its id takes feedback either way. An answer with ``tools``,
``tool_choice`` or ``response_format`` must be checked whole first (calls parsed, JSON checked and
retried): it streams once it exists, in word-sized chunks.

A one-agent team serves the app's ``tools``: they are described to the agent, never run here, and its
calls come back as OpenAI's ``tool_calls`` with ``finish_reason`` ``"tool_calls"`` (streamed as OpenAI
streams them); ``tool_choice`` may be ``auto``, ``none``, ``required`` or a named function, and
``parallel_tool_calls: false`` keeps an answer's first call. The conversation may go on with ``tool``
messages. ``max_tokens`` (or ``max_completion_tokens``) defaults to the spec's; ``finish_reason`` is
``length`` when it cut the answer, whole or streamed. ``presence_penalty`` and ``frequency_penalty``
reach every agent's model (a local one applies OpenAI's formula; one that cannot take them makes them a
400 naming it). A request without a ``seed`` is sampled afresh. ``response_format`` (``json_object``,
``json_schema``) is told to the team and its answer checked and retried (``evolve.serve.formats``); one
that stays invalid (or still lacks the call ``tool_choice`` requires) is a 502 ``invalid_model_output``
whose error carries the ``response_id`` it was recorded under: the app rates a failure as it rates any
answer. ``logprobs: true`` gives the answering agent's chosen tokens and their log-probabilities (a
local model computes them, an OpenAI-compatible one is asked; a streamed answer then comes whole, its
logprobs on the first content chunk). What cannot be served is a 400 that says so and names it in
``param``: tools for a team of several agents, and every field of OpenAI's body that is not honoured
(``n`` > 1, ``top_logprobs``, ``logit_bias``, ``audio``...: ``evolve.serve.protocols.openai_requests``);
an unknown field is a 400 naming it and the fields its object takes.

Keys come from ``--key KEY=TENANT`` (repeatable), ``$EVOLVE_API_KEYS`` (``"key1=alice,key2=bob"``) and
a TOML file (``--keys FILE``); operator keys from ``--admin-key KEY``, ``$EVOLVE_ADMIN_KEYS`` and the
file's ``[admin]`` table (``evolve.serve.protocols.keys``)::

    [keys]
    "sk-alice-3f9c..." = "alice"
    "sk-bob-77ad..." = "bob"

    [admin]
    keys = ["sk-ops-b81e..."]

Example:
    >>> # evolve serve data/facility_codes.toml --port 8000 --key sk-alice-3f9c=alice
    >>> # client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="sk-alice-3f9c")
    >>> # client.chat.completions.create(model="facility-codes", messages=[{"role": "user", "content": "Hi"}])
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime, and the
# endpoints are closures over names imported lazily inside ``create_app``.

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from connectors import ConfigError, ConnectorError, EvolveError, ParseError, ProviderTimeout, RateLimited
from connectors.install import extra_hint
from connectors.streaming import split_words
from evolve.serve.answer_checks import FailedAnswer
from evolve.serve.answers import Answer, UnknownResponse
from evolve.serve.deployment import Deployment
from evolve.serve.metrics import Metrics
from evolve.serve.protocols.keys import admin_table, check_base_memory, is_admin, key_table, tenant_for
from evolve.serve.protocols.openai_admin import add_admin_routes
from evolve.serve.protocols.openai_requests import ApiError, ChatRequest, FeedbackRequest, parse, validation_error
from evolve.serve.protocols.openai_responses import add_response_routes
from evolve.serve.protocols.sse import relay
from evolve.serve.protocols.telemetry import add_telemetry
from evolve.serve.rating import HEADER
from evolve.serve.streaming import AnswerStream
from evolve.serve.tracing import Tracing, describe_chat

if TYPE_CHECKING:
    from fastapi import FastAPI

log = logging.getLogger(__name__)

INSTALL_HINT = f"evolve serve needs FastAPI and uvicorn: {extra_hint('serve')}"


def completion_body(answer: Answer, model: str) -> dict[str, Any]:
    """The answer as an OpenAI ``chat.completion`` (tool calls in OpenAI's shape), plus the ``evolve`` extension."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.text, "refusal": None}
    if answer.tool_calls:
        message |= {"content": None, "tool_calls": calls_body(answer)}
    return {
        "id": answer.id,
        "object": "chat.completion",
        "created": answer.created,
        "model": model,
        "system_fingerprint": answer.prompt_version or None,
        "choices": [
            {"index": 0, "message": message, "logprobs": logprobs_body(answer), "finish_reason": answer.finish_reason}
        ],
        "usage": usage_body(answer),
        "evolve": evolve_extension(answer),
    }


def logprobs_body(answer: Answer) -> dict[str, Any] | None:
    """OpenAI's ``logprobs`` of a choice (the chosen tokens; no alternatives), when the request asked for them."""
    if answer.logprobs is None:
        return None
    content = [
        {"token": token, "logprob": logprob, "bytes": list(token.encode()), "top_logprobs": []}
        for token, logprob in answer.logprobs
    ]
    return {"content": content, "refusal": None}


def calls_body(answer: Answer) -> list[dict[str, Any]]:
    """The answer's tool calls as OpenAI writes them; a call without an id gets one from the response's."""
    return [
        {
            "id": c.id or f"call_{answer.id.removeprefix('chatcmpl-')}_{i}",
            "type": "function",
            "function": {"name": c.name, "arguments": c.arguments_json()},
        }  # fmt: skip
        for i, c in enumerate(answer.tool_calls)
    ]


def id_header(response_id: str) -> dict[str, str]:
    """The response id as a header too: clients that keep headers but drop a streamed answer's id (LangChain's
    ``ChatOpenAI(include_response_headers=True)``) can still rate it."""
    return {HEADER: response_id}


def timing(answer: Answer) -> dict[str, str]:
    """``Server-Timing`` (milliseconds): the answer's recalls and the whole answer, as measured in the server."""
    return {"Server-Timing": ", ".join(f"{name};dur={ms:.2f}" for name, ms in answer.timings.items())}


def usage_body(answer: Answer) -> dict[str, int]:
    u = answer.usage
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.total_tokens}


def evolve_extension(answer: Answer) -> dict[str, Any]:
    return {"recall_ids": list(answer.recall_ids), "prompt_version": answer.prompt_version}


def chunk_maker(
    response_id: str, created: int, prompt_version: str, model: str, include_usage: bool
) -> Callable[..., dict[str, Any]]:
    """``chunk(delta, finish=None)``: one ``chat.completion.chunk`` event of a response."""
    head = {"id": response_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": prompt_version or None}  # fmt: skip
    extra: dict[str, Any] = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**head, "choices": [choice], **extra}

    return chunk


def closing_events(
    answer: Answer, chunk: Callable[..., dict[str, Any]], include_usage: bool
) -> Iterator[dict[str, Any]]:
    """The finish chunk (with the ``evolve`` extension), then the usage chunk if asked."""
    yield {**chunk({}, answer.finish_reason), "evolve": evolve_extension(answer)}
    if include_usage:
        yield {**chunk({}), "choices": [], "usage": usage_body(answer)}


def chunk_events(answer: Answer, model: str, include_usage: bool) -> Iterator[dict[str, Any]]:
    """A finished answer as ``chat.completion.chunk`` events: role, word chunks (or its tool calls),
    finish, then usage if asked."""
    chunk = chunk_maker(answer.id, answer.created, answer.prompt_version, model, include_usage)
    if answer.tool_calls:  # as OpenAI streams calls: the id and name first, then the arguments
        yield chunk({"role": "assistant", "content": None})
        for i, call in enumerate(calls_body(answer)):
            fn = call["function"]
            yield chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                         "function": {"name": fn["name"], "arguments": ""}}]})  # fmt: skip
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]})
    else:
        yield chunk({"role": "assistant", "content": ""})
        logprobs = logprobs_body(answer)
        for i, piece in enumerate(split_words(answer.text)):
            event = chunk({"content": piece})
            if i == 0 and logprobs is not None:  # the whole answer's tokens, on its first content chunk
                event["choices"][0]["logprobs"] = logprobs
            yield event
    yield from closing_events(answer, chunk, include_usage)


def stream_events(stream: AnswerStream, model: str, include_usage: bool) -> Iterator[dict[str, Any]]:
    """An answer being generated as ``chat.completion.chunk`` events: role, one content chunk per delta as
    it comes, finish, then usage if asked. Closing this generator closes the stream (the answer is
    recorded with what was sent)."""
    chunk = chunk_maker(stream.id, stream.created, stream.prompt_version, model, include_usage)
    try:
        yield chunk({"role": "assistant", "content": ""})
        for delta in stream:
            yield chunk({"content": delta})
        assert stream.answer is not None  # recorded when the deltas ended
        yield from closing_events(stream.answer, chunk, include_usage)
    finally:
        stream.close()


def sse(events: Iterator[dict[str, Any]]) -> Iterator[str]:
    """Server-sent events ending in ``[DONE]``; a failure mid-stream ends it with an error event instead.
    Closing this generator closes ``events``."""
    try:
        for event in events:
            yield f"data: {json.dumps(event, ensure_ascii=False)}\n\n"
    except Exception as e:  # the status line is sent: all that is left is to say so in the stream
        error = ApiError(502, f"the answer failed while streaming: {e}", kind="server_error", code="upstream_error")
        if not isinstance(e, ConnectorError):
            log.exception("streaming a response failed")
            error = ApiError(500, "internal error while streaming", kind="server_error", code="internal_error")
        yield f"data: {json.dumps(error.body())}\n\n"
        return
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
    yield "data: [DONE]\n\n"


# ---- the app ------------------------------------------------------------------------------------------------


def as_api_error(e: Exception, method: str = "", path: str = "") -> ApiError:
    """Any exception as the HTTP error a client sees: ours by kind, FastAPI's as 400/404, else a generic 500."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    if isinstance(e, ApiError):
        return e
    if isinstance(e, RequestValidationError):
        return validation_error(e)
    if isinstance(e, HTTPException):  # an unknown path or method
        code = "not_found" if e.status_code == 404 else None
        return ApiError(e.status_code, f"{e.detail}: {method} {path}", code=code)
    if isinstance(e, UnknownResponse):
        return ApiError(404, str(e), code="response_not_found", param="response_id")
    if isinstance(e, ConfigError):
        return ApiError(400, str(e))
    if isinstance(e, ParseError):  # the model could not give the answer in the format asked for
        recorded = e.response_id if isinstance(e, FailedAnswer) else None  # recorded by the deployment: rateable
        said = f"{e}; it was recorded as {recorded}: rate it with /v1/feedback" if recorded else str(e)
        return ApiError(502, said, kind="server_error", code="invalid_model_output", response_id=recorded)
    if isinstance(e, ConnectorError):
        return upstream_error(e)
    log.error("request failed: %s: %s", type(e).__name__, e)  # uvicorn logs the traceback of non-Evolve errors
    return ApiError(500, "internal server error (see the server's log)", kind="server_error", code="internal_error")


def upstream_error(e: ConnectorError) -> ApiError:
    """The team's model failed: 429 when rate limited (passing on Retry-After), 504 on a timeout, else 502."""
    if isinstance(e, RateLimited):
        error = ApiError(429, f"the team's model is rate limited: {e}", kind="rate_limit_error", code="rate_limited")
        if e.retry_after is not None:
            error.headers["Retry-After"] = str(max(1, math.ceil(e.retry_after)))
        return error
    if isinstance(e, ProviderTimeout):
        return ApiError(
            504, f"the team's model did not answer in time: {e}", kind="server_error", code="upstream_timeout"
        )
    return ApiError(502, f"the team's model failed: {e}", kind="server_error", code="upstream_error")


def create_app(
    deployment: Deployment,
    keys: Mapping[str, str],
    *,
    admin_keys: Sequence[str] = (),
    metrics: Metrics | None = None,
    tracing: Tracing | None = None,
) -> "FastAPI":
    """The OpenAI-compatible app over ``deployment``; ``keys`` maps each bearer key to its tenant, ``admin_keys``
    are the operator's (``evolve.serve.protocols.openai_admin``: without one, its routes are off); ``metrics`` (what
    ``GET /metrics`` shows) and ``tracing`` (a span per request; default none) go to ``telemetry.add_telemetry``.

    Example:
        >>> # app = create_app(Deployment(load_spec("spec.toml")), {"sk-alice-3f9c": "alice"})
        >>> # uvicorn.run(app, host="127.0.0.1", port=8000)
    """
    try:
        from fastapi import FastAPI, Request
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import JSONResponse
        from starlette.exceptions import HTTPException
    except ImportError as e:
        raise ConfigError(INSTALL_HINT) from e

    table = key_table(keys)
    admins = admin_table(keys, admin_keys)
    check_base_memory(deployment.spec.serve.memory, keys)
    card = {"id": deployment.model_id, "object": "model", "created": int(time.time()), "owned_by": "evolve"}
    app = FastAPI(title="evolve serve", docs_url=None, redoc_url=None)

    async def on_error(request: Request, e: Exception) -> JSONResponse:
        error = as_api_error(e, request.method, request.url.path)
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers or None)

    for kind in (ApiError, EvolveError, RequestValidationError, HTTPException, Exception):
        app.add_exception_handler(kind, on_error)

    def authorize(request: Request) -> str:
        tenant = tenant_for(request.headers.get("authorization"), table)
        if tenant is None and is_admin(request.headers.get("authorization"), admins):
            message = "an operator key is no tenant's: it opens /v1/admin/... only; send a tenant's API key here"
            raise ApiError(403, message, code="operator_key")
        if tenant is None:
            message = "missing or invalid API key: send 'Authorization: Bearer <key>'"
            raise ApiError(401, message, code="invalid_api_key")
        return tenant

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def list_models(request: Request) -> dict[str, Any]:
        authorize(request)
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{model}")
    async def get_model(request: Request, model: str) -> dict[str, Any]:
        authorize(request)
        if model != deployment.model_id:
            raise ApiError(404, f"the model {model!r:.80} is not served here", code="model_not_found", param="model")
        return card

    add_team_routes(app, deployment, authorize)
    add_response_routes(app, deployment, authorize)
    add_admin_routes(app, deployment.store, admins, table)
    add_telemetry(
        app, command="evolve serve", deployment=deployment, metrics=metrics, tracing=tracing, admin_keys=admins
    )
    return app


def add_team_routes(app: "FastAPI", deployment: Deployment, authorize: Callable[..., str]) -> None:
    """``/v1/chat/completions`` and ``/v1/feedback``: the team's blocking work runs in worker threads."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.concurrency import run_in_threadpool

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        tenant = authorize(request)
        req: ChatRequest = parse(ChatRequest, await request.body())
        if req.model != deployment.model_id:
            raise ApiError(
                404, f"the model {req.model!r:.80} is not served here; this server serves {deployment.model_id!r}",
                code="model_not_found", param="model",
            )  # fmt: skip
        tools, choice = req.request_tools()
        params = req.params() | ({"tool_choice": choice} if choice is not None else {})
        describe_chat(req.model, params, stream=req.stream is True)
        include_usage = req.stream_options is not None and req.stream_options.include_usage is True
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        plain = not tools and choice is None and req.response_format is None and not req.logprobs
        if req.stream and plain:  # plain text: real streaming
            stream = await run_in_threadpool(deployment.stream, req.chat_messages(), tenant=tenant, params=params)
            events = relay(sse(stream_events(stream, req.model, include_usage)))
            return StreamingResponse(events, media_type="text/event-stream", headers=headers | id_header(stream.id))
        answer = await run_in_threadpool(
            deployment.answer, req.chat_messages(), tenant=tenant, params=params, tools=tools,
            parallel_tool_calls=req.parallel_tool_calls is not False,
            response_format=req.response_format.as_dict() if req.response_format else None,
        )  # fmt: skip
        if not req.stream:
            return JSONResponse(completion_body(answer, req.model), headers=id_header(answer.id) | timing(answer))
        events = relay(sse(chunk_events(answer, req.model, include_usage)))  # checked whole, then sent
        return StreamingResponse(events, media_type="text/event-stream", headers=headers | id_header(answer.id))

    @app.post("/v1/feedback")
    async def feedback(request: Request) -> dict[str, Any]:
        tenant = authorize(request)
        req: FeedbackRequest = parse(FeedbackRequest, await request.body())
        key = req.key if req.key is not None else request.headers.get("idempotency-key")
        receipt = await run_in_threadpool(
            deployment.feedback, req.response_id, req.score, tenant=tenant, comment=req.comment, key=key
        )
        return {"object": "feedback", **dataclasses.asdict(receipt)}


__all__ = [
    "INSTALL_HINT",
    "as_api_error",
    "chunk_events",
    "completion_body",
    "create_app",
    "sse",
    "stream_events",
]
