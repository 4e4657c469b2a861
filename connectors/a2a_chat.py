"""``a2a/<url>``: a remote A2A agent behind the ``ChatModel`` seam, so a team member can be another team.

``load_chat("a2a/http://host:8000", api_key_env="CODES_A2A_KEY")`` resolves the agent's card (public, at
``<url>/.well-known/agent-card.json``) on the first call and talks to it with the official ``a2a-sdk``
client over the JSON-RPC binding. ``complete(messages)`` sends one A2A message and waits for the task it
starts to end:

- the conversation's last user turn is the message's text (its speaker's ``name``, if any, in
  ``evolve.name``); the turns before it (the local agent's system prompt included) go along in the
  message's metadata under ``evolve.context`` as ``[{"role", "content", "name"?}]``: an Evolve A2A
  server (``evolve a2a``) answers them as ``evolve serve`` answers a conversation, and recalls its memory
  by the last turn alone; another A2A agent sees the last turn only;
- ``temperature``, ``top_p``, ``max_tokens``, ``seed``, ``stop`` and the presence and frequency penalties
  go in ``evolve.params``: an Evolve server applies them to its team; anything else a model call may take
  (``tools``, ``response_format``, ``logprobs``, an adapter) cannot travel over A2A and is a
  ``ConfigError``, never dropped;
- the answer is the text of the completed task's artifacts (a reply that is a message: its text); the
  usage an Evolve server reports (``evolve.usage``) is counted, and an answer it marks cut
  (``evolve.finish_reason: "length"``) keeps ``finish_reason="length"``.

Errors, by how the caller recovers: no connection or a 5xx → a retryable ``ConnectorError``; a timeout →
``ProviderTimeout``; 429 → ``RateLimited``; 401/403 → a ``ConnectorError`` that names the key's variable,
never the key; a task that failed → a ``ConnectorError`` that recovers as the remote team's model failure
did (``evolve.error`` on the task: its kind and ``retryable``); a refusal (JSON-RPC error) → not retryable.

Every call runs on one process-wide event-loop thread (the SDK is async; ``complete`` is not), so it
works from any thread, a server's worker threads included. ``load_chat`` reuses one client per (url, key,
timeout): a card is fetched once and connections are kept.

Needs the ``a2a`` extra (``pip install -e '.[a2a]'``).

Example:
    >>> chat = load_chat("a2a/http://127.0.0.1:8100", api_key_env="CODES_A2A_KEY")   # doctest: +SKIP
    >>> chat.complete("What is the door code of the Harbor warehouse?").text         # doctest: +SKIP
    'The door code is 4471.'
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import threading
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from connectors.errors import ConfigError, ConnectorError, ProviderTimeout, RateLimited
from connectors.install import extra_hint
from connectors.openai_chat import parse_retry_after
from connectors.redact import redact
from connectors.types import Completion, Message, Usage

INSTALL_HINT = extra_hint("a2a")
DEFAULT_TIMEOUT = 120.0

# The wire contract between this client and an Evolve A2A server (evolve.serve.protocols.a2a): metadata keys.
CONTEXT_KEY = "evolve.context"  # message: the turns before the last user turn, [{"role", "content", "name"?}]
NAME_KEY = "evolve.name"  # message: who speaks the last user turn (a message's name), when it is named
PARAMS_KEY = "evolve.params"  # message: sampling parameters for the remote team
RESPONSE_ID_KEY = "evolve.response_id"  # task and artifact: the Evolve response id, the handle for ratings
USAGE_KEY = "evolve.usage"  # task: {"prompt_tokens", "completion_tokens"} the team spent
ERROR_KEY = "evolve.error"  # failed task: {"kind": "RateLimited" | "ProviderTimeout" | ..., "retryable"}
FINISH_KEY = "evolve.finish_reason"  # completed task and artifact: "length" when max_tokens cut the answer
SAMPLING = ("temperature", "top_p", "max_tokens", "seed", "stop", "presence_penalty", "frequency_penalty")

T = TypeVar("T")


class EventLoopThread:
    """One daemon thread running an asyncio loop; ``run`` waits for a coroutine on it from any thread.

    Example:
        >>> async def two() -> int:
        ...     return 2
        >>> EventLoopThread("doc-a2a").run(two(), timeout=5)
        2
    """

    _shared: EventLoopThread | None = None
    _shared_lock = threading.Lock()

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()
        self._closers: list[Callable[[], Awaitable[Any]]] = []

    @classmethod
    def shared(cls) -> EventLoopThread:
        """The process's A2A loop, started on first use and stopped (its clients closed) when the process exits."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls("evolve-a2a")
                atexit.register(cls._shared.stop)
            return cls._shared

    def on_stop(self, close: Callable[[], Awaitable[Any]]) -> None:
        """Await ``close()`` on the loop when it stops (an HTTP client's ``aclose``)."""
        self._closers.append(close)

    def stop(self) -> None:
        """Close what registered with ``on_stop``, then end the loop's thread."""

        async def close_all() -> None:
            for close in self._closers:
                with contextlib.suppress(Exception):
                    await close()

        if self.loop.is_running():
            with contextlib.suppress(Exception):
                self.run(close_all(), timeout=5)
            self.loop.call_soon_threadsafe(self.loop.stop)

    def run(self, coro: Coroutine[Any, Any, T], *, timeout: float) -> T:
        """The coroutine's result; it is cancelled after ``timeout`` seconds (``TimeoutError``)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer in {timeout:g} s") from None


class A2AChat:
    """A remote A2A agent as a chat model (``load_chat("a2a/<url>", ...)``).

    Args:
        url: the agent's base URL (``http://host:port``): its card is at ``<url>/.well-known/agent-card.json``.
        api_key: the bearer key the agent expects (default: from ``api_key_env``; none for an open agent).
        api_key_env: the environment variable holding the key (read once, here; never logged).
        timeout: seconds one answer may take, the remote team's work included.

    Example:
        >>> chat = A2AChat("http://127.0.0.1:8100", api_key="sk-codes-7f3a")
        >>> chat.name
        'a2a/http://127.0.0.1:8100'
    """

    takes_penalties = True  # sent in evolve.params, which an Evolve agent applies to its team

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"an A2A agent's URL must look like http://host:port, got {url!r:.120}")
        if not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
            raise ConfigError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        self.url = url.rstrip("/")
        self.name = f"a2a/{self.url}"
        self.timeout = float(timeout)
        self.key_hint = f"check the key in ${api_key_env}" if api_key_env else "check the api_key given"
        self._key = api_key if api_key is not None else _key_from(api_key_env)
        self._client: Any = None
        self._opening: asyncio.Lock | None = None

    def __repr__(self) -> str:
        return f"A2AChat({self.url!r}, timeout={self.timeout:g})"  # never the key

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (to run on other processes) without its client; the copy opens its own."""
        return {**self.__dict__, "_client": None, "_opening": None}

    def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        """The remote agent's answer to the conversation's last user turn (earlier turns as context);
        ``params`` may set the ``SAMPLING`` parameters. A completed task whose ``evolve.finish_reason`` is
        ``length`` (its ``max_tokens`` cut it) comes back with that ``finish_reason``.

        Raises:
            ConfigError: no user turn, or a parameter an A2A agent cannot take (tools, response_format...).
            ConnectorError: the agent could not be reached, refused the message, or its task failed.
        """
        given = {k: v for k, v in params.items() if v is not None and v is not False}
        refused = sorted(set(given) - set(SAMPLING))
        if refused:
            raise ConfigError(
                f"{self.name}: an A2A agent takes none of {refused}; a remote team member answers text "
                f"and may be given {list(SAMPLING)} (sent to an Evolve agent in {PARAMS_KEY!r})"
            )
        message = a2a_message(messages, given)
        try:
            return EventLoopThread.shared().run(self._ask(message), timeout=self.timeout + 5)
        except ConnectorError:
            raise
        except Exception as e:  # the SDK's errors and httpx's, whichever way they come
            raise self._translate(e) from e

    async def _ask(self, message: Any) -> Completion:
        from a2a.types import SendMessageRequest, TaskState

        client = await self._ready()
        last = None
        async for event in client.send_message(SendMessageRequest(message=message)):
            last = event
        if last is None:
            raise ConnectorError(f"{self.name}: the agent sent no reply", retryable=True)
        if last.HasField("message"):
            return Completion(_text(last.message.parts), self.name, finish_reason="stop")
        task = last.task
        waited = 0.0
        while task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING):
            if waited > self.timeout:  # an agent that answers before its task ends: poll it
                raise ProviderTimeout(f"{self.name}: task {task.id} did not end in {self.timeout:g} s")
            await asyncio.sleep(0.2)
            waited += 0.2
            task = await client.get_task(_get(task.id))
        return self._answer(task)

    async def _ready(self) -> Any:
        """The SDK client, made on first use from the agent's card."""
        if self._client is None:
            if self._opening is None:
                self._opening = asyncio.Lock()  # every call runs on the one loop: made once
            async with self._opening:
                if self._client is None:
                    self._client = await self._open()
        return self._client

    async def _open(self) -> Any:
        import httpx
        from a2a.client import A2ACardResolver, ClientConfig, ClientFactory

        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(self.timeout, connect=min(10.0, self.timeout)))
        try:
            card = await A2ACardResolver(http, self.url).get_agent_card()
        except BaseException:
            await http.aclose()
            raise
        EventLoopThread.shared().on_stop(http.aclose)
        return ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)

    def _answer(self, task: Any) -> Completion:
        """A finished task as a completion, or the error its end says."""
        from a2a.types import TaskState
        from google.protobuf.json_format import MessageToDict

        meta = MessageToDict(task.metadata)
        if task.status.state != TaskState.TASK_STATE_COMPLETED:
            state = TaskState.Name(task.status.state).removeprefix("TASK_STATE_").lower()
            why = _text(task.status.message.parts) or "no reason given"
            raise remote_failure(f"{self.name}: task {task.id} ended {state}: {why}", meta.get(ERROR_KEY))
        text = "\n".join(t for t in (_text(a.parts) for a in task.artifacts) if t)
        if not text and task.status.HasField("message"):
            text = _text(task.status.message.parts)
        used = meta.get(USAGE_KEY) or {}
        usage = Usage(int(used.get("prompt_tokens", 0)), int(used.get("completion_tokens", 0)))
        finish = "length" if meta.get(FINISH_KEY) == "length" else "stop"
        return Completion(text, self.name, usage, finish_reason=finish)

    def _translate(self, error: Exception) -> ConnectorError:
        """Our error for the SDK's (or httpx's, or the loop's), shaped by how the caller recovers."""
        import httpx
        from a2a.client import A2AClientError, A2AClientTimeoutError, AgentCardResolutionError

        cause = error.__cause__
        detail = redact(getattr(error, "message", None) or error, [self._key])
        if isinstance(error, (TimeoutError, A2AClientTimeoutError)) or isinstance(cause, httpx.TimeoutException):
            return ProviderTimeout(f"{self.name}: the agent did not answer in time ({detail})")
        status = cause.response.status_code if isinstance(cause, httpx.HTTPStatusError) else None
        if isinstance(error, AgentCardResolutionError) and error.status_code is not None:
            status = error.status_code
        if status in (401, 403):  # the server's text is dropped: some echo (part of) the key
            return ConnectorError(f"{self.name}: the agent refused the key (HTTP {status}); {self.key_hint}")
        if status == 429:
            headers = dict(cause.response.headers) if isinstance(cause, httpx.HTTPStatusError) else {}
            return RateLimited(f"{self.name}: rate limited: {detail}", retry_after=parse_retry_after(headers))
        if status is not None:
            return ConnectorError(f"{self.name}: HTTP {status}: {detail}", retryable=status >= 500)
        if isinstance(cause, httpx.RequestError) or isinstance(error, AgentCardResolutionError):
            return ConnectorError(f"{self.name}: cannot reach the agent ({detail})", retryable=True)
        if isinstance(error, A2AClientError):
            return ConnectorError(f"{self.name}: {detail}", retryable=True)
        return ConnectorError(f"{self.name}: the agent refused the message: {detail}", retryable=False)


def a2a_message(messages: Sequence[Message], params: Mapping[str, Any]) -> Any:
    """The A2A user message for a conversation: its last user turn as text, earlier turns and ``params``
    in the metadata."""
    from a2a.types import Message as A2AMessage
    from a2a.types import Part, Role

    users = [i for i, m in enumerate(messages) if m.role == "user"]
    if not users or not messages[users[-1]].content.strip():
        raise ConfigError("an A2A agent answers the conversation's last user turn; there is none (or it is empty)")
    last = users[-1]
    earlier = [context_turn(m) for i, m in enumerate(messages) if i != last and m.content]
    metadata: dict[str, Any] = {}
    if earlier:
        metadata[CONTEXT_KEY] = earlier
    if messages[last].name:
        metadata[NAME_KEY] = messages[last].name
    if params:
        metadata[PARAMS_KEY] = {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in params.items()}
    return A2AMessage(
        role=Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        parts=[Part(text=messages[last].content)],
        metadata=metadata or None,
    )


def context_turn(m: Message) -> dict[str, str]:
    """One earlier turn as ``evolve.context`` holds it: role, content and the speaker's name when it has one."""
    return {"role": m.role, "content": m.content} | ({"name": m.name} if m.name else {})


def remote_failure(message: str, error: object) -> ConnectorError:
    """A failed task's error: as the remote team's model failure was (``evolve.error``), else retryable."""
    info = error if isinstance(error, Mapping) else {}
    if info.get("kind") == "RateLimited":
        after = info.get("retry_after")
        return RateLimited(message, retry_after=float(after) if isinstance(after, (int, float)) else None)
    if info.get("kind") == "ProviderTimeout":
        return ProviderTimeout(message)
    return ConnectorError(message, retryable=bool(info.get("retryable", True)))


def _text(parts: Sequence[Any]) -> str:
    return "".join(p.text for p in parts if p.HasField("text"))


def _get(task_id: str) -> Any:
    from a2a.types import GetTaskRequest

    return GetTaskRequest(id=task_id)


def _key_from(variable: str | None) -> str | None:
    if variable is None:
        return None
    key = os.environ.get(variable)
    if not key:
        raise ConfigError(f"the A2A agent's key variable ${variable} is not set (a2a_key_env names it)")
    return key


_CLIENTS: dict[tuple[str, str | None, float], A2AChat] = {}
_CLIENTS_LOCK = threading.Lock()


def a2a_chat(
    url: str, *, api_key: str | None = None, api_key_env: str | None = None, timeout: float = DEFAULT_TIMEOUT
) -> A2AChat:
    """``load_chat``'s factory for ``a2a/<url>``: one ``A2AChat`` per (url, key, timeout) in the process, so a
    team built per request (``Deployment``) keeps its card and connections."""
    try:
        import a2a.client  # noqa: F401
    except ImportError as e:
        raise ConfigError(f"the a2a/… chat provider needs the a2a-sdk from the 'a2a' extra: {INSTALL_HINT}") from e
    chat = A2AChat(url, api_key=api_key, api_key_env=api_key_env, timeout=timeout)
    with _CLIENTS_LOCK:
        return _CLIENTS.setdefault((chat.url, chat._key, chat.timeout), chat)


__all__ = [
    "CONTEXT_KEY", "ERROR_KEY", "FINISH_KEY", "NAME_KEY", "PARAMS_KEY", "RESPONSE_ID_KEY", "SAMPLING", "USAGE_KEY",
    "A2AChat", "EventLoopThread", "a2a_chat", "a2a_message", "remote_failure",
]  # fmt: skip
