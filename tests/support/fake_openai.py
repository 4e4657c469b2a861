"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests: stdlib ``http.server`` in a thread.

It answers from a queue of scripted ``Reply``s (status codes, headers, bodies, delays) or, when the
queue is empty, from an optional ``responder(request_json) -> Reply``; it records what it received.
The real ``openai`` SDK talks to it, so everything between our code and the wire is exercised.

Faults a model server shows in the wild are ``Reply``s too (``faults`` builds each kind): a 429 with
``Retry-After``, a 500, an answer slower than the client's timeout, a body cut short (valid HTTP, invalid
JSON), a connection dropped mid-body, an empty answer, no choices, and an enormous answer streamed in
chunks (never held in memory here). ``FaultMix`` injects them at seeded rates in front of a responder.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted HTTP answer.

    ``body`` is JSON-able, ``str`` or ``bytes`` (sent with its Content-Length), or an iterable of ``bytes``
    chunks (sent without one: the body ends when the connection closes). ``drop_after`` sends the full
    Content-Length but closes the connection after that many bytes of the body.
    """

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop_after: int | None = None
    kind: str = "ok"  # what it is, for counting faults


def chat_body(
    text: str | None,
    *,
    prompt_tokens: int = 11,
    completion_tokens: int = 3,
    model: str = "test-model",
    finish_reason: str = "stop",
    logprobs: list[float] | None = None,
) -> dict[str, Any]:
    """A ``/v1/chat/completions`` response body as an OpenAI-compatible server sends it."""
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": finish_reason,
        "logprobs": None,
    }
    if logprobs is not None:
        tokens = [{"token": f"t{i}", "logprob": lp, "bytes": None, "top_logprobs": []} for i, lp in enumerate(logprobs)]
        choice["logprobs"] = {"content": tokens, "refusal": None}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stream_events(
    pieces: list[str],
    *,
    finish_reason: str = "stop",
    prompt_tokens: int = 11,
    completion_tokens: int = 3,
    model: str = "test-model",
) -> tuple[bytes, ...]:
    """A streamed ``/v1/chat/completions`` answer as an OpenAI-compatible server sends it (``stream=True``
    with ``stream_options.include_usage``): a role chunk, one chunk per piece, the finish chunk, the usage
    chunk and ``[DONE]``, each a server-sent event. Send it as ``Reply(body=…, headers=SSE)`` (a tuple of
    chunks: written as they are, not as JSON)."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model}

    def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        chunk = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        return f"data: {json.dumps({**chunk, **extra})}\n\n".encode()

    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    return (
        event({"role": "assistant", "content": ""}),
        *(event({"content": p}) for p in pieces),
        event({}, finish_reason),
        f"data: {json.dumps({**head, 'choices': [], 'usage': {**usage, 'total_tokens': sum(usage.values())}})}\n\n".encode(),
        b"data: [DONE]\n\n",
    )


SSE = {"Content-Type": "text/event-stream"}


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class FakeOpenAIServer:
    """Answers POSTs from a queue of ``Reply``s, then from ``responder`` (else a 500) and records requests."""

    def __init__(self, responder: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        self.responder = responder
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.kinds: list[str] = []  # the ``Reply.kind`` of each answer, in order
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def next_reply(self, request: dict[str, Any]) -> Reply:
        if self.replies:
            return self.replies.popleft()
        if self.responder is not None:
            return self.responder(request)
        return Reply(500, error_body("no scripted reply"))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeOpenAIServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                server.requests.append(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "json": json.loads(raw or b"{}"),
                    }
                )
                reply = server.next_reply(server.requests[-1]["json"])
                server.kinds.append(reply.kind)
                time.sleep(reply.delay)
                try:
                    self._send(reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

            def _send(self, reply: Reply) -> None:
                self.send_response(reply.status)
                if "Content-Type" not in reply.headers:
                    self.send_header("Content-Type", "application/json")
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                if not isinstance(reply.body, (str, bytes, dict, list, type(None))):  # chunks: close-delimited
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for chunk in reply.body:
                        self.wfile.write(chunk)
                    return
                body = reply.body if isinstance(reply.body, (str, bytes)) else json.dumps(reply.body)
                data = body.encode() if isinstance(body, str) else body
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if reply.drop_after is None:
                    self.wfile.write(data)
                    return
                self.wfile.write(data[: reply.drop_after])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)  # mid-body: the client sees the connection end early

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


# ---- faults -------------------------------------------------------------------------------------------------

FAULT_KINDS = ("rate_limited", "server_error", "slow", "truncated", "dropped", "empty", "no_choices", "enormous")


@dataclass(frozen=True)
class EnormousBody:
    """A chat completion whose content is ``size`` bytes of ``x``, produced chunk by chunk (re-iterable)."""

    size: int
    chunk: int = 1 << 16

    def __iter__(self) -> Iterator[bytes]:
        head, tail = json.dumps(chat_body("")).split('"content": ""')
        yield (head + '"content": "').encode()
        left = self.size
        while left > 0:
            n = min(self.chunk, left)
            yield b"x" * n
            left -= n
        yield ('"' + tail).encode()


def faults(*, retry_after: float = 0.05, slow: float = 1.0, enormous: int = 8 << 20) -> dict[str, Reply]:
    """One ``Reply`` per fault kind; ``slow`` must exceed the client's timeout to be a timeout."""
    whole = json.dumps(chat_body("1234")).encode()
    return {
        "rate_limited": Reply(
            429, error_body("slow down", "rate_limit_error"), {"Retry-After": str(retry_after)}, kind="rate_limited"
        ),
        "server_error": Reply(500, error_body("the upstream model crashed", "server_error"), kind="server_error"),
        "slow": Reply(200, chat_body("too late"), delay=slow, kind="slow"),
        "truncated": Reply(200, whole[: len(whole) // 2], kind="truncated"),
        "dropped": Reply(200, whole, drop_after=len(whole) // 2, kind="dropped"),
        "empty": Reply(200, chat_body(""), kind="empty"),
        "no_choices": Reply(200, {**chat_body("x"), "choices": []}, kind="no_choices"),
        "enormous": Reply(200, EnormousBody(enormous), kind="enormous"),
    }


class FaultMix:
    """A responder that answers with a fault at seeded rates, else asks ``ok(request)``.

    Example:
        >>> mix = FaultMix(lambda request: Reply(200, chat_body("ok")), {"server_error": 0.5}, seed=1)
        >>> server = FakeOpenAIServer(responder=mix)
    """

    def __init__(
        self,
        ok: Callable[[dict[str, Any]], Reply],
        rates: Mapping[str, float],
        *,
        seed: int = 0,
        replies: Mapping[str, Reply] | None = None,
    ) -> None:
        unknown = set(rates) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; expected some of {FAULT_KINDS}")
        self.ok, self.rates, self.replies = ok, dict(rates), dict(replies or faults())
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            draw = self._rng.random()
        for kind, rate in self.rates.items():
            if draw < rate:
                return self.replies[kind]
            draw -= rate
        return self.ok(request)
