"""Concurrent calls to an in-process model, answered together: requests that arrive within a few
milliseconds of each other with the same parameters become one batch.

A local model (``LocalChat``, ``VLLMChat``) answers one call at a time, but a batch of 16 prompts takes
little longer than one. ``Coalescing`` wraps such a backend for a server's threads: the first call for a
set of parameters waits until no other call has come for ``quiet`` seconds (at most ``window`` seconds in
all), takes every call queued with the same parameters by then
(their prompts in arrival order, each with its own tools on a backend that takes ``tools_each``) and asks
the backend once; calls that arrive while it runs form the next batch. A backend error reaches every
call of its batch. Calls that sample (``temperature`` > 0) share a batch only with the same ``seed``, so
a request's explicit seed is honoured; greedy calls ignore the seed and always share.

A server knows earlier who is coming: a request wrapped in ``arriving()`` is announced before it recalls;
an announcement counts as a call for the quiet spell, and a batch's first call also waits for every
announced request still on its way to the model (at most ``window`` seconds), so a burst is gathered
whole however its recalls spread it. A streamed answer
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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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
        self._announced = 0  # open ``arriving()`` blocks
        self._on_way = 0  # announced requests whose first call has not come yet
        self._local = threading.local()  # .pending: this thread's announcements not yet arrived
        self._news = 0.0  # time.monotonic() of the last call or announcement
        self.batches: list[int] = []  # prompts per backend call, in order (for tests and benches)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    @contextmanager
    def arriving(self) -> Iterator[None]:
        """Announce a request of this thread that is about to call the model: until its first call comes (or
        the block ends), a batch's first call waits for it (at most ``window`` seconds)."""
        with self._cond:
            self._announced += 1
            self._on_way += 1
            self._local.pending = getattr(self._local, "pending", 0) + 1
            self._news = time.monotonic()
        try:
            yield
        finally:
            with self._cond:
                if self._local.pending > 0:  # ended without calling the model
                    self._local.pending -= 1
                    self._on_way -= 1
                self._announced -= 1
                self._cond.notify_all()

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
            self._news = time.monotonic()
            arrived = getattr(self._local, "pending", 0)
            if arrived:
                self._on_way -= arrived
                self._local.pending = 0
                self._cond.notify_all()
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
        """Wait while calls keep coming: until ``quiet`` seconds pass without a call or an announcement and no
        announced request is still on its way, ``window`` seconds have passed, or a full batch is queued."""
        deadline = time.monotonic() + self.window
        with self._cond:
            while not self._full(key):
                now = time.monotonic()
                quiet_left = self.quiet - (now - self._news)
                if now >= deadline or (self._on_way == 0 and quiet_left <= 0):
                    return
                self._cond.wait(deadline - now if self._on_way > 0 else min(deadline - now, quiet_left))

    def _full(self, key: str) -> bool:
        return sum(len(c.prompts) for c in self._queues.get(key, [])) >= self.max_prompts

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
