"""The values that cross the connector seam: messages in, completions out."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from connectors.errors import ConfigError
from connectors.tools import ToolCall

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class Message:
    """One chat message. An assistant message may carry the tool calls it asks for (``tool_calls``); a
    ``tool`` message is one call's result, naming the call it answers (``tool_call_id``). ``name`` is the
    participant who speaks (OpenAI's optional ``name``: a multi-agent app's agent, one of several users).

    Example:
        >>> Message("user", "What is 2 + 2?")
        Message(role='user', content='What is 2 + 2?')
        >>> Message("tool", "120", tool_call_id="call_1").to_dict()
        {'role': 'tool', 'content': '120', 'tool_call_id': 'call_1'}
        >>> Message("assistant", "Sources found.", name="researcher").to_dict()
        {'role': 'assistant', 'content': 'Sources found.', 'name': 'researcher'}
    """

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = field(default=(), repr=False)
    tool_call_id: str | None = field(default=None, repr=False)
    name: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ConfigError(f"Message.role must be one of {ROLES}, got {self.role!r}")
        if not isinstance(self.content, str):
            raise ConfigError(f"Message.content must be str, got {type(self.content).__name__}")
        if not isinstance(self.tool_calls, tuple) or not all(isinstance(c, ToolCall) for c in self.tool_calls):
            raise ConfigError(f"Message.tool_calls must be a tuple of ToolCall, got {self.tool_calls!r:.120}")
        if self.tool_calls and self.role != "assistant":
            raise ConfigError(f"Message.tool_calls belong to an assistant message, not a {self.role!r} one")
        if (self.role == "tool") != isinstance(self.tool_call_id, str) or self.tool_call_id == "":
            raise ConfigError(
                "a tool message needs the tool_call_id of the call it answers, and only a tool message has one; "
                f"got role={self.role!r}, tool_call_id={self.tool_call_id!r}"
            )
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()):
            raise ConfigError(f"Message.name must be a non-empty string (the participant) or None, got {self.name!r}")

    def __repr__(self) -> str:
        extra = "".join(
            f", {name}={value!r}" for name in ("tool_calls", "tool_call_id", "name") if (value := getattr(self, name))
        )
        return f"Message(role={self.role!r}, content={self.content!r}{extra})"

    def to_dict(self) -> dict[str, Any]:
        """The message as the OpenAI chat API takes it."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json()}}
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out


@dataclass(frozen=True)
class Usage:
    """Tokens spent by one call (or a sum of calls) and its cost in US dollars when known."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cost + other.cost,
        )


@dataclass(frozen=True)
class Completion:
    """One model answer.

    ``logprobs`` holds per-token log-probabilities when the backend returns them, and ``tokens`` the text
    of the answer's tokens they belong to (``logprobs[:len(tokens)]``; an end token has a logprob and no
    text); ``cached`` is true
    when the answer came from the response cache rather than the backend. ``tool_calls`` are the calls
    the model asked for (asked with ``tools=``), and ``tool_problems`` why each call it wrote that could
    not be read (arguments that are not JSON) was left out.
    """

    text: str
    model: str
    usage: Usage = field(default_factory=Usage)
    logprobs: tuple[float, ...] | None = None
    finish_reason: str | None = None
    cached: bool = False
    tool_calls: tuple[ToolCall, ...] = ()
    tool_problems: tuple[str, ...] = ()
    tokens: tuple[str, ...] | None = None


def _tool_call(c: Any, where: str) -> ToolCall:
    """One call in the OpenAI form (``{"id", "function": {"name", "arguments": "<json>"}}``)."""
    try:
        fn = c["function"]
        args = json.loads(fn["arguments"]) if isinstance(fn["arguments"], str) else fn["arguments"]
        return ToolCall(str(fn["name"]), dict(args), id=str(c.get("id", "")))
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(
            f"{where} must hold {{'id', 'function': {{'name', 'arguments': '<JSON object>'}}}}, got {c!r:.120} ({e})"
        ) from None


def as_messages(messages: Sequence[Message | Mapping[str, Any]] | str) -> list[Message]:
    """Normalise a prompt given as a string, dicts or ``Message``s to a list of ``Message``."""
    if isinstance(messages, str):
        return [Message("user", messages)]
    out: list[Message] = []
    for i, m in enumerate(messages):
        if isinstance(m, Message):
            out.append(m)
        elif isinstance(m, Mapping) and "role" in m and "content" in m:
            calls = tuple(_tool_call(c, f"messages[{i}].tool_calls") for c in m.get("tool_calls") or ())
            role, content = m["role"], m["content"] or ""
            out.append(Message(role, content, calls, m.get("tool_call_id"), m.get("name")))
        else:
            raise ConfigError(f"messages[{i}] must be a Message or a dict with 'role' and 'content', got {m!r}")
    if not out:
        raise ConfigError("messages must not be empty")
    return out
