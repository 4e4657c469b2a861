"""Concurrent calls to an in-process model, answered together: requests that arrive within a few
milliseconds of each other with the same parameters become one batch.

A local model (``LocalChat``, ``VLLMChat``) answers one call at a time, but a batch of 16 prompts takes
little longer than one. ``Coalescing`` wraps such a backend for a server's threads: the first call for a
set of parameters waits until no other call has come for ``quiet`` seconds (at most ``window`` seconds in
all), takes every call queued with the same parameters by then
(their prompts in arrival order, each with its own tools on a backend that takes ``tools_each``) and asks
the backend once; calls that arrive while it runs form the next batch. A backend error reaches every
call of its batch. Calls that sample (``temperature`` > 0) share a batch only with the same ``seed``, so
a request's explicit seed is honoured; greedy calls ignore the seed and always share. A streamed answer
is not batched: ``stream`` is the backend's own (like every attribute but the two ``complete`` methods),
and it waits for a running batch only as long as the backend's lock makes it.

Example:
    >>> from connectors.fakes import ScriptedChat
    >>> chat = Coalescing(ScriptedChat(["a", "b"]), window=0.0)
    >>> chat.complete_batch([[Message("user", "x")], [Message("user", "y")]])[1].text, chat.name
    ('b', 'scripted')
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from connectors.tools import Tool
from connectors.types import Completion, Message


@dataclass
class _Call:
    prompts: list[list[Message]]
    tools_each: list[list[Tool]] | None
    result: list[Completion] | None = None
    error: BaseException | None = None
    done: bool = field(default=False)


class Coalescing:
    """``backend`` (a model with ``complete_batch``) behind a batching queue; other attributes pass through.

    Args:
        backend: the in-process model.
        window: the most seconds the first call of a batch waits for others.
        quiet: it stops waiting sooner, once no call has joined for this long. A burst of 16 ``openai`` SDK
            requests through ``evolve serve`` reaches the model spread over 0.1-0.2 s (each recalls and
            logs first); a fixed 0.1 s window split it 9 + 7, the second batch waiting for the first
            (``python -m bench.serve_concurrency``). Waiting for a quiet 0.03 s gathers it whole, and a
            lone request pays 0.03 s instead of 0.1 s.
        max_prompts: the most prompts one backend call takes (the rest wait for the next).
    """

    def __init__(self, backend: Any, *, window: float = 0.3, quiet: float = 0.03, max_prompts: int = 64) -> None:
        self.backend = backend
        self.window = window
        self.quiet = quiet
        self.max_prompts = max_prompts
        self._cond = threading.Condition()
        self._queues: dict[str, list[_Call]] = {}
        self._busy: set[str] = set()
        self.batches: list[int] = []  # prompts per backend call, in order (for tests and benches)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        return self.complete_batch([messages], **params)[0]

    def complete_batch(self, prompts: Sequence[Sequence[Message]], **params: Any) -> list[Completion]:
        """The answers to ``prompts``, generated with whatever else arrives with the same parameters."""
        each = params.pop("tools_each", None)
        if each is None and params.get("tools") and getattr(self.backend, "tools_each", False) is True:
            each = [list(params.pop("tools"))] * len(prompts)
        call = _Call([list(p) for p in prompts], None if each is None else [list(t) for t in each])
        key = batch_key(params, per_prompt_tools=call.tools_each is not None)
        with self._cond:
            self._queues.setdefault(key, []).append(call)
        while True:  # wait while another call leads a batch of this key; lead the next one if still queued
            with self._cond:
                while not call.done and key in self._busy:
                    self._cond.wait()
                if call.done:
                    break
                self._busy.add(key)
            self._lead(key, params)
        if call.error is not None:
            raise call.error
        assert call.result is not None
        return call.result

    def _lead(self, key: str, params: dict[str, Any]) -> None:
        """Wait for company, then answer every queued call of ``key`` (up to ``max_prompts`` prompts)."""
        try:
            self._gather(key)
            with self._cond:
                queue, n = self._queues.get(key, []), 0
                calls: list[_Call] = []
                while queue and (not calls or n + len(queue[0].prompts) <= self.max_prompts):
                    calls.append(queue.pop(0))
                    n += len(calls[-1].prompts)
            self._answer(calls, params)
        finally:
            with self._cond:
                self._busy.discard(key)
                if not self._queues.get(key):
                    self._queues.pop(key, None)
                self._cond.notify_all()

    def _gather(self, key: str) -> None:
        """Wait while calls of ``key`` keep coming: until ``quiet`` seconds pass without one, ``window``
        seconds have passed, or a full batch is queued."""
        deadline = time.monotonic() + self.window
        with self._cond:
            seen = len(self._queues.get(key, []))
        while True:
            wait = min(self.quiet, deadline - time.monotonic())
            if wait <= 0:
                return
            time.sleep(wait)
            with self._cond:
                queue = self._queues.get(key, [])
                if len(queue) == seen or sum(len(c.prompts) for c in queue) >= self.max_prompts:
                    return
                seen = len(queue)

    def _answer(self, calls: list[_Call], params: dict[str, Any]) -> None:
        prompts = [p for c in calls for p in c.prompts]
        try:
            if any(c.tools_each is not None for c in calls):
                each = [t for c in calls for t in (c.tools_each or [[] for _ in c.prompts])]
                out = list(self.backend.complete_batch(prompts, tools_each=each, **params))
            elif hasattr(self.backend, "complete_batch"):
                out = list(self.backend.complete_batch(prompts, **params))
            else:
                out = [self.backend.complete(p, **params) for p in prompts]
            self.batches.append(len(prompts))
        except BaseException as e:  # every caller of the batch gets the backend's error
            with self._cond:
                for c in calls:
                    c.error, c.done = e, True
            return
        with self._cond:
            start = 0
            for c in calls:
                c.result, c.done = out[start : start + len(c.prompts)], True
                start += len(c.prompts)


def batch_key(params: dict[str, Any], *, per_prompt_tools: bool) -> str:
    """The parameters that must agree for two calls to share a batch (a greedy call's seed does not matter)."""
    shared = {k: v for k, v in params.items() if not (k == "seed" and not params.get("temperature"))}
    return json.dumps([per_prompt_tools, shared], sort_keys=True, default=_tool_json)


def _tool_json(value: Any) -> Any:
    return value.spec() if isinstance(value, Tool) else str(value)


__all__ = ["Coalescing", "batch_key"]
