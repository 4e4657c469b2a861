"""``/v1/responses``: OpenAI's Responses API on ``evolve serve``, over the deployment, memory, tenants and feedback
that chat completions use (``evolve.serve.protocols.openai_http`` registers these routes).

- ``POST /v1/responses`` answers ``input`` (a string, or message, ``function_call`` and ``function_call_output``
  items) with the tenant's team, as ``/v1/chat/completions`` answers messages: ``instructions`` are the app's
  system message, function ``tools`` are described to a one-agent team and its calls come back as
  ``function_call`` items for the app to run, ``text.format`` is told and checked
  (``evolve.serve.protocols.responses_requests`` says what each field does). With ``stream`` the answer comes as
  the API's semantic events (``evolve.serve.protocols.responses_events``): a plain text answer as the answering
  agent generates it, one with tools or a format once it is checked whole.
- The response id (``resp_…``) is the feedback key, exactly as a chat completion's: ``POST /v1/feedback`` takes it,
  and it is recorded even when a stream is cut short by the client (status ``cancelled``). ``usage`` is the tokens
  every agent's model spent.
- Conversation state: a response is stored unless ``store`` is false. ``previous_response_id`` continues a stored
  response of the same tenant (its conversation and output come before the new input; its ``instructions`` do not
  carry over, as on OpenAI), ``GET /v1/responses/{id}`` gives it back, ``DELETE`` removes it with its ratings.
  Another tenant's id, an unknown one and one made with ``store: false`` are the same 404.

``store: false`` is honoured as OpenAI defines it (the response cannot be fetched, continued or deleted here),
but the answer is still recorded for feedback, as every chat completion is: its id must take ``/v1/feedback``,
which is how memory learns. An app that wants nothing kept deletes a stored response instead.

Example:
    >>> # client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="sk-alice-3f9c")
    >>> # first = client.responses.create(model="facility-codes", input="Harbor warehouse door code?")
    >>> # client.responses.create(model="facility-codes", input="And the gate?", previous_response_id=first.id)
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter

from connectors import Message
from connectors.types import as_messages as from_dicts
from evolve.serve.answers import Answer
from evolve.serve.deployment import Deployment
from evolve.serve.protocols.openai_requests import ApiError, parse
from evolve.serve.protocols.responses_events import (
    Head,
    finished_events,
    output_items,
    response_body,
    status_of,
    streamed_events,
)
from evolve.serve.protocols.responses_requests import InputItem, ResponsesRequest, as_messages
from evolve.serve.protocols.sse import named_events, relay
from evolve.serve.rating import HEADER
from evolve.serve.responses import forget, keep_state, stored_state
from evolve.serve.tracing import describe_chat

if TYPE_CHECKING:
    from fastapi import FastAPI

PREFIX = "resp_"
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
ITEMS: TypeAdapter[list[Any]] = TypeAdapter(list[InputItem])


def not_found(response_id: str, param: str) -> ApiError:
    said = f"no stored response {response_id!r:.80} for this tenant (one made with store: false is not kept)"
    return ApiError(404, said, code="response_not_found", param=param)


def continued(deployment: Deployment, tenant: str, previous_id: str | None) -> list[Message]:
    """The conversation a stored response of this tenant ended with: its turns, then its output."""
    if previous_id is None:
        return []
    state = stored_state(deployment.engine, previous_id, deployment.run_name(tenant))
    if state is None:
        raise not_found(previous_id, "previous_response_id")
    turns = from_dicts(state["conversation"]) if state["conversation"] else []
    return [*turns, *as_messages(ITEMS.validate_python(state["response"]["output"]), turns)]


def keeper(deployment: Deployment, req: ResponsesRequest, turns: Sequence[Message]) -> Callable[[dict[str, Any]], None]:
    """``keep(body)``: store the response object and its conversation (without instructions), unless ``store``
    is false."""
    conversation = [m.to_dict() for m in turns]

    def keep(body: dict[str, Any]) -> None:
        if req.store is not False:
            keep_state(deployment.engine, body["id"], {"response": body, "conversation": conversation})

    return keep


def answer_headers(answer: Answer) -> dict[str, str]:
    """The response id (for clients that keep headers only) and ``Server-Timing``, as chat completions send them."""
    timing = ", ".join(f"{name};dur={ms:.2f}" for name, ms in answer.timings.items())
    return {HEADER: answer.id, "Server-Timing": timing}


def check_model(model: str, deployment: Deployment) -> None:
    if model != deployment.model_id:
        raise ApiError(
            404, f"the model {model!r:.80} is not served here; this server serves {deployment.model_id!r}",
            code="model_not_found", param="model",
        )  # fmt: skip


def add_response_routes(app: "FastAPI", deployment: Deployment, authorize: Callable[..., str]) -> None:
    """``POST /v1/responses``, ``GET`` and ``DELETE /v1/responses/{id}``: the team's work runs in worker threads."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.concurrency import run_in_threadpool

    @app.post("/v1/responses")
    async def create_response(request: Request) -> Any:
        tenant = authorize(request)
        req: ResponsesRequest = parse(ResponsesRequest, await request.body())
        check_model(req.model, deployment)
        turns = req.turns(await run_in_threadpool(continued, deployment, tenant, req.previous_response_id))
        messages, keep = req.with_instructions(turns), keeper(deployment, req, turns)
        tools, choice = req.request_tools()
        params = req.params() | ({"tool_choice": choice} if choice is not None else {})
        describe_chat(req.model, params, stream=req.stream is True)
        fmt = req.response_format()
        if req.stream and not tools and choice is None and fmt is None:  # plain text: real streaming
            stream = await run_in_threadpool(
                deployment.stream, messages, tenant=tenant, params=params, id_prefix=PREFIX
            )
            events = streamed_events(stream, Head(stream.id, stream.created, req.model, req.echo()), keep)
            headers = STREAM_HEADERS | {HEADER: stream.id}
            return StreamingResponse(relay(named_events(events)), media_type="text/event-stream", headers=headers)
        answer = await run_in_threadpool(
            deployment.answer, messages, tenant=tenant, params=params, tools=tools, response_format=fmt,
            parallel_tool_calls=req.parallel_tool_calls is not False, id_prefix=PREFIX,
        )  # fmt: skip
        head = Head(answer.id, answer.created, req.model, req.echo())
        body = response_body(head, status_of(answer), output_items(answer), answer)
        await run_in_threadpool(keep, body)
        if not req.stream:
            return JSONResponse(body, headers=answer_headers(answer))
        events = finished_events(answer, head)  # checked whole, then sent
        headers = STREAM_HEADERS | {HEADER: answer.id}
        return StreamingResponse(relay(named_events(events)), media_type="text/event-stream", headers=headers)

    @app.get("/v1/responses/{response_id}")
    async def get_response(request: Request, response_id: str) -> Any:
        tenant = authorize(request)
        no_query(request)
        state = await run_in_threadpool(stored_state, deployment.engine, response_id, deployment.run_name(tenant))
        if state is None:
            raise not_found(response_id, "response_id")
        return state["response"]

    @app.delete("/v1/responses/{response_id}")
    async def delete_response(request: Request, response_id: str) -> dict[str, Any]:
        tenant = authorize(request)
        no_query(request)
        if not await run_in_threadpool(forget, deployment.engine, response_id, deployment.run_name(tenant)):
            raise not_found(response_id, "response_id")
        return {"id": response_id, "object": "response", "deleted": True}


def no_query(request: Any) -> None:
    """A stored response is given back whole: a query parameter (OpenAI's ``stream``, ``include``...) is a 400."""
    for name in request.query_params:
        raise ApiError(400, f"{name} is not served: a stored response is given back whole, once", param=name)


__all__ = ["add_response_routes"]
