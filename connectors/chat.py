"""The chat seam: the ``ChatModel`` protocol, ``load_chat`` and the one wrapper around every backend.

A backend implements ``complete(messages, **params) -> Completion`` (and, if it can do better than a
loop, ``complete_batch``; if it can send text while generating, ``stream``: ``connectors.streaming``).
Everything else — retries with backoff, the response cache, usage accounting per caller — lives once,
in ``ChatClient``.

Example:
    >>> from connectors import load_chat
    >>> chat = load_chat("fake/scripted", replies=["4"])
    >>> chat.complete("What is 2 + 2?").text
    '4'
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import logging
import random
import sqlite3
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from connectors.errors import ConfigError, ConnectorError, RateLimited
from connectors.streaming import StreamedCompletion
from connectors.tools import Tool, ToolCall
from connectors.types import Completion, Message, Usage, as_messages

log = logging.getLogger(__name__)

Prompt = Sequence[Message | Mapping[str, str]] | str
T = TypeVar("T")


@runtime_checkable
class ChatModel(Protocol):
    """A chat backend: one method, returning a frozen ``Completion``.

    A backend whose weights live on this machine and can take LoRA adapters says so with a class
    attribute ``serves_adapters = True`` (``LocalChat``, ``VLLMChat``); it then also has ``folder``
    (its base model's folder), ``adapters`` and ``load_adapter(name, folder)``, and serves an adapter
    with ``adapter=name`` per call. The attribute is optional, read with a default of False: the seam
    stays one method. Ask ``ChatClient.serves_adapters``, never the model's name.

    A backend that can send its answer while generating it also has ``stream(messages, **params) ->
    StreamedCompletion`` (``LocalChat``, ``OpenAIChat``, ``ScriptedChat``); ``ChatClient.stream`` answers
    through ``complete`` for one that has not. One that honours OpenAI's ``presence_penalty`` and
    ``frequency_penalty`` (or passes them on to its server) says ``takes_penalties = True``: a server
    refuses them for a model without it rather than drop them.

    Example:
        >>> from connectors.fakes import ScriptedChat
        >>> isinstance(ScriptedChat(["4"]), ChatModel), getattr(ScriptedChat(["4"]), "serves_adapters", False)
        (True, False)
    """

    name: str

    def complete(self, messages: Sequence[Message], **params: Any) -> Completion: ...


# provider prefix -> "module:attribute"; the attribute is called as attr(model_name, **kwargs).
PROVIDERS: dict[str, str] = {
    "openai": "connectors.openai_chat:OpenAIChat",
    "local": "connectors.local_chat:LocalChat",
    "vllm": "connectors.vllm_chat:VLLMChat",
    "fake": "connectors.fakes:fake_chat",
    "langchain": "connectors.langchain_chat:LangChainChat",  # load_chat("langchain/<label>", model=<chat model>)
    "a2a": "connectors.a2a_chat:a2a_chat",  # load_chat("a2a/http://host:port", api_key_env=...): a remote A2A agent
}


def load_chat(spec: str, *, cache: ResponseCache | None = None, retries: int = 3, **kwargs: Any) -> ChatClient:
    """Build a chat model from ``"provider/model"`` and wrap it in a ``ChatClient``.

    Args:
        spec: an explicit provider prefix and a model name, e.g. ``"openai/gpt-4o-mini"``,
            ``"local/smollm2"``, ``"fake/scripted"``.
        cache: an optional response cache shared by callers.
        retries: how many times a retryable failure is retried.
        **kwargs: passed to the backend's constructor (``base_url``, ``api_key``, ``replies``, ...).
    """
    if not isinstance(spec, str) or "/" not in spec:
        raise ConfigError(
            f"chat model spec must look like 'provider/model' (providers: {sorted(PROVIDERS)}), got {spec!r}"
        )
    provider, model = spec.split("/", 1)
    target = PROVIDERS.get(provider)
    if target is None:
        raise ConfigError(f"unknown chat provider {provider!r} in {spec!r}; expected one of {sorted(PROVIDERS)}")
    factory = load_attr(target)
    return ChatClient(factory(model, **kwargs), cache=cache, retries=retries)


def load_attr(target: str) -> Any:
    """Import ``"module:attribute"`` lazily (heavy backends load only when asked for)."""
    module_name, attr = target.split(":")
    return getattr(importlib.import_module(module_name), attr)


def request_key(model: str, messages: Sequence[Message], params: Mapping[str, Any], sample_index: int = 0) -> str:
    """sha256 of the canonical JSON of one request; several samples of one prompt get distinct keys."""
    payload = {
        "model": model,
        "messages": [m.to_dict() for m in messages],
        "params": {k: _canonical(params[k]) for k in sorted(params)},
        "sample_index": sample_index,
    }
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _canonical(value: Any) -> Any:
    """A request parameter as JSON: tools by their schema (not the Python function behind them)."""
    if isinstance(value, Tool):
        return value.spec()
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def _per_prompt(params: dict[str, Any], tools_each: Sequence[Sequence[Tool]] | None, n: int) -> list[dict[str, Any]]:
    """Every prompt's parameters: ``params``, with its own ``tools`` from ``tools_each`` (a prompt with
    none gets neither ``tools`` nor ``tool_choice``)."""
    if tools_each is None:
        return [params] * n
    if "tools" in params:
        raise ConfigError("give tools= (one list for every prompt) or tools_each= (one per prompt), not both")
    if isinstance(tools_each, (str, Tool)) or len(tools_each) != n:
        raise ConfigError(f"tools_each must hold one list of Tool per prompt ({n}), got {tools_each!r:.120}")
    return [{**params, "tools": list(t)} if t else _without_tools(params) for t in tools_each]


def _without_tools(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k not in ("tools", "tool_choice")}


class ResponseCache:
    """A thread-safe response cache: in memory, or in a SQLite file when ``path`` is given."""

    def __init__(self, path: str | Path | None = None) -> None:
        self._lock = threading.Lock()
        self._mem: dict[str, Completion] = {}
        self._db: sqlite3.Connection | None = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), check_same_thread=False)
            self._db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, body TEXT NOT NULL)")

    def get(self, key: str) -> Completion | None:
        with self._lock:
            if key in self._mem:
                return self._mem[key]
            if self._db is None:
                return None
            row = self._db.execute("SELECT body FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        return completion_from_json(row[0])

    def put(self, key: str, completion: Completion) -> None:
        with self._lock:
            self._mem[key] = dataclasses.replace(completion, cached=True)  # what a later get() returns
            if self._db is not None:
                self._db.execute(
                    "INSERT OR REPLACE INTO responses (key, body) VALUES (?, ?)", (key, completion_to_json(completion))
                )
                self._db.commit()


def completion_to_json(c: Completion) -> str:
    return json.dumps(
        {
            "text": c.text,
            "model": c.model,
            "usage": [c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.cost],
            "logprobs": list(c.logprobs) if c.logprobs is not None else None,
            "finish_reason": c.finish_reason,
            "tool_calls": [{"id": t.id, "name": t.name, "arguments": dict(t.arguments)} for t in c.tool_calls],
            "tool_problems": list(c.tool_problems),
            "tokens": list(c.tokens) if c.tokens is not None else None,
        },
        ensure_ascii=False,
    )


def completion_from_json(body: str) -> Completion:
    d = json.loads(body)
    p, c, cost = d["usage"]
    logprobs = tuple(d["logprobs"]) if d.get("logprobs") is not None else None
    calls = tuple(ToolCall(t["name"], t["arguments"], id=t["id"]) for t in d.get("tool_calls") or ())
    return Completion(
        d["text"], d["model"], Usage(p, c, cost), logprobs, d.get("finish_reason"), cached=True,
        tool_calls=calls, tool_problems=tuple(d.get("tool_problems") or ()),
        tokens=tuple(d["tokens"]) if d.get("tokens") is not None else None,
    )  # fmt: skip


class ChatClient:
    """The wrapper every backend goes through: retries, cache and usage accounting per caller.

    ``seed`` (when given) is offset by ``sample_index`` so that several samples of one prompt differ
    and each lands on its own cache line.

    A retryable failure is retried up to ``retries`` times, after an exponential backoff with jitter
    (``backoff`` · 2^attempt, at most ``max_backoff``) or the provider's ``Retry-After`` when longer. A
    ``Retry-After`` over ``max_retry_after`` seconds is not slept through: the ``RateLimited`` goes to the
    caller at once (a loop should mark that attempt failed, not stall for an hour).

    Example:
        >>> from connectors.fakes import ScriptedChat
        >>> chat = ChatClient(ScriptedChat(["hi"]))
        >>> chat.complete("hello", caller="greeter").text, chat.usage_by_caller["greeter"].total_tokens > 0
        ('hi', True)
    """

    def __init__(
        self,
        backend: ChatModel,
        *,
        cache: ResponseCache | None = None,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        max_retry_after: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if retries < 0:
            raise ConfigError(f"retries must be >= 0, got {retries}")
        self.backend = backend
        self.name = backend.name
        self.cache = cache
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after
        self._sleep = sleep
        self._lock = threading.Lock()
        self.usage_by_caller: dict[str, Usage] = defaultdict(Usage)
        self.calls = 0

    @property
    def serves_adapters(self) -> bool:
        """Whether the backend can take LoRA adapters trained here (its optional ``serves_adapters``).

        Example:
            >>> from connectors.fakes import ScriptedChat
            >>> ChatClient(ScriptedChat(["hi"])).serves_adapters
            False
        """
        # `is True`, not truthiness: a test double's auto-created attribute is no capability
        return getattr(self.backend, "serves_adapters", False) is True

    @property
    def usage(self) -> Usage:
        """Everything spent through this client, all callers together."""
        total = Usage()
        for u in list(self.usage_by_caller.values()):
            total = total + u
        return total

    def complete(
        self, messages: Prompt, *, sample_index: int = 0, caller: str = "default", **params: Any
    ) -> Completion:
        """One answer for one prompt (a string, dicts or ``Message``s)."""
        return self.complete_batch([messages], sample_index=sample_index, caller=caller, **params)[0]

    def stream(
        self, messages: Prompt, *, sample_index: int = 0, caller: str = "default", **params: Any
    ) -> StreamedCompletion:
        """One answer as it is generated: iterate for the text deltas, then read ``.completion``.

        Opening the stream waits for its first delta, so a failure before any text is raised here, and a
        retryable one is retried as ``complete`` retries; once text has come, nothing is retried (a
        failure mid-stream reaches the reader). The usage is accounted when the stream ends or is closed
        (then: what was generated), and the response cache is not used. A request with ``tools`` or
        ``tool_choice``, or a backend without ``stream`` (vLLM, LangChain, the replay fake), is answered by
        ``complete`` and comes as one delta: every parameter is honoured, only the text comes at once.

        Example:
            >>> from connectors.fakes import ScriptedChat
            >>> stream = ChatClient(ScriptedChat(["It is 4471."])).stream("Harbor code?", caller="solver")
            >>> list(stream), stream.completion.finish_reason
            (['It ', 'is ', '4471.'], 'stop')
        """
        msgs = as_messages(messages)
        opener = getattr(self.backend, "stream", None)
        if opener is None or "tools" in params or "tool_choice" in params:
            return StreamedCompletion.whole(self.complete(msgs, sample_index=sample_index, caller=caller, **params))
        call_params = dict(params)
        if call_params.get("seed") is not None:
            call_params["seed"] = int(call_params["seed"]) + sample_index
        stream: StreamedCompletion = self._with_retries(lambda: opener(msgs, **call_params).start())
        stream.on_end(lambda c: self._account(caller, c.usage))
        return stream

    def complete_batch(
        self,
        prompts: Sequence[Prompt],
        *,
        sample_index: int = 0,
        caller: str = "default",
        tools_each: Sequence[Sequence[Tool]] | None = None,
        **params: Any,
    ) -> list[Completion]:
        """Answers for many prompts; backends with ``complete_batch`` generate them together.

        ``tools_each`` (one list of ``Tool`` per prompt, in place of ``tools=``) gives every prompt its
        own tools: a backend that says ``tools_each = True`` still generates them in one batch, any
        other answers them one by one with ``tools=`` its own list.
        """
        msgs = [as_messages(p) for p in prompts]
        call_params = dict(params)
        if "seed" in call_params and call_params["seed"] is not None:
            call_params["seed"] = int(call_params["seed"]) + sample_index
        each = _per_prompt(call_params, tools_each, len(msgs))
        keys = [request_key(self.name, m, p, sample_index) for m, p in zip(msgs, each, strict=True)]
        out: list[Completion | None] = [self.cache.get(k) if self.cache else None for k in keys]
        todo = [i for i, c in enumerate(out) if c is None]
        if todo:
            fresh = self._with_retries(
                lambda: self._call_backend(
                    [msgs[i] for i in todo], call_params, None if tools_each is None else [each[i] for i in todo]
                )
            )
            for i, c in zip(todo, fresh, strict=True):
                out[i] = c
                if self.cache is not None:
                    self.cache.put(keys[i], c)
                self._account(caller, c.usage)
        return [c for c in out if c is not None]

    def _call_backend(
        self, batch: list[list[Message]], params: dict[str, Any], each: list[dict[str, Any]] | None = None
    ) -> list[Completion]:
        """The backend's answers; ``each`` holds every prompt's own parameters (its tools) when given."""
        batch_fn = getattr(self.backend, "complete_batch", None)
        if each is not None and batch_fn is not None and getattr(self.backend, "tools_each", False) is True:
            # params hold no tools (_per_prompt refuses both); tool_choice stays: it applies to every prompt
            result = list(batch_fn(batch, tools_each=[p.get("tools", []) for p in each], **params))
        elif each is not None:
            result = [self.backend.complete(m, **p) for m, p in zip(batch, each, strict=True)]
        elif batch_fn is not None and len(batch) > 1:
            result = list(batch_fn(batch, **params))
        else:
            result = [self.backend.complete(m, **params) for m in batch]
        if len(result) != len(batch):
            raise ConnectorError(f"{self.name}: backend returned {len(result)} completions for {len(batch)} prompts")
        return result

    def _with_retries(self, fn: Callable[[], T]) -> T:
        attempt = 0
        while True:
            try:
                return fn()
            except ConnectorError as e:
                if not e.retryable or attempt >= self.retries:
                    raise
                delay = min(self.max_backoff, self.backoff * 2**attempt) * (0.5 + random.random() / 2)
                if isinstance(e, RateLimited) and e.retry_after is not None:
                    if e.retry_after > self.max_retry_after:
                        raise
                    delay = max(delay, e.retry_after)
                log.warning("%s: %s; retry %d/%d in %.1fs", self.name, e, attempt + 1, self.retries, delay)
                self._sleep(delay)
                attempt += 1

    def _account(self, caller: str, usage: Usage) -> None:
        with self._lock:
            self.usage_by_caller[caller] = self.usage_by_caller[caller] + usage
            self.calls += 1
