"""A served answer sent as it is generated: ``Deployment.stream`` runs the tenant's team as
``Deployment.answer`` does and hands back an ``AnswerStream`` of the final agent's text, which records the
answer when the stream ends.

Every agent but the final one acts first, as for a plain answer (their recalls, prompts and outputs are
the same); the final agent recalls, gets exactly the messages it would get, and sends its text through
``ChatClient.stream`` (token by token on a local model, as the server sends it on an OpenAI-compatible
one; a backend that cannot stream sends its whole answer at once). The response id is made before the
first delta, and the answer is recorded under it — the same ``responses`` row ``Deployment.answer``
writes, so feedback on the id reinforces the memories recalled — when the text ends, or when the stream
is closed early (the app's client went away): then with the text sent so far, its final step's
``finish`` being ``"cancelled"``. A model failure before the first delta is raised by ``Deployment.stream``;
one after it reaches the reader and nothing is recorded.

Requests with ``tools``, ``tool_choice`` or ``response_format`` are not streamed here: their answer must
be read whole (calls parsed, JSON checked and retried) before any of it is sent, so ``Deployment.answer``
serves them and the app sends the finished answer in chunks.

Example:
    >>> from connectors import Message
    >>> from evolve.serve.deployment import Deployment
    >>> from evolve.spec import RunSpec
    >>> spec = RunSpec.model_validate({"environment": {"tasks": "unused.jsonl"}, "run": {"database": "sqlite://"},
    ...     "model": {"chat": "fake/scripted", "options": {"replies": ["It is 4471."]}}, "embedder": {"name": "hash"}})
    >>> deployment = Deployment(spec)
    >>> stream = deployment.stream([Message("user", "Harbor door code?")], tenant="alice")
    >>> list(stream), deployment.response(stream.id, tenant="alice")["answer"]
    (['It ', 'is ', '4471.'], 'It is 4471.')
    >>> deployment.close()
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, insert

from connectors import ConfigError, Message, Usage
from evolve.episode import TeamStream
from evolve.serve.answers import Answer, Watcher, response_row, tell_answered
from evolve.serve.chat_requests import REQUEST_PARAMS
from evolve.serve.responses import responses
from evolve.serve.timing import Timed, timing, timings

STREAM_PARAMS = tuple(p for p in REQUEST_PARAMS if p not in ("tool_choice", "logprobs"))  # those are answered whole


class AnswerStream:
    """One answer being streamed (``Deployment.stream``).

    ``id``, ``created``, ``run`` and ``prompt_version`` are known before the first delta. Iterating gives
    the text deltas; once they end — or once ``close()`` cuts the stream — the answer is recorded and
    ``answer`` holds it (None until then, and after a failure mid-stream), and ``watchers`` are told of it.
    ``close()`` is safe to call whatever happened, and more than once: call it in a ``finally``.
    ``work`` is the team's timed calls (``evolve.serve.timing``) and ``started`` the ``perf_counter`` the answer
    began at: the recorded answer's ``timings`` and ``work`` come from them.
    """

    def __init__(
        self,
        stream: TeamStream,
        *,
        engine: Engine,
        run: str,
        prompt_version: str,
        query: str,
        messages: Sequence[Message],
        id_prefix: str = "chatcmpl-",
        work: list[Timed] | None = None,
        started: float | None = None,
        watchers: Sequence[Watcher] = (),
    ) -> None:
        self.id = f"{id_prefix}{secrets.token_hex(12)}"
        self.created = int(time.time())
        self.run = run
        self.prompt_version = prompt_version
        self.answer: Answer | None = None
        self._engine, self._stream = engine, stream
        self._query, self._messages = query, list(messages)
        self._work = work if work is not None else []
        self._started = started if started is not None else time.perf_counter()
        self._watchers = watchers
        self._lock = threading.Lock()

    def __iter__(self) -> AnswerStream:
        return self

    def __next__(self) -> str:
        try:
            return next(self._stream)
        except StopIteration:
            self._record()
            raise

    def close(self) -> None:
        """End the stream where it is (the final agent stops) and record what was sent."""
        if self.answer is None:
            self._stream.close()
            self._record()

    def __enter__(self) -> AnswerStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _record(self) -> None:
        """The ``responses`` row ``Deployment.answer`` writes, once the final step exists."""
        with self._lock:
            steps = self._stream.steps
            if self.answer is not None or steps is None:
                return
            work = self._work
            answer = Answer(
                id=self.id,
                run=self.run,
                text=steps[-1].output,
                steps=steps,
                usage=sum((s.usage for s in steps), Usage()),
                prompt_version=self.prompt_version,
                created=self.created,
                timings=timings(work, self._started),
            )
            with timing(work, "record", response_id=self.id), self._engine.begin() as conn:
                conn.execute(insert(responses).values(**response_row(answer, self._query, self._messages)))
            self.answer = dataclasses.replace(answer, work=tuple(work))
        tell_answered(self._watchers, self.answer)


def stream_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The request's parameters a streamed answer takes (those set, not None).

    Raises:
        ConfigError: a parameter a streamed answer does not take (``tool_choice`` and ``logprobs``: such
            requests are answered whole, by ``Deployment.answer``).
    """
    given = {k: v for k, v in (params or {}).items() if v is not None}
    extra = sorted(set(given) - set(STREAM_PARAMS))
    if extra:
        raise ConfigError(
            f"a streamed answer takes none of {extra}; it may set {list(STREAM_PARAMS)} "
            "(requests with tools or logprobs are answered whole by Deployment.answer)"
        )
    return given


__all__ = ["STREAM_PARAMS", "AnswerStream", "stream_params"]
