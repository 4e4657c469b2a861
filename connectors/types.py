"""The values that cross the connector seam: messages in, completions out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from connectors.errors import ConfigError

Role = Literal["system", "user", "assistant"]
ROLES: tuple[str, ...] = ("system", "user", "assistant")


@dataclass(frozen=True)
class Message:
    """One chat message.

    Example:
        >>> Message("user", "What is 2 + 2?")
        Message(role='user', content='What is 2 + 2?')
    """

    role: Role
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ConfigError(f"Message.role must be one of {ROLES}, got {self.role!r}")
        if not isinstance(self.content, str):
            raise ConfigError(f"Message.content must be str, got {type(self.content).__name__}")

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


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

    ``logprobs`` holds per-token log-probabilities when the backend returns them; ``cached`` is true
    when the answer came from the response cache rather than the backend.
    """

    text: str
    model: str
    usage: Usage = field(default_factory=Usage)
    logprobs: tuple[float, ...] | None = None
    finish_reason: str | None = None
    cached: bool = False


def as_messages(messages: Sequence[Message | Mapping[str, str]] | str) -> list[Message]:
    """Normalise a prompt given as a string, dicts or ``Message``s to a list of ``Message``."""
    if isinstance(messages, str):
        return [Message("user", messages)]
    out: list[Message] = []
    for i, m in enumerate(messages):
        if isinstance(m, Message):
            out.append(m)
        elif isinstance(m, Mapping) and "role" in m and "content" in m:
            out.append(Message(m["role"], m["content"]))  # type: ignore[arg-type]
        else:
            raise ConfigError(f"messages[{i}] must be a Message or a dict with 'role' and 'content', got {m!r}")
    if not out:
        raise ConfigError("messages must not be empty")
    return out
