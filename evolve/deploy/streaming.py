"""A served answer sent as it is generated: ``stream_answer`` runs the tenant's team as
``Deployment.answer`` does, streams the final agent's text, and records the answer when the stream ends.

Every agent but the final one acts first, as for a plain answer (their recalls, prompts and outputs are
the same); the final agent recalls, gets exactly the messages it would get, and sends its text through
``ChatClient.stream`` (token by token on a local model, as the server sends it on an OpenAI-compatible
one; a backend that cannot stream sends its whole answer at once). The response id is made before the
first delta, and the answer is recorded under it — the same ``responses`` row ``Deployment.answer``
writes, so feedback on the id reinforces the memories recalled — when the text ends, or when the stream
is closed early (the app's client went away): then with the text sent so far, its final step's
``finish`` being ``"cancelled"``. A model failure before the first delta is raised by ``stream_answer``;
one after it reaches the reader and nothing is recorded.

Requests with ``tools``, ``tool_choice`` or ``response_format`` are not streamed here: their answer must
be read whole (calls parsed, JSON checked and retried) before any of it is sent, so ``Deployment.answer``
serves them and the app sends the finished answer in chunks.

Example:
    >>> from evolve.spec import RunSpec
    >>> spec = RunSpec.model_validate({"environment": {"tasks": "unused.jsonl"}, "run": {"database": "sqlite://"},
    ...     "model": {"chat": "fake/scripted", "options": {"replies": ["It is 4471."]}}, "embedder": {"name": "hash"}})
    >>> deployment = Deployment(spec)
    >>> stream = stream_answer(deployment, [Message("user", "Harbor door code?")], tenant="alice")
    >>> list(stream), deployment.response(stream.id, tenant="alice")["answer"]
    (['It ', 'is ', '4471.'], 'It is 4471.')
    >>> deployment.close()
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import insert

from connectors import ConfigError, Message, Usage
from connectors.errors import same_kind
from evolve.deploy.responses import responses
from evolve.deploy.serving import REQUEST_PARAMS, Answer, Deployment, conversation, response_row
from evolve.episode import TeamStream

STREAM_PARAMS = tuple(p for p in REQUEST_PARAMS if p not in ("tool_choice", "logprobs"))  # those are answered whole


class AnswerStream:
    """One answer being streamed (``stream_answer``).

    ``id``, ``created``, ``run`` and ``prompt_version`` are known before the first delta. Iterating gives
    the text deltas; once they end — or once ``close()`` cuts the stream — the answer is recorded and
    ``answer`` holds it (None until then, and after a failure mid-stream). ``close()`` is safe to call
    whatever happened, and more than once: call it in a ``finally``.
    """

    def __init__(
        self,
        deployment: Deployment,
        stream: TeamStream,
        *,
        tenant: str | None,
        prompt_version: str,
        query: str,
        messages: Sequence[Message],
    ) -> None:
        self.id = f"chatcmpl-{secrets.token_hex(12)}"
        self.created = int(time.time())
        self.run = deployment.run_name(tenant)
        self.prompt_version = prompt_version
        self.answer: Answer | None = None
        self._deployment, self._stream = deployment, stream
        self._query, self._messages = query, list(messages)
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
            answer = Answer(
                id=self.id,
                run=self.run,
                text=steps[-1].output,
                steps=steps,
                usage=sum((s.usage for s in steps), Usage()),
                prompt_version=self.prompt_version,
                created=self.created,
            )
            with self._deployment.engine.begin() as conn:
                conn.execute(insert(responses).values(**response_row(answer, self._query, self._messages)))
            self.answer = answer


def stream_answer(
    deployment: Deployment,
    messages: Sequence[Message],
    *,
    tenant: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> AnswerStream:
    """The answer ``deployment.answer(messages, tenant=…, params=…)`` gives, sent as it is generated.

    Returns once the final agent's first delta is there (every other agent has acted), so what fails
    before any text is raised here. Without a ``seed`` the request samples afresh, as a plain answer does.

    Raises:
        ConfigError: no user message, or a parameter a streamed answer does not take (``tool_choice``:
            requests with tools are answered whole, by ``Deployment.answer``).
        ConnectorError: the team's model failed before the final agent's first delta (after its retries).
    """
    observation, query = conversation(messages)
    given = {k: v for k, v in (params or {}).items() if v is not None}
    extra = sorted(set(given) - set(STREAM_PARAMS))
    if extra:
        raise ConfigError(
            f"a streamed answer takes none of {extra}; it may set {list(STREAM_PARAMS)} "
            "(requests with tools or logprobs are answered whole by Deployment.answer)"
        )
    team, version = deployment.team(tenant)
    given.setdefault("seed", secrets.randbelow(2**31))
    stream = team.stream(observation, query=query, params=given)
    if stream.error is not None:
        raise same_kind(stream.cause, f"the team could not answer: {stream.error}")
    return AnswerStream(deployment, stream, tenant=tenant, prompt_version=version, query=query, messages=messages)


__all__ = ["STREAM_PARAMS", "AnswerStream", "stream_answer"]
