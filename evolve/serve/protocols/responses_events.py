"""A served answer as OpenAI's Responses API gives it: the response object (``response_body``) and, streamed, its
semantic events, numbered by ``sequence_number``.

The answering agent's text is one ``message`` output item with one ``output_text`` part; its calls to the app's
tools are ``function_call`` items (``call_id`` is the id the app's ``function_call_output`` answers). A stream
opens with ``response.created`` and ``response.in_progress``; each item is ``response.output_item.added``, then its
text (``response.content_part.added``, ``response.output_text.delta``..., ``response.output_text.done``,
``response.content_part.done``) or its arguments (``response.function_call_arguments.delta`` and ``.done``), then
``response.output_item.done``; it closes with ``response.completed``, ``response.incomplete`` (``max_output_tokens``
cut the answer, or the client went away: status ``cancelled``) or ``response.failed`` (the model failed after the
first delta). ``status`` says the same in the response object.

Example:
    >>> from connectors import Usage
    >>> from evolve.episode import Step
    >>> answer = Answer("resp_1f", "codes@acme", "It is 4471.", (Step("solver", (), "It is 4471."),), Usage(), "v1", 0)
    >>> body = response_body(Head(answer.id, 0, "codes", {}), status_of(answer), output_items(answer), answer)
    >>> body["status"], body["output"][0]["content"][0]["text"]
    ('completed', 'It is 4471.')
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from connectors import ConnectorError
from connectors.streaming import split_words
from evolve.serve.answers import Answer
from evolve.serve.streaming import AnswerStream

log = logging.getLogger(__name__)

Event = dict[str, Any]


@dataclass(frozen=True)
class Head:
    """What a response object states before its answer exists: its id, when it was made, the model and the
    request's settings (``ResponsesRequest.echo``)."""

    id: str
    created: int
    model: str
    echo: Mapping[str, Any]


def item_id(response_id: str, kind: str, index: int | None = None) -> str:
    """An output item's id (``msg_…``, ``fc_…``), made from the response's so that it is known before the answer."""
    key = response_id.split("_", 1)[-1]
    return f"{kind}_{key}" if index is None else f"{kind}_{key}_{index}"


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(response_id: str, text: str | None, status: str) -> dict[str, Any]:
    """The answer's text as a ``message`` item (no content while it is being opened: ``text`` None)."""
    content = [] if text is None else [text_part(text)]
    return {"type": "message", "id": item_id(response_id, "msg"), "role": "assistant", "status": status,
            "content": content}  # fmt: skip


def call_item(response_id: str, index: int, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A call to one of the app's tools as a ``function_call`` item; a call without an id gets one."""
    call_id = call_id or item_id(response_id, "call", index)
    return {"type": "function_call", "id": item_id(response_id, "fc", index), "call_id": call_id, "name": name,
            "arguments": arguments, "status": "completed"}  # fmt: skip


def output_items(answer: Answer) -> list[dict[str, Any]]:
    """The answer as output items: its calls to the app's tools, or else its text."""
    if answer.tool_calls:
        return [call_item(answer.id, i, c.id, c.name, c.arguments_json()) for i, c in enumerate(answer.tool_calls)]
    return [message_item(answer.id, answer.text, "completed" if status_of(answer) == "completed" else "incomplete")]


def status_of(answer: Answer) -> str:
    """``cancelled`` (the client went away mid-stream), ``incomplete`` (the token budget cut it) or ``completed``."""
    if answer.steps and answer.steps[-1].finish == "cancelled":
        return "cancelled"
    return "incomplete" if answer.finish_reason == "length" else "completed"


def usage_body(answer: Answer) -> dict[str, Any]:
    """The tokens every agent's model spent on the answer (no prompt cache, no reasoning tokens here)."""
    u = answer.usage
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.total_tokens,
    }


def response_body(
    head: Head,
    status: str,
    output: list[dict[str, Any]],
    answer: Answer | None = None,
    error: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """OpenAI's response object, plus the ``evolve`` extension (the recall ids and prompt version) once answered."""
    body: dict[str, Any] = {
        "id": head.id,
        "object": "response",
        "created_at": head.created,
        "status": status,
        "error": dict(error) if error is not None else None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "model": head.model,
        "output": output,
        "usage": usage_body(answer) if answer is not None else None,
        **head.echo,
    }
    if answer is not None:
        body["evolve"] = {"recall_ids": list(answer.recall_ids), "prompt_version": answer.prompt_version}
    return body


class Numbered:
    """Makes a stream's events: ``event(type, **fields)``, numbered from 0 by ``sequence_number``."""

    def __init__(self) -> None:
        self.sent = 0

    def __call__(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self.sent, **fields}
        self.sent += 1
        return event


CLOSING = {"completed": "response.completed", "failed": "response.failed"}  # else response.incomplete


def opening_events(event: Numbered, head: Head) -> Iterator[Event]:
    opened = response_body(head, "in_progress", [])
    yield event("response.created", response=opened)
    yield event("response.in_progress", response=opened)


def text_opening(event: Numbered, index: int, response_id: str) -> Iterator[Event]:
    item = message_item(response_id, None, "in_progress")
    yield event("response.output_item.added", output_index=index, item=item)
    at = {"item_id": item["id"], "output_index": index, "content_index": 0}
    yield event("response.content_part.added", **at, part=text_part(""))


def text_delta(event: Numbered, index: int, response_id: str, delta: str) -> Event:
    at = {"item_id": item_id(response_id, "msg"), "output_index": index, "content_index": 0}
    return event("response.output_text.delta", **at, delta=delta, logprobs=[])


def text_closing(event: Numbered, index: int, item: dict[str, Any]) -> Iterator[Event]:
    part = item["content"][0]
    at = {"item_id": item["id"], "output_index": index, "content_index": 0}
    yield event("response.output_text.done", **at, text=part["text"], logprobs=[])
    yield event("response.content_part.done", **at, part=part)
    yield event("response.output_item.done", output_index=index, item=item)


def call_events(event: Numbered, index: int, item: dict[str, Any]) -> Iterator[Event]:
    """One call as OpenAI streams it: the item with no arguments yet, its arguments, then the item done."""
    yield event(
        "response.output_item.added", output_index=index, item={**item, "arguments": "", "status": "in_progress"}
    )
    at = {"item_id": item["id"], "output_index": index}
    yield event("response.function_call_arguments.delta", **at, delta=item["arguments"])
    yield event("response.function_call_arguments.done", **at, name=item["name"], arguments=item["arguments"])
    yield event("response.output_item.done", output_index=index, item=item)


def finished_events(answer: Answer, head: Head) -> Iterator[Event]:
    """A finished answer (checked whole: tools or a format) as a stream: its text in word-sized deltas."""
    event = Numbered()
    yield from opening_events(event, head)
    output = output_items(answer)
    for index, item in enumerate(output):
        if item["type"] == "function_call":
            yield from call_events(event, index, item)
            continue
        yield from text_opening(event, index, answer.id)
        for piece in split_words(item["content"][0]["text"]):
            yield text_delta(event, index, answer.id, piece)
        yield from text_closing(event, index, item)
    body = response_body(head, status_of(answer), output, answer)
    yield event(CLOSING.get(body["status"], "response.incomplete"), response=body)


def streamed_events(stream: AnswerStream, head: Head, keep: Callable[[dict[str, Any]], None]) -> Iterator[Event]:
    """An answer being generated as a stream: one delta event per text delta as it comes. ``keep(body)`` is
    given the final response object before the client hears the answer is done, and, when the client goes away
    first, the one of the text sent so far (``cancelled``). Closing this generator closes the stream."""
    event, kept = Numbered(), False
    try:
        yield from opening_events(event, head)
        yield from text_opening(event, 0, stream.id)
        try:
            for delta in stream:
                yield text_delta(event, 0, stream.id, delta)
        except Exception as e:  # the status line is sent: all that is left is to say so in the stream
            yield event("response.failed", response=response_body(head, "failed", [], error=failure(e)))
            return
        answer = stream.answer
        assert answer is not None  # recorded when the deltas ended
        body = response_body(head, status_of(answer), output_items(answer), answer)
        keep(body)
        kept = True
        yield from text_closing(event, 0, body["output"][0])
        yield event(CLOSING.get(body["status"], "response.incomplete"), response=body)
    finally:
        stream.close()
        if not kept and stream.answer is not None:  # cut short: recorded with the text sent so far
            answer = stream.answer
            keep(response_body(head, status_of(answer), output_items(answer), answer))


def failure(e: Exception) -> dict[str, str]:
    """A response object's ``error`` for a failure mid-stream: the model's, or a generic one (logged)."""
    if isinstance(e, ConnectorError):
        return {"code": "server_error", "message": f"the answer failed while streaming: {e}"}
    log.exception("streaming a response failed")
    return {"code": "server_error", "message": "internal error while streaming (see the server's log)"}


__all__ = ["Head", "finished_events", "output_items", "response_body", "status_of", "streamed_events"]
