"""The ``POST /v1/responses`` body ``evolve serve`` reads (OpenAI's Responses API), under the chat body's policy
(``evolve.serve.protocols.openai_requests``): every field of it is known, as one of three kinds.

- Honoured: ``input`` (a string, or items: messages with text parts, ``function_call`` and
  ``function_call_output``), ``instructions``, function ``tools`` and their ``strict``, ``tool_choice`` (a mode, a
  named function or ``allowed_tools``), ``parallel_tool_calls``, ``text.format`` (``text``, ``json_object``,
  ``json_schema``), ``max_output_tokens``, ``temperature``, ``top_p``, ``stream``, ``store``,
  ``previous_response_id`` and ``metadata`` (kept with the response and given back with it). ``max_tool_calls``
  limits calls to built-in tools, and none is ever made here: any value holds.
- Accepted because they ask nothing of the answer: ``user``, ``safety_identifier``, ``prompt_cache_key``.
- ``Refused``: a 400 whose ``param`` names the field and says why (built-in tools, ``background``, ``reasoning``,
  ``include``, ``conversation``, ``prompt``...), unless absent, null, empty or the one value served.

An unknown field, or an item or content part of a type not served, anywhere in the body is a 400 naming it.

Example:
    >>> req = ResponsesRequest.model_validate({"model": "codes", "input": "Door code?", "instructions": "Be brief."})
    >>> [m.role for m in req.with_instructions(req.turns([]))], req.params()
    (['system', 'user'], {})
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Discriminator, Field, Tag, field_validator

from connectors import ConfigError, Message, Tool, ToolCall
from evolve.serve.protocols.openai_requests import ApiError, Refused, StrictBody

ITEMS = ("message", "function_call", "function_call_output")
FORMATS = ("text", "json_object", "json_schema")
TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}  # a part's type -> its text field
BUILT_IN = "give the team an MCP tool (evolve.tools.mcp), or send a function tool the app runs"
METADATA = (16, 64, 512)  # OpenAI's limits: pairs, characters of a key, of a value
Status = Literal["in_progress", "completed", "incomplete"]


# ---- input items ----------------------------------------------------------------------------------------------


def part_text(part: Any) -> str:
    """A content part's text; a ValueError saying what is served for any other part."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind not in TEXT_PARTS:
        raise ValueError(f"only text parts ({', '.join(TEXT_PARTS)}) are served, got {kind or part!r:.80}")
    field = TEXT_PARTS[kind]
    extra = set(part) - {"type", field} - ({"annotations", "logprobs"} if kind == "output_text" else set())
    if extra:
        raise ValueError(f"unknown field {sorted(extra)[0]!r}: the {kind} part takes type and {field}")
    if not isinstance(part.get(field), str):
        raise ValueError(f"the {kind} part needs its {field} as a string, got {part.get(field)!r:.80}")
    return str(part[field])


def check_parts(content: Any) -> str | list[Any]:
    """Content as a string or a list of text parts (``part_text``)."""
    if not isinstance(content, (str, list)):
        raise ValueError(f"content is a string or a list of text parts, got {content!r:.80}")
    for part in content if isinstance(content, list) else []:
        part_text(part)
    return content


def joined(content: str | list[Any]) -> str:
    return content if isinstance(content, str) else "\n".join(part_text(p) for p in content)


class MessageItem(StrictBody):
    """A turn: the app's (``user``, ``system``, ``developer``) or an earlier answer (``assistant``)."""

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: Annotated[str | list[Any], BeforeValidator(check_parts)]
    id: str | None = None  # an earlier output item's own id
    status: Status | None = None

    def message(self) -> Message:
        return Message("system" if self.role == "developer" else self.role, joined(self.content))


class FunctionCallItem(StrictBody):
    """A call an earlier answer made to one of the app's tools."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    id: str | None = None
    status: Status | None = None
    caller: Annotated[Any, Refused("programmatic tool calling is not served", {"type": "direct"})] = None
    namespace: Annotated[Any, Refused("tool namespaces are not served")] = None

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, arguments: str) -> str:
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise ValueError(f"arguments must be a JSON object, got {arguments!r:.80}")
        return arguments

    def call(self) -> ToolCall:
        return ToolCall(self.name, json.loads(self.arguments), id=self.call_id)


class FunctionCallOutputItem(StrictBody):
    """What the app's tool gave for a call (``call_id``); text only."""

    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: Annotated[str | list[Any], BeforeValidator(check_parts)]
    name: str | None = None  # the function's: shown with the result
    id: str | None = None
    status: Status | None = None
    caller: Annotated[Any, Refused("programmatic tool calling is not served", {"type": "direct"})] = None
    namespace: Annotated[Any, Refused("tool namespaces are not served")] = None

    def message(self) -> Message:
        return Message("tool", joined(self.output), tool_call_id=self.call_id, name=self.name or None)


def item_type(value: Any) -> str | None:
    """An item's ``type``; a message may leave it out (OpenAI's easy input message)."""
    if isinstance(value, dict):
        return value.get("type", "message" if "role" in value else None)
    return getattr(value, "type", None)


def served_item(value: Any) -> Any:
    """An item of a type served, as it came; a ValueError naming what this server takes otherwise."""
    kind = item_type(value)
    if isinstance(value, dict) and kind in ITEMS:
        return value
    said = f"an item of type {kind!r:.60}" if kind is not None else f"{value!r:.60}"
    raise ValueError(f"{said} is not served: input takes {', '.join(ITEMS)} items (built-in tools, reasoning "
                     "and item references are not served here)")  # fmt: skip


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")],
    Discriminator(item_type),
    BeforeValidator(served_item),
]
Input = Annotated[
    Annotated[str, Tag("text")] | Annotated[list[InputItem], Tag("items")],
    Discriminator(lambda value: "text" if isinstance(value, str) else "items"),
]


def as_messages(items: str | list[Any], earlier: Sequence[Message]) -> list[Message]:
    """The input after ``earlier`` (a previous response's conversation) as Evolve messages: consecutive
    ``function_call`` items are one assistant turn; a ``function_call_output`` must answer a call made before it."""
    if isinstance(items, str):
        return [Message("user", items)]
    calls = {c.id for m in earlier for c in m.tool_calls}
    out: list[Message] = []
    for i, item in enumerate(items):
        if isinstance(item, FunctionCallItem):
            calls.add(item.call_id)
            last = out[-1] if out else None
            if last is not None and last.role == "assistant" and (last.tool_calls or not last.content):
                out[-1] = Message("assistant", last.content, (*last.tool_calls, item.call()))
            else:
                out.append(Message("assistant", "", (item.call(),)))
        elif isinstance(item, FunctionCallOutputItem) and item.call_id not in calls:
            raise ApiError(
                400, f"input[{i}].call_id: no function_call with call_id {item.call_id!r:.80} comes before this "
                "output in the conversation (its input, or previous_response_id's)", param=f"input[{i}].call_id",
            )  # fmt: skip
        else:
            out.append(item.message())
    return out


# ---- tools, tool choice and text format ---------------------------------------------------------------------------


class FunctionToolIn(StrictBody):
    type: Literal["function"]
    name: str
    parameters: dict[str, Any] | None = None
    strict: bool | None = None  # a call's arguments must fit parameters unless false: the Responses API's default
    description: str | None = None
    defer_loading: Annotated[Any, Refused("deferred tool loading is not served: every tool is described", False)] = None
    allowed_callers: Annotated[Any, Refused("programmatic tool calling is not served", ("direct",))] = None
    output_schema: Annotated[Any, Refused("a tool's output_schema is not served: describe it in description")] = None

    def tool(self) -> Tool:
        schema = self.parameters if self.parameters is not None else {"type": "object", "properties": {}}
        return Tool(self.name, self.description or "", schema, strict=self.strict is not False)


def function_only(value: Any) -> Any:
    """A function tool (or a function named by ``tool_choice``) as it came; a ValueError for any other kind."""
    kind = value.get("type") if isinstance(value, dict) else None
    if isinstance(value, dict) and kind is None:
        raise ValueError(f"a type is needed: function, the one kind of tool served, got {value!r:.80}")
    if isinstance(value, dict) and kind not in ("function", "allowed_tools"):
        raise ValueError(f"the built-in tool {kind!r:.60} is not served: {BUILT_IN}")
    return value


class FunctionChoice(StrictBody):
    type: Literal["function"]
    name: str


class AllowedTools(StrictBody):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[Annotated[FunctionChoice, BeforeValidator(function_only)]] = Field(min_length=1)


ToolChoice = Annotated[
    Annotated[Literal["auto", "none", "required"], Tag("mode")]
    | Annotated[FunctionChoice, Tag("function")]
    | Annotated[AllowedTools, Tag("allowed_tools")],
    Discriminator(lambda value: value.get("type") if isinstance(value, dict) else getattr(value, "type", "mode")),
    BeforeValidator(function_only),
]


class PlainFormat(StrictBody):
    type: Literal["text", "json_object"]


class JsonSchemaFormat(StrictBody):
    type: Literal["json_schema"]
    name: str
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None  # honoured either way: every answer is checked against the schema


def format_type(value: Any) -> Any:
    return value.get("type") if isinstance(value, dict) else getattr(value, "type", None)


def known_format(value: Any) -> Any:
    """A ``text.format`` of a type served, as it came; a ValueError naming the types served otherwise."""
    if format_type(value) not in FORMATS:
        raise ValueError(f"the format {format_type(value)!r:.60} is not served: type is one of {', '.join(FORMATS)}")
    return value


TextFormat = Annotated[
    Annotated[PlainFormat, Tag("plain")] | Annotated[JsonSchemaFormat, Tag("json_schema")],
    Discriminator(lambda value: "json_schema" if format_type(value) == "json_schema" else "plain"),
    BeforeValidator(known_format),
]


class TextConfig(StrictBody):
    format: TextFormat | None = None
    verbosity: Annotated[Any, Refused("verbosity is not served: say how long to answer in instructions", "medium")] = (
        None
    )


class StreamOptions(StrictBody):
    include_obfuscation: Annotated[
        Any, Refused("stream obfuscation is not served: events carry no obfuscation field", False)
    ] = None


NOT_SERVED = "is not served by an evolved team"


class ResponsesRequest(StrictBody):
    """OpenAI's Responses body: every field honoured, accepted or ``Refused`` (see the module's docstring)."""

    model: str
    input: Input
    instructions: str | None = None
    previous_response_id: str | None = Field(None, min_length=1)
    store: bool | None = None
    metadata: dict[str, str] | None = None
    tools: list[Annotated[FunctionToolIn, BeforeValidator(function_only)]] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    max_tool_calls: int | None = Field(None, ge=0)  # calls to built-in tools: none is made here
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    # accepted: identifiers that ask nothing of the answer
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    # served with one value only, or refused
    background: Annotated[Any, Refused("background responses are not served: stream instead", False)] = None
    background_options: Annotated[Any, Refused("background responses are not served")] = None
    conversation: Annotated[Any, Refused("conversations are not served: continue with previous_response_id")] = None
    include: Annotated[Any, Refused("no extra output is served (no logprobs, reasoning or tool results)")] = None
    reasoning: Annotated[Any, Refused("reasoning settings are not served: the team's models take none")] = None
    top_logprobs: Annotated[Any, Refused("alternative tokens are not served", 0)] = None
    truncation: Annotated[Any, Refused("the conversation is never truncated here: only disabled", "disabled")] = None
    service_tier: Annotated[Any, Refused("one tier serves every request: auto or default", "auto", "default")] = None
    prompt: Annotated[Any, Refused("stored prompt templates are not served: send instructions and input")] = None
    prompt_cache_retention: Annotated[Any, Refused("no prompt cache is kept here")] = None
    prompt_cache_options: Annotated[Any, Refused("no prompt cache is kept here")] = None
    context_management: Annotated[Any, Refused(f"context compaction {NOT_SERVED}")] = None
    moderation: Annotated[Any, Refused(f"moderation {NOT_SERVED}")] = None
    image: Annotated[Any, Refused("image settings are not served: answers are text")] = None
    access_programs: Annotated[Any, Refused("access programs are not served")] = None

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, metadata: dict[str, str] | None) -> dict[str, str] | None:
        pairs, key_chars, value_chars = METADATA
        if metadata is not None and len(metadata) > pairs:
            raise ValueError(f"at most {pairs} pairs are kept, got {len(metadata)}")
        for key, value in (metadata or {}).items():
            if len(key) > key_chars or len(value) > value_chars:
                raise ValueError(f"a key is at most {key_chars} characters and a value {value_chars}: {key!r:.80}")
        return metadata

    def turns(self, earlier: Sequence[Message]) -> list[Message]:
        """``earlier`` (``previous_response_id``'s conversation) and then the input, as Evolve messages."""
        try:
            return [*earlier, *as_messages(self.input, earlier)]
        except ConfigError as e:
            raise ApiError(400, f"invalid request: {e}", param="input") from None

    def with_instructions(self, conversation: Sequence[Message]) -> list[Message]:
        """What the team answers: ``instructions`` as the app's system message, then the conversation (an earlier
        response's instructions are not carried over, as on OpenAI)."""
        return [*([Message("system", self.instructions)] if self.instructions else []), *conversation]

    def request_tools(self) -> tuple[list[Tool] | None, str | None]:
        """The app's tools and the tool choice: a named function narrows the tools to it and requires a call,
        ``allowed_tools`` narrows them to its list; a name not among the tools is a 400."""
        try:
            tools = [t.tool() for t in self.tools or ()]
        except ConfigError as e:
            raise ApiError(400, f"invalid request: {e}", param="tools") from None
        choice = self.tool_choice
        if isinstance(choice, str) or choice is None:
            return tools or None, choice
        named = [choice] if isinstance(choice, FunctionChoice) else choice.tools
        known = {t.name for t in tools}
        missing = [c.name for c in named if c.name not in known]
        if missing:
            raise ApiError(
                400, f"tool_choice names the function {missing[0]!r:.80}, which is not among the request's tools "
                f"({', '.join(known) or 'none'})", param="tool_choice",
            )  # fmt: skip
        wanted = {c.name for c in named}
        mode = "required" if isinstance(choice, FunctionChoice) else choice.mode
        return [t for t in tools if t.name in wanted], mode

    def response_format(self) -> dict[str, Any] | None:
        """``text.format`` as the chat API's ``response_format`` (what the team and an upstream model are told);
        None for plain text."""
        fmt = self.text.format if self.text is not None else None
        if isinstance(fmt, JsonSchemaFormat):
            schema = {"name": fmt.name, "schema": fmt.schema_, "description": fmt.description, "strict": fmt.strict}
            return {"type": "json_schema", "json_schema": {k: v for k, v in schema.items() if v is not None}}
        if fmt is not None and fmt.type == "json_object":
            return {"type": "json_object"}
        return None

    def params(self) -> dict[str, Any]:
        """The sampling parameters the request set (``evolve.serve.chat_requests.REQUEST_PARAMS``)."""
        params = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_output_tokens}
        return {k: v for k, v in params.items() if v is not None}

    def echo(self) -> dict[str, Any]:
        """The request's settings as a response object states them (OpenAI's defaults where it set none)."""
        text = self.text.model_dump(exclude_none=True, by_alias=True) if self.text is not None else {}
        choice = self.tool_choice
        return {
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "max_tool_calls": self.max_tool_calls,
            "metadata": self.metadata or {},
            "parallel_tool_calls": self.parallel_tool_calls is not False,
            "previous_response_id": self.previous_response_id,
            "store": self.store is not False,
            "temperature": self.temperature,
            "text": {"format": {"type": "text"}, **text},
            "tool_choice": choice.model_dump() if isinstance(choice, StrictBody) else choice or "auto",
            "tools": [t.model_dump(exclude_none=True) for t in self.tools or ()],
            "top_p": self.top_p,
            "truncation": "disabled",
            "user": self.user,
            "safety_identifier": self.safety_identifier,
            "prompt_cache_key": self.prompt_cache_key,
        }


__all__ = ["FunctionCallItem", "FunctionCallOutputItem", "InputItem", "MessageItem", "ResponsesRequest", "as_messages"]
