"""The work behind ``evolve a2a``: what an A2A message asks, and the executor that does it with a ``Deployment``.

``MessageReader`` reads every message before the SDK makes a task of it, so what is wrong is a JSON-RPC
error and leaves no task behind: parts other than text and data (``ContentTypeNotSupportedError``), no
text to answer, malformed ``evolve.context`` / ``evolve.params`` metadata (``InvalidParamsError``), a
rating of a task this tenant does not own (``TaskNotFoundError``, as for a task that never existed).

``TeamExecutor`` then either

- answers: the task is made (``submitted``), set ``working``, the tenant's team answers in a worker thread
  (``Deployment.answer``; for ``SendStreamingMessage`` ``Deployment.stream``, whose text goes out as
  appended chunks of the ``answer`` artifact while it is generated), the whole answer replaces the
  artifact (``append: false``, ``lastChunk: true``) and the task completes. A long answer need not hold
  a connection open: ``SendMessage`` with ``returnImmediately`` gets the task back at once, which
  ``GetTask`` shows ``working`` until it completes. The task's metadata and the artifact's carry the
  response id (``evolve.response_id``) and why the answer ended (``evolve.finish_reason``: ``length``
  when ``max_tokens`` cut it, and the completed status's message then says so; else ``stop``), the
  task's the usage (``evolve.usage``) and prompt version. A conversation's earlier turns come from the
  message's ``evolve.context`` or else from this tenant's earlier tasks in the same ``contextId``. A
  model failure fails the task (a parameter the team cannot take rejects it) with the reason as its
  status message and ``evolve.error`` (kind, ``retryable``) in its metadata;
- or rates: a message whose data part holds ``{"rating": 0..1, "comment"?, "key"?}`` (or whose metadata
  holds ``evolve.rating``) rates the task it refers to (``referenceTaskIds: [<task>]``; a rating sent on
  the finished task itself is moved there), or the response named by the data's ``response_id``. It goes
  to ``Deployment.feedback``: exactly the memories that answer recalled are reinforced, once per (task,
  key); the reply is a message whose data part is the receipt (``applied``, ``reinforced``, ``reward``).

Example:
    >>> rating_of_data({"rating": 0.9, "comment": "right code"}).score
    0.9
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from connectors import ConfigError, ConnectorError, Message, ParseError, RateLimited
from connectors.a2a_chat import (
    CONTEXT_KEY,
    ERROR_KEY,
    FINISH_KEY,
    NAME_KEY,
    PARAMS_KEY,
    RESPONSE_ID_KEY,
    SAMPLING,
    USAGE_KEY,
)
from connectors.install import extra_hint
from evolve.serve.answers import Answer, UnknownResponse
from evolve.serve.deployment import Deployment
from evolve.serve.feedback import check_score

try:
    import anyio
    from a2a.helpers import get_data_parts, new_data_part, new_task_from_user_message
    from a2a.server.agent_execution import AgentExecutor, RequestContext, SimpleRequestContextBuilder
    from a2a.server.context import ServerCallContext
    from a2a.server.events import EventQueue
    from a2a.server.tasks import TaskStore, TaskUpdater
    from a2a.types import ListTasksRequest, Part, Role, Task, TaskState
    from a2a.types import Message as A2AMessage
    from a2a.types import SendMessageRequest as A2ARequest
    from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError, TaskNotFoundError
    from google.protobuf.json_format import MessageToDict
except ImportError as e:  # the optional extra is missing: say which one
    raise ConfigError(f"evolve a2a needs the a2a-sdk with its HTTP server: {extra_hint('a2a')}") from e

log = logging.getLogger(__name__)

RATING_KEY = "evolve.rating"  # message metadata: a rating (a number in [0, 1]) of the referenced task
ANSWER = "answer"  # the artifact's name
STREAMING = ("SendStreamingMessage", "message/stream")  # the JSON-RPC methods that stream (v1.0, v0.3)
_ASK, _RATE = "evolve.ask", "evolve.rate"  # where the reader leaves what it read, in the call's state
ROLES = ("system", "user", "assistant")
CUT = "The answer was cut off at its token limit (max_tokens): ask again with a larger max_tokens in evolve.params."


@dataclasses.dataclass(frozen=True)
class Ask:
    """A message to answer: its text, the earlier turns it came with (None: take the context's), parameters, and
    who speaks it (``evolve.name``)."""

    text: str
    earlier: tuple[Message, ...] | None
    params: Mapping[str, Any]
    name: str | None = None

    def message(self) -> Message:
        return Message("user", self.text, name=self.name)


@dataclasses.dataclass(frozen=True)
class Rating:
    """A rating of one served answer (``response_id``) and the task it came from, if it was named."""

    score: float
    comment: str = ""
    key: str | None = None
    response_id: str | None = None
    task_id: str | None = None


def rating_of_data(data: Mapping[str, Any]) -> Rating:
    """A rating from a data part ``{"rating", "comment"?, "key"?, "response_id"?}``; InvalidParamsError if malformed."""
    unknown = sorted(set(data) - {"rating", "comment", "key", "response_id"})
    comment, key, response = data.get("comment", ""), data.get("key"), data.get("response_id")
    problem = f"unknown fields {unknown}" if unknown else ""
    if not isinstance(comment, str) or len(comment) > 20_000:
        problem = "comment must be a string of at most 20000 characters"
    if key is not None and not (isinstance(key, str) and 0 < len(key) <= 200 and key.isprintable()):
        problem = "key must be 1-200 printable characters"
    if response is not None and not isinstance(response, str):
        problem = "response_id must be a string"
    try:
        score = check_score(data.get("rating"))
    except ConfigError as e:
        problem = problem or str(e)
    if problem:
        raise InvalidParamsError(message=f'a rating is {{"rating": 0..1, "comment"?, "key"?}}: {problem}')
    return Rating(score, comment, key, response)


def rating_in(message: A2AMessage) -> Rating | None:
    """The rating a message carries (a data part with ``rating``, or ``evolve.rating`` metadata), else None;
    the message's text is its comment unless the data part gives one."""
    found = [d for d in get_data_parts(message.parts) if isinstance(d, dict) and "rating" in d]
    meta = MessageToDict(message.metadata)
    if not found and RATING_KEY not in meta:
        return None
    data = found[0] if found else {"rating": meta[RATING_KEY]}
    text = "\n".join(p.text for p in message.parts if p.HasField("text"))
    return rating_of_data({"comment": text, **data})


def check_parts(message: A2AMessage) -> None:
    """Text and data parts only: this agent reads nothing else."""
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind not in ("text", "data"):
            raise ContentTypeNotSupportedError(
                message=f"this agent reads text parts (and a data part with a rating), not a {kind} part"
            )


def ask_of(message: A2AMessage) -> Ask:
    """What a message to answer asks: its text, ``evolve.context`` turns, ``evolve.params`` and ``evolve.name``."""
    data = get_data_parts(message.parts)
    if data:  # not dropped unread: a question goes in a text part
        raise InvalidParamsError(
            message=f'this agent reads a data part only as a rating {{"rating": 0..1}}, got {data[0]!r:.80}'
        )
    text = "\n".join(p.text for p in message.parts if p.HasField("text"))
    if not text.strip():
        raise InvalidParamsError(message="the message has no text to answer (send a text part)")
    meta = MessageToDict(message.metadata)
    earlier = turns(meta[CONTEXT_KEY]) if CONTEXT_KEY in meta else None
    name = meta.get(NAME_KEY)
    if not is_name(name):
        raise InvalidParamsError(message=f"{NAME_KEY} must be the speaker's name, a non-empty string; got {name!r:.80}")
    return Ask(text, earlier, sampling(meta.get(PARAMS_KEY)), name)


def is_name(value: object) -> bool:
    """Whether ``value`` may be a message's speaker: absent, or a non-empty string."""
    return value is None or (isinstance(value, str) and bool(value.strip()))


def turns(raw: object) -> tuple[Message, ...]:
    """``evolve.context``: the earlier turns, ``[{"role": system|user|assistant, "content": str, "name"?: str}]``."""
    if not isinstance(raw, list) or not all(
        isinstance(t, dict) and t.get("role") in ROLES and isinstance(t.get("content"), str) and is_name(t.get("name"))
        for t in raw
    ):
        raise InvalidParamsError(
            message=f'{CONTEXT_KEY} must be a list of {{"role": {"|".join(ROLES)}, "content", "name"?}}'
        )
    return tuple(Message(t["role"], t["content"], name=t.get("name")) for t in raw)


def sampling(raw: object) -> dict[str, Any]:
    """``evolve.params``: sampling parameters for the team (JSON numbers arrive as floats)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or set(raw) - set(SAMPLING):
        raise InvalidParamsError(message=f"{PARAMS_KEY} may set {list(SAMPLING)}, got {raw!r:.120}")
    out = {name: _checked(name, value) for name, value in raw.items()}
    wrong = [f"{name}={raw[name]!r:.40}" for name, value in out.items() if value is None]
    if wrong:
        raise InvalidParamsError(message=f"{PARAMS_KEY}: out of range or of the wrong type: {', '.join(wrong)}")
    return out


def _checked(name: str, value: object) -> object | None:
    """One sampling parameter as the team takes it, or None when it is out of range or of the wrong type."""
    if name == "stop":
        ok = isinstance(value, str) or (isinstance(value, list) and all(isinstance(s, str) for s in value))
        return value if ok else None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return None
    if name in ("max_tokens", "seed"):  # JSON numbers arrive as floats
        return int(value) if float(value).is_integer() and (name == "seed" or value >= 1) else None
    if name.endswith("_penalty"):  # OpenAI's range
        return float(value) if -2 <= value <= 2 else None
    return float(value) if value >= 0 and (name == "temperature" or value <= 1) else None


class MessageReader(SimpleRequestContextBuilder):
    """Reads each message before a task exists (see the module's docstring); leaves an ``Ask`` or a
    ``Rating`` in the call's state for ``TeamExecutor``."""

    def __init__(self, deployment: Deployment, store: TaskStore) -> None:
        super().__init__(should_populate_referred_tasks=True, task_store=store)
        self.deployment = deployment

    async def build(
        self,
        context: ServerCallContext,
        params: A2ARequest | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: Task | None = None,
    ) -> RequestContext:
        if params is None:
            return await super().build(context, params, task_id, context_id, task)
        message = params.message
        check_parts(message)
        rating = rating_in(message)
        if rating is not None and task_id:  # sent on the rated task, which has ended: a message of its own
            if task_id not in message.reference_task_ids:
                message.reference_task_ids.append(task_id)
            message.task_id, task_id = "", None
        if rating is None:
            context.state[_ASK] = ask_of(message)
        built = await super().build(context, params, task_id, context_id, task)
        if rating is not None:
            context.state[_RATE] = await self._rated(rating, message, built.related_tasks, tenant_of(context))
        return built

    async def _rated(self, rating: Rating, message: A2AMessage, related: Sequence[Task], tenant: str) -> Rating:
        """The rating with the response it rates, which this tenant owns (else: the task is not found)."""
        if rating.response_id is not None:
            try:
                await anyio.to_thread.run_sync(
                    functools.partial(self.deployment.response, rating.response_id, tenant=tenant)
                )
            except UnknownResponse:
                raise TaskNotFoundError from None
            return rating
        refs = list(message.reference_task_ids)
        if len(refs) != 1:
            raise InvalidParamsError(
                message="a rating names the one task it rates: referenceTaskIds=[<task id>] (or send it on that task), "
                f"or the response_id of its answer; got {len(refs)} references"
            )
        rated = next((t for t in related if t.id == refs[0]), None)
        if rated is None:
            raise TaskNotFoundError
        response_id = MessageToDict(rated.metadata).get(RESPONSE_ID_KEY)
        if not isinstance(response_id, str):
            state = TaskState.Name(rated.status.state).removeprefix("TASK_STATE_").lower()
            raise InvalidParamsError(message=f"task {rated.id} has no answer to rate (it is {state})")
        return dataclasses.replace(rating, response_id=response_id, task_id=rated.id)


def tenant_of(context: ServerCallContext) -> str:
    """The tenant the bearer key named (``evolve.serve.protocols.a2a``: the call's user)."""
    return context.user.user_name


class TeamExecutor(AgentExecutor):
    """Answers and rates with a ``Deployment`` (see the module's docstring); its blocking work runs in
    worker threads, never on the event loop.

    Args:
        deployment: the served team.
        store: the task store (owner-scoped: a tenant lists only its own tasks), for a context's earlier turns.
        history: the most earlier tasks of a context a new message sees.
    """

    def __init__(self, deployment: Deployment, store: TaskStore, *, history: int = 10) -> None:
        self.deployment = deployment
        self.store = store
        self.history = history

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        state = context.call_context.state
        if _RATE in state:
            await self._rate(context, state[_RATE], event_queue)
            return
        assert context.message is not None and context.task_id is not None and context.context_id is not None
        if context.current_task is None:
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work()
        ask: Ask = state[_ASK]
        tenant = tenant_of(context.call_context)
        artifact = str(uuid.uuid4())
        try:
            earlier = ask.earlier if ask.earlier is not None else await self._earlier(context)
            messages = [*earlier, ask.message()]
            if state.get("method") in STREAMING:
                answer = await self._stream(updater, artifact, messages, tenant, ask.params)
            else:
                run = functools.partial(self.deployment.answer, messages, tenant=tenant, params=ask.params)
                answer = await anyio.to_thread.run_sync(run)
        except Exception as e:  # every failure ends the task with its reason, never a traceback
            await fail(updater, e)
            return
        meta = {RESPONSE_ID_KEY: answer.id, FINISH_KEY: answer.finish_reason}
        await updater.add_artifact([Part(text=answer.text)], artifact, ANSWER, meta, append=False, last_chunk=True)
        said = updater.new_agent_message([Part(text=CUT)]) if answer.finish_reason == "length" else None
        await updater.update_status(TaskState.TASK_STATE_COMPLETED, said, metadata=answer_metadata(answer))

    async def _stream(
        self, updater: TaskUpdater, artifact: str, messages: list[Message], tenant: str, params: Mapping[str, Any]
    ) -> Answer:
        """The answer sent as appended chunks of the artifact while it is generated; the stream is closed
        (in a worker thread, even when the task is cancelled) whatever happens."""
        run = functools.partial(self.deployment.stream, messages, tenant=tenant, params=params)
        stream = await anyio.to_thread.run_sync(run)
        meta, first = {RESPONSE_ID_KEY: stream.id}, True
        try:
            while (delta := await anyio.to_thread.run_sync(next, stream, None)) is not None:
                await updater.add_artifact(
                    [Part(text=delta)], artifact, ANSWER, meta, append=not first, last_chunk=False
                )
                first = False
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(stream.close)
        if stream.answer is None:
            raise ConnectorError("the answer's stream ended without an answer")
        return stream.answer

    async def _earlier(self, context: RequestContext) -> list[Message]:
        """The tenant's earlier finished tasks in this context, oldest first, as user and assistant turns."""
        query = ListTasksRequest(context_id=context.context_id, include_artifacts=True, page_size=self.history + 1)
        page = await self.store.list(query, context.call_context)
        out: list[Message] = []
        for task in reversed(page.tasks):
            if task.id == context.task_id or task.status.state != TaskState.TASK_STATE_COMPLETED:
                continue
            asked = next((m for m in task.history if m.role == Role.ROLE_USER), None)
            said = "".join(p.text for a in task.artifacts for p in a.parts if p.HasField("text"))
            if asked is not None:
                name = MessageToDict(asked.metadata).get(NAME_KEY)  # checked when it was asked
                text = "\n".join(p.text for p in asked.parts if p.HasField("text"))
                out += [Message("user", text, name=name), Message("assistant", said)]
        return out[-2 * self.history :]

    async def _rate(self, context: RequestContext, rating: Rating, event_queue: EventQueue) -> None:
        """Reinforce what the rated answer recalled; the reply is a message with the receipt."""
        assert rating.response_id is not None
        feedback = functools.partial(
            self.deployment.feedback, rating.response_id, rating.score,
            tenant=tenant_of(context.call_context), comment=rating.comment, key=rating.key,
        )  # fmt: skip
        receipt = await anyio.to_thread.run_sync(feedback)
        said = (
            f"rating applied: {receipt.reinforced} recalled memories reinforced (reward {receipt.reward:+g})"
            if receipt.applied
            else "this rating was given before (same task and key): nothing changed"
        )
        body = {**dataclasses.asdict(receipt), "task_id": rating.task_id or ""}
        reply = A2AMessage(
            role=Role.ROLE_AGENT, message_id=str(uuid.uuid4()), context_id=context.context_id or "",
            parts=[Part(text=said), new_data_part(body)],
            reference_task_ids=[rating.task_id] if rating.task_id else [],
        )  # fmt: skip
        await event_queue.enqueue_event(reply)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel a running answer: a streamed one stops where it is (recorded with what was sent); a whole
        one ends its work in its worker thread first (recorded, never sent)."""
        assert context.task_id is not None and context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def answer_metadata(answer: Answer) -> dict[str, Any]:
    """What a completed task's metadata carries: the response id (the handle for ratings), usage, prompts."""
    u = answer.usage
    usage = {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens}
    return {RESPONSE_ID_KEY: answer.id, USAGE_KEY: usage, "evolve.prompt_version": answer.prompt_version,
            FINISH_KEY: answer.finish_reason}  # fmt: skip


async def fail(updater: TaskUpdater, error: Exception) -> None:
    """End the task for ``error``: rejected for a request the team cannot take, failed otherwise; the
    reason is its status message and ``evolve.error`` says how a caller recovers."""
    info: dict[str, Any] = {"kind": type(error).__name__, "retryable": False}
    if isinstance(error, ConfigError):
        state, said = TaskState.TASK_STATE_REJECTED, str(error)
    elif isinstance(error, ConnectorError):
        state, said = TaskState.TASK_STATE_FAILED, str(error)
        info = {"kind": type(error).__name__, "retryable": error.retryable}
        if isinstance(error, RateLimited) and error.retry_after is not None:
            info["retry_after"] = error.retry_after
    elif isinstance(error, ParseError):
        state, said = TaskState.TASK_STATE_FAILED, str(error)
    else:
        log.exception("an A2A task failed: %s: %s", type(error).__name__, error)
        state, said = TaskState.TASK_STATE_FAILED, "internal error (see the server's log)"
        info = {"kind": "internal", "retryable": False}
    await updater.update_status(state, updater.new_agent_message([Part(text=said)]), metadata={ERROR_KEY: info})


__all__ = [
    "ANSWER", "RATING_KEY", "Ask", "MessageReader", "Rating", "TeamExecutor", "answer_metadata", "ask_of",
    "check_parts", "rating_in", "rating_of_data", "sampling", "tenant_of", "turns",
]  # fmt: skip
