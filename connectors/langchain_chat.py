"""``langchain/…``: any LangChain chat model behind the ``ChatModel`` seam.

A model object cannot be named in a string, so the spec only labels it and the object comes as
``model=``: ``load_chat("langchain/<label>", model=<chat model>)``. The label names the backend in
usage accounting and in the response cache's keys (give two models two labels). Any LangChain
``Runnable`` that takes messages and returns a message works: a ``BaseChatModel``, or one wrapped by
``bind``, ``with_retry`` or ``with_fallbacks``. Retries stay ``ChatClient``'s, so one policy covers
every backend.

Errors: LangChain passes the provider SDK's exceptions through, so they are translated here by what
they carry — OpenAI's exactly as ``openai/…`` does, others by HTTP status (429 → ``RateLimited`` with
the server's ``Retry-After``, 408 → ``ProviderTimeout``, 5xx → retryable), by Python's
``TimeoutError``/``ConnectionError``, or by the SDKs' class names (``RateLimitError``,
``…Timeout…``). Anything else becomes a ``ConnectorError`` that retrying cannot fix.

Needs langchain-core from the ``langchain`` extra (``pip install -e '.[langchain]'``).

Example:
    >>> from langchain_core.language_models.fake_chat_models import FakeListChatModel
    >>> from connectors import load_chat
    >>> chat = load_chat("langchain/fake", model=FakeListChatModel(responses=["4"]))
    >>> chat.complete("What is 2 + 2?").text, chat.name
    ('4', 'langchain/fake')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from connectors.errors import ConfigError, ConnectorError, ProviderTimeout, RateLimited
from connectors.install import extra_hint
from connectors.openai_chat import parse_retry_after
from connectors.prompted_tools import check_tools
from connectors.tools import Tool, ToolCall
from connectors.types import Completion, Message, Usage

INSTALL_HINT = extra_hint("langchain")

try:
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ChatMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        convert_to_messages,
    )
    from langchain_core.prompt_values import PromptValue
    from langchain_core.runnables import Runnable
except ImportError as e:  # the optional extra is missing: say which one
    raise ConfigError(
        f"the langchain/… chat provider needs langchain-core from the 'langchain' extra: {INSTALL_HINT}"
    ) from e

__all__ = ["LangChainChat", "from_langchain", "to_langchain", "translate_error"]

ROLE_OF_TYPE = {"human": "user", "system": "system", "ai": "assistant"}


def to_langchain(messages: Sequence[Message]) -> list[BaseMessage]:
    """Our messages as LangChain's: system → ``SystemMessage``, user → ``HumanMessage``, assistant →
    ``AIMessage`` (with its tool calls), tool → ``ToolMessage``; a speaker's ``name`` kept."""
    out: list[BaseMessage] = []
    for m in messages:
        if m.role == "tool":
            out.append(ToolMessage(content=m.content, tool_call_id=m.tool_call_id or "", name=m.name))
        elif m.role == "assistant":
            calls = [{"name": c.name, "args": dict(c.arguments), "id": c.id} for c in m.tool_calls]
            out.append(AIMessage(content=m.content, tool_calls=calls, name=m.name))
        else:
            out.append((SystemMessage if m.role == "system" else HumanMessage)(content=m.content, name=m.name))
    return out


def from_langchain(messages: str | PromptValue | Iterable[Any]) -> list[Message]:
    """LangChain input (a string, a prompt value, messages, ``(role, text)`` pairs or dicts) as our messages, each
    message's ``name`` (its speaker) kept.

    Raises:
        ConfigError: a message whose role has no counterpart here (tool or function messages).
    """
    if isinstance(messages, str):
        return [Message("user", messages)]
    items = list(messages.to_messages() if isinstance(messages, PromptValue) else messages)
    out: list[Message] = []
    for i, m in enumerate(items):
        if isinstance(m, Message):
            out.append(m)
            continue
        try:
            (lc,) = convert_to_messages([m])
        except (ValueError, TypeError, NotImplementedError) as e:
            raise ConfigError(f"messages[{i}] is not a message LangChain understands: {e}") from e
        role = lc.role if isinstance(lc, ChatMessage) else ROLE_OF_TYPE.get(lc.type)
        if role not in ("system", "user", "assistant"):
            raise ConfigError(
                f"messages[{i}] is a {lc.type!r} message; expected system, human (user) or ai (assistant) messages"
            )
        out.append(Message(role, str(lc.text), name=lc.name or None))  # type: ignore[arg-type]
    if not out:
        raise ConfigError("messages must not be empty")
    return out


def translate_error(error: Exception, name: str) -> ConnectorError:
    """Our error for one a LangChain model raised, shaped by how the caller recovers."""
    import openai

    from connectors.openai_chat import translate_error as translate_openai

    if isinstance(error, openai.APIError):
        return translate_openai(error, name)
    status = _status(error)
    detail = f"{name}: {type(error).__name__}: {error}"
    if status == 429 or _named(error, "RateLimit"):
        return RateLimited(detail, retry_after=_retry_after(error))
    if status == 408 or isinstance(error, TimeoutError) or _named(error, "Timeout"):
        return ProviderTimeout(detail)
    if status is not None:
        return ConnectorError(detail, retryable=status >= 500)
    if isinstance(error, ConnectionError) or _named(error, "ConnectError", "ConnectionError"):
        return ConnectorError(detail, retryable=True)
    return ConnectorError(detail, retryable=False)


class LangChainChat:
    """A LangChain chat model as a ``ChatModel`` (``load_chat("langchain/<label>", model=...)``).

    Args:
        label: names the model here (``"langchain/<label>"``): usage accounting and cache keys.
        model: the LangChain chat model (any ``Runnable`` from messages to a message).

    Example:
        >>> from langchain_core.language_models.fake_chat_models import FakeListChatModel
        >>> chat = LangChainChat("fake", model=FakeListChatModel(responses=["hi"]))
        >>> chat.complete([Message("user", "hello")]).text
        'hi'
    """

    takes_penalties = True  # passed to the model's invoke, as every sampling parameter is

    def __init__(self, label: str, *, model: Any = None) -> None:
        if not isinstance(label, str) or not label.strip():
            raise ConfigError(
                f"the langchain/… provider needs a label after the slash (langchain/<label>), got {label!r}"
            )
        if not isinstance(model, Runnable):
            raise ConfigError(
                f"load_chat('langchain/{label}') needs model=<a LangChain chat model (BaseChatModel)>, "
                f"got {type(model).__name__}"
            )
        self.label = label
        self.name = f"langchain/{label}"
        self.model = model

    def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Tool] | None = None,
        tool_choice: str | None = None,
        **params: Any,
    ) -> Completion:
        """One answer. ``stop`` and the other sampling parameters go to the model's ``invoke``; ``tools``
        through its ``bind_tools`` (ConfigError for a model that has none)."""
        kwargs = {k: v for k, v in params.items() if v is not None}
        model = self._with_tools(tools, tool_choice)
        try:
            result = model.invoke(to_langchain(messages), **kwargs)
        except Exception as e:  # every provider SDK has its own errors; all become ours
            raise translate_error(e, self.name) from e
        if isinstance(result, str):
            return Completion(result, self.name)
        if not isinstance(result, BaseMessage):
            raise ConnectorError(f"{self.name}: the model returned {type(result).__name__}, expected a message")
        meta = result.response_metadata or {}
        finish = meta.get("finish_reason") or meta.get("stop_reason")
        calls = tuple(ToolCall(c["name"], c["args"], id=c.get("id") or "") for c in getattr(result, "tool_calls", []))
        problems = tuple(
            f"tool {c.get('name')!r}: {c.get('error') or 'arguments are not valid JSON'}: {str(c.get('args'))[:80]}"
            for c in getattr(result, "invalid_tool_calls", [])
        )
        return Completion(
            str(result.text), self.name, _usage(result), None, finish if isinstance(finish, str) else None,
            tool_calls=calls, tool_problems=problems,
        )  # fmt: skip

    def _with_tools(self, tools: Sequence[Tool] | None, tool_choice: str | None) -> Any:
        check_tools(tools, tool_choice)
        if not tools:
            return self.model
        bind = getattr(self.model, "bind_tools", None)
        if bind is None:
            raise ConfigError(f"{self.name}: this LangChain model has no bind_tools, so it cannot be given tools")
        try:
            return bind([t.spec() for t in tools], **({"tool_choice": tool_choice} if tool_choice else {}))
        except NotImplementedError as e:
            raise ConfigError(f"{self.name}: this LangChain model cannot be given tools ({e})") from e


def _usage(message: BaseMessage) -> Usage:
    usage = getattr(message, "usage_metadata", None)
    if not isinstance(usage, Mapping):
        return Usage()
    return Usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0))


def _status(error: Exception) -> int | None:
    for holder in (error, getattr(error, "response", None)):
        code = getattr(holder, "status_code", None)
        if isinstance(code, int):
            return code
    return None


def _named(error: Exception, *words: str) -> bool:
    """Whether an exception class in the error's hierarchy has one of ``words`` in its name."""
    return any(word in cls.__name__ for cls in type(error).__mro__ for word in words)


def _retry_after(error: Exception) -> float | None:
    headers = getattr(getattr(error, "response", None), "headers", None)
    return parse_retry_after(dict(headers)) if isinstance(headers, Mapping) else None
