"""Public fakes for tests — ours and our users'. They go through the same ``ChatClient`` as real backends.

Example:
    >>> from connectors.chat import ChatClient
    >>> chat = ChatClient(ScriptedChat({"capital of France": "Paris"}, default="I don't know"))
    >>> chat.complete("What is the capital of France?").text
    'Paris'
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from connectors.chat import ChatModel, request_key
from connectors.errors import ConfigError, ConnectorError
from connectors.prompted_tools import check_tools, with_calls
from connectors.streaming import CANCELLED, StreamedCompletion, split_words
from connectors.types import Completion, Message, Usage

Reply = str | Completion
Script = Sequence[Reply] | Mapping[str, Reply] | Callable[[Sequence[Message]], Reply]


def _count_tokens(text: str) -> int:
    return max(1, len(text.split()))


class ScriptedChat:
    """A chat model that answers from a script and records every call.

    ``replies`` is a list (answered in order; the last one repeats when ``cycle`` is false and the
    list runs out), a dict (the first key found as a substring of the last user message wins — of any
    message, the system prompt included, with ``match="all"``; else ``default``), or a callable
    ``messages -> str | Completion``. ``delay`` (seconds) makes every call take that long, so tests can
    hold a job open long enough to overlap it with another or to kill it half-way.

    ``stream`` sends the same reply word by word (``pieces``; a subclass may cut it otherwise, or hold
    between pieces to test what a reader sees mid-answer).
    """

    takes_penalties = True  # recorded with every parameter, for tests to check what reached the model

    def __init__(
        self,
        replies: Script,
        *,
        name: str = "scripted",
        default: str | None = None,
        cycle: bool = False,
        match: str = "last_user",
        delay: float = 0.0,
    ) -> None:
        if match not in ("last_user", "all"):
            raise ConfigError(f"ScriptedChat match must be 'last_user' or 'all', got {match!r}")
        if not isinstance(delay, (int, float)) or not 0.0 <= delay < float("inf"):
            raise ConfigError(f"ScriptedChat delay must be a number of seconds >= 0, got {delay!r}")
        if isinstance(replies, (str, bytes)):
            raise ConfigError("ScriptedChat replies must be a list, a dict or a callable, not a single string")
        self.name = name
        self.replies = replies
        self.default = default
        self.cycle = cycle
        self.match = match
        self.delay = float(delay)
        self.calls: list[tuple[list[Message], dict[str, Any]]] = []
        self._lock = threading.Lock()

    def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        with self._lock:
            index = len(self.calls)
            self.calls.append((list(messages), dict(params)))
        if self.delay:
            time.sleep(self.delay)
        reply = self._reply(messages, index)
        if isinstance(reply, Completion):
            return reply
        prompt_tokens = sum(_count_tokens(m.content) for m in messages)
        done = Completion(str(reply), self.name, Usage(prompt_tokens, _count_tokens(str(reply))), finish_reason="stop")
        tools, choice = params.get("tools"), params.get("tool_choice")
        check_tools(tools, choice)
        return with_calls(done, tools) if tools and choice != "none" else done  # a scripted call is read as one

    def stream(self, messages: Sequence[Message], **params: Any) -> StreamedCompletion:
        """The reply ``complete`` gives (the call is recorded once), sent in ``pieces``."""
        done = self.complete(messages, **params)

        def finish(text: str, cut: bool) -> Completion:
            if not cut:
                return done
            usage = Usage(done.usage.prompt_tokens, _count_tokens(text) if text else 0)
            return dataclasses.replace(done, text=text, usage=usage, finish_reason=CANCELLED)

        return StreamedCompletion(self.pieces(done.text), finish)

    def pieces(self, text: str) -> Iterator[str]:
        """The deltas ``stream`` sends for ``text``: its words, each with its trailing whitespace."""
        yield from split_words(text)

    def _reply(self, messages: Sequence[Message], index: int) -> Reply:
        r = self.replies
        if callable(r) and not isinstance(r, Mapping):
            return r(messages)
        if isinstance(r, Mapping):
            last = next((m.content for m in reversed(messages) if m.role == "user"), "")
            seen = "\n".join(m.content for m in messages) if self.match == "all" else last
            for key, value in r.items():
                if key in seen:
                    return value
            if self.default is None:
                raise ConnectorError(f"ScriptedChat has no reply for {last[:80]!r} and no default")
            return self.default
        if not r:
            raise ConnectorError("ScriptedChat has an empty script")
        if self.cycle:
            return r[index % len(r)]
        return r[min(index, len(r) - 1)]


class ReplayChat:
    """Replays golden answers from a JSONL file keyed by the request's sha256.

    In record mode (``record=inner_model``), misses are answered by ``inner_model`` and appended to the
    file, so a test suite can be recorded once against a real model and replayed offline after.
    """

    def __init__(self, path: str | Path, *, record: ChatModel | None = None, name: str | None = None) -> None:
        self.path = Path(path)
        self.record = record
        self.name = name or (record.name if record is not None else "replay")
        self._lock = threading.Lock()
        self._golden: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            for n, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
                if line.strip():
                    try:
                        row = json.loads(line)
                        self._golden[row["key"]] = row
                    except (json.JSONDecodeError, KeyError) as e:
                        raise ConfigError(f"{self.path}:{n}: expected a JSON object with 'key' and 'text' ({e})") from e
        elif record is None:
            raise ConfigError(f"ReplayChat: golden file {self.path} does not exist (pass record=model to create it)")

    def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        key = request_key(self.name, messages, params)
        row = self._golden.get(key)
        if row is not None:
            return Completion(row["text"], self.name, Usage(*row.get("usage", [0, 0, 0.0])), finish_reason="stop")
        if self.record is None:
            raise ConnectorError(f"ReplayChat: no golden answer for request {key[:12]} in {self.path}")
        c = self.record.complete(messages, **params)
        row = {"key": key, "text": c.text, "usage": [c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.cost]}
        with self._lock:
            self._golden[key] = row
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        return c


def fake_chat(model: str, **kwargs: Any) -> ChatModel:
    """``load_chat`` factory for ``fake/scripted`` and ``fake/replay``."""
    if model == "scripted":
        return ScriptedChat(kwargs.pop("replies", ["ok"]), **kwargs)
    if model == "replay":
        if "path" not in kwargs:
            raise ConfigError("fake/replay needs path=<golden JSONL file>")
        return ReplayChat(kwargs.pop("path"), **kwargs)
    raise ConfigError(f"unknown fake chat model {model!r}; expected 'scripted' or 'replay'")
