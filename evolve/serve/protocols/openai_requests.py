"""The request bodies ``evolve serve`` reads, and its errors in OpenAI's shape.

Nothing a caller sends is dropped unread. Every field of OpenAI's chat completions body is known here,
as one of three kinds:

- honoured: read and acted on (the conversation and its speakers' names, sampling and its penalties,
  ``max_tokens``, ``stop``, ``stream``, tools and their ``strict``, ``response_format``, ``logprobs``...),
  or refused by the checks that read it with a 400 that says why (``ChatRequest.request_tools``: tools a
  team cannot serve);
- accepted because it asks nothing of the answer: ``user``, ``safety_identifier`` and
  ``prompt_cache_key``, identifiers OpenAI uses for abuse monitoring and caching;
- ``Refused``: a 400 whose ``param`` names the field and whose message says why — unless it is absent,
  null, empty, or the one value this server serves (``n: 1``, ``store: true``, ``modalities:
  ["text"]``, ``top_logprobs: 0``, ``service_tier: "auto"``...), which asks for nothing it does not do.

An unknown field, in the body or in any object inside it (a message, a content part, a tool call, a
tool, ``response_format``, ``stream_options``), is a 400 naming it and the fields that object takes; the
feedback body and the operator's (``evolve.serve.protocols.openai_admin``) are checked the same way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    GetCoreSchemaHandler,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import CoreSchema, core_schema

from connectors import ConfigError, Message, Tool
from connectors.types import as_messages
from memory.write.checks import MAX_ID, MAX_NAMESPACE, check_writer

# ---- what is refused, and how a body is checked ----------------------------------------------------------


class Refused:
    """A known field this server does not serve (``Annotated[Any, Refused(why, *served)]``): absent, null,
    empty or one of ``served`` passes, as asking for nothing it does not do; any other value is a 400
    whose message is ``why``.

    Example:
        >>> Refused("only n=1 is served", 1).check(1)
        1
    """

    def __init__(self, why: str, *served: Any) -> None:
        self.why = why
        self.served = served

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def check(self, value: Any) -> Any:
        seen = tuple(value) if isinstance(value, list) else value
        if value is None or value in ({}, []) or any(seen == ok and type(seen) is type(ok) for ok in self.served):
            return value
        raise ValueError(self.why)


def is_refused(field: FieldInfo) -> bool:
    return any(isinstance(m, Refused) for m in field.metadata)


class StrictBody(BaseModel):
    """A body, or an object in one, whose unknown fields are refused (``validation_error`` names them)."""

    model_config = ConfigDict(extra="forbid")


# ---- the chat completions body -----------------------------------------------------------------------------


class FunctionCallIn(StrictBody):
    name: str
    arguments: str | dict[str, Any]


class ToolCallIn(StrictBody):
    id: str = ""
    type: Literal["function"] = "function"
    function: FunctionCallIn


class ChatMessageIn(StrictBody):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    refusal: str | None = None  # an earlier answer that refused: that turn's text
    name: str | None = None  # who speaks (a multi-agent app's agent): shown to the team with the turn
    audio: Annotated[Any, Refused("audio is not served: the conversation is text")] = None
    function_call: Annotated[Any, Refused("legacy function calls are not served: use tool_calls")] = None

    @field_validator("content")
    @classmethod
    def _text_parts(cls, content: str | list[dict[str, Any]] | None) -> str | list[dict[str, Any]] | None:
        for part in content if isinstance(content, list) else []:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError(
                    f"only text content parts ({{'type': 'text', 'text': ...}}) are served, got {part!r:.80}"
                )
            if set(part) - {"type", "text"}:
                raise ValueError(f"a text part takes only type and text, got {sorted(part)}")
        return content

    def text(self) -> str:
        if isinstance(self.content, list):
            return "\n".join(part["text"] for part in self.content)
        return self.content or self.refusal or ""

    def message(self) -> Message:
        """As an Evolve message: developer -> system; an assistant's tool calls, a tool result's call id and the
        speaker's name kept (an empty name is none)."""
        role = "system" if self.role == "developer" else self.role
        calls = [c.model_dump() for c in self.tool_calls] if self.tool_calls else None
        return as_messages([{"role": role, "content": self.text(), "tool_calls": calls,
                             "tool_call_id": self.tool_call_id, "name": self.name or None}])[0]  # fmt: skip


class FunctionIn(StrictBody):
    name: str
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None  # true: a call's arguments must fit parameters (evolve.serve.answer_checks)


class ToolIn(StrictBody):
    type: Literal["function"]
    function: FunctionIn


class FunctionName(StrictBody):
    name: str


class NamedToolChoice(StrictBody):
    type: Literal["function"]
    function: FunctionName


# A mode, or a named function: an object is read as the latter only, so its errors are the ones reported.
ToolChoice = Annotated[
    Annotated[Literal["auto", "none", "required"], Tag("mode")] | Annotated[NamedToolChoice, Tag("named")],
    Discriminator(lambda value: "named" if isinstance(value, (dict, NamedToolChoice)) else "mode"),
]


class JsonSchemaIn(StrictBody):
    name: str = ""
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None  # honoured either way: every answer is checked against the schema


class ResponseFormat(StrictBody):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaIn | None = None

    def as_dict(self) -> dict[str, Any]:
        """OpenAI's ``response_format`` object, as the team and an OpenAI-compatible model are given it."""
        return self.model_dump(exclude_none=True, by_alias=True)


class StreamOptions(StrictBody):
    include_usage: bool | None = False
    include_obfuscation: Annotated[
        Any, Refused("stream obfuscation is not served: chunks carry no obfuscation field", False)
    ] = None


NOT_SERVED = "is not served by an evolved team"


class ChatRequest(StrictBody):
    """OpenAI's chat completions body: every field honoured, accepted (asks nothing of the answer) or
    ``Refused`` (see the module's docstring)."""

    model: str
    messages: list[ChatMessageIn] = Field(min_length=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    tools: list[ToolIn] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None
    # accepted: identifiers that ask nothing of the answer
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    # served with one value only
    n: Annotated[Any, Refused("only n=1 is served: the team gives one answer per request", 1)] = None
    top_logprobs: Annotated[
        Any, Refused("alternative tokens are not served, only the chosen ones' logprobs (logprobs: true)", 0)
    ] = None
    store: Annotated[
        Any, Refused("every answer is stored (its id takes /v1/feedback): store false is not served", True)
    ] = None
    modalities: Annotated[Any, Refused('answers are text: only modalities ["text"] are served', ("text",))] = None
    service_tier: Annotated[Any, Refused("one tier serves every request: auto or default", "auto", "default")] = None
    metadata: Annotated[Any, Refused("metadata is not kept with answers (their id is the handle)")] = None
    # refused
    audio: Annotated[Any, Refused("audio output is not served: answers are text")] = None
    prediction: Annotated[Any, Refused(f"predicted outputs {NOT_SERVED}")] = None
    web_search_options: Annotated[Any, Refused(f"web search {NOT_SERVED}: give the team an MCP tool")] = None
    logit_bias: Annotated[Any, Refused("logit_bias is not served: token ids are the team's models' own")] = None
    functions: Annotated[Any, Refused("legacy functions are not served: use tools")] = None
    function_call: Annotated[Any, Refused("legacy function_call is not served: use tool_choice")] = None
    reasoning_effort: Annotated[Any, Refused(f"reasoning effort {NOT_SERVED}")] = None
    verbosity: Annotated[Any, Refused(f"verbosity {NOT_SERVED}: say how long to answer in a message")] = None
    moderation: Annotated[Any, Refused(f"moderation {NOT_SERVED}")] = None
    prompt_cache_retention: Annotated[Any, Refused("no prompt cache is kept here")] = None
    prompt_cache_options: Annotated[Any, Refused("no prompt cache is kept here")] = None

    @field_validator("max_completion_tokens")
    @classmethod
    def _one_limit(cls, value: int | None, info: ValidationInfo) -> int | None:
        other = info.data.get("max_tokens")
        if None not in (value, other) and value != other:
            raise ValueError(f"max_tokens ({other}) and max_completion_tokens ({value}) are one limit: send one")
        return value

    def chat_messages(self) -> list[Message]:
        """The conversation as Evolve messages (``ChatMessageIn.message``); a malformed tool call is a 400."""
        try:
            return [m.message() for m in self.messages]
        except ConfigError as e:
            raise ApiError(400, f"invalid request: {e}", param="messages") from None

    def request_tools(self) -> tuple[list[Tool] | None, str | None]:
        """The app's tools (described, run by the app) and the tool choice: a named function narrows the
        tools to it and requires a call; an invalid schema or unknown name is a 400."""
        try:
            functions = [t.function for t in self.tools or ()]
            tools = [Tool(f.name, f.description or "", f.parameters, strict=f.strict is True) for f in functions]
        except ConfigError as e:
            raise ApiError(400, f"invalid request: {e}", param="tools") from None
        choice = self.tool_choice
        if isinstance(choice, NamedToolChoice):
            named = [t for t in tools if t.name == choice.function.name]
            if not named:
                raise ApiError(
                    400, f"tool_choice names the function {choice.function.name!r:.80}, which is not among the "
                    f"request's tools ({', '.join(t.name for t in tools) or 'none'})", param="tool_choice",
                )  # fmt: skip
            return named, "required"
        return tools or None, choice

    def params(self) -> dict[str, Any]:
        """The sampling parameters the request set (``evolve.serve.chat_requests.REQUEST_PARAMS``); the spec's
        own (its ``max_tokens``...) fill in the rest."""
        max_tokens = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        params: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": max_tokens}
        params |= {"presence_penalty": self.presence_penalty, "frequency_penalty": self.frequency_penalty}
        params |= {"seed": self.seed, "stop": self.stop, "logprobs": True if self.logprobs else None}
        return {k: v for k, v in params.items() if v is not None}


class FeedbackRequest(StrictBody):
    response_id: str = Field(min_length=1, max_length=64)
    score: float = Field(ge=0.0, le=1.0, allow_inf_nan=False)
    comment: str = Field("", max_length=20_000)
    key: str | None = Field(None, min_length=1, max_length=200)


# ---- the operator's bodies (``evolve.serve.protocols.openai_admin``) -----------------------------------------


def _writer(value: str) -> str:
    try:
        return check_writer(value)
    except ConfigError as e:
        raise ValueError(str(e)) from None


Writer = Annotated[str, AfterValidator(_writer)]
StoreNamespace = Annotated[str, Field(min_length=1, max_length=MAX_NAMESPACE)]


class QuarantinedQuery(StrictBody):
    namespace: StoreNamespace | None = None
    writer: Writer | None = None


class DistrustRequest(StrictBody):
    writer: Writer
    namespace: StoreNamespace | None = None
    action: Literal["remove", "reset"] = "remove"


class UndoRequest(StrictBody):
    writer: Writer
    namespace: StoreNamespace | None = None


class ReleaseRequest(StrictBody):
    writer: Writer | None = None
    ids: list[Annotated[str, Field(min_length=1, max_length=MAX_ID)]] | None = Field(None, min_length=1)
    namespace: StoreNamespace | None = None

    @model_validator(mode="after")
    def _says_which(self) -> ReleaseRequest:
        if self.writer is None and self.ids is None and self.namespace is None:
            raise ValueError("say which held memories to release: writer, ids and/or namespace")
        return self


# ---- errors and bodies ------------------------------------------------------------------------------------


class ApiError(Exception):
    """An HTTP error in OpenAI's shape."""

    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None, response_id: str | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.param = status, message, kind, code, param
        self.response_id = response_id  # a failed answer that was recorded: the app may still rate it
        self.headers: dict[str, str] = {"WWW-Authenticate": "Bearer"} if status == 401 else {}

    def body(self) -> dict[str, Any]:
        error = {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}
        if self.response_id is not None:
            error["response_id"] = self.response_id
        return {"error": error}


def validation_error(e: ValidationError | Any, model: type[BaseModel] | None = None) -> ApiError:
    """A 400 that names each offending field and what was expected (pydantic's or FastAPI's errors); an
    unknown field names the fields its object in ``model`` takes."""
    problems = e.errors()
    if problems and problems[0].get("type") == "json_invalid":
        return ApiError(400, "the request body is not valid JSON", code="invalid_json")
    where, said = [], []
    for p in problems:
        unknown = p.get("type") == "extra_forbidden"
        path, taken = locate(model, p.get("loc", ()), unknown=unknown)
        where.append(path)
        if unknown:
            said.append(f"unknown field: this takes only {', '.join(taken)}" if taken else "unknown field")
        else:
            said.append(str(p.get("msg", "invalid")).removeprefix("Value error, "))
    message = "; ".join(f"{w}: {m}" for w, m in zip(where, said, strict=True))
    return ApiError(400, f"invalid request: {message}", param=where[0] if where else None)


def locate(model: type[BaseModel] | None, loc: Sequence[Any], *, unknown: bool = False) -> tuple[str, list[str]]:
    """Where ``loc`` points in ``model`` (``("body", "messages", 0, "role")`` -> ``"messages[0].role"``, pydantic's
    union tags left out) and the fields the object holding its last key takes, refused ones left out."""
    path, owner, members = "", model, models_in(model)
    for i, key in enumerate(loc):
        if isinstance(key, int):
            path += f"[{key}]"
            continue
        fields = fields_of(owner) if owner is not None else {}
        last = i == len(loc) - 1
        tagged = next((m for m in members if key in tags_of(m)), None) if key not in fields else None
        if tagged is not None:  # the tag of a union member read by its ``type``: that member's fields from here
            owner = tagged
            continue
        if (i == 0 and key == "body") or (owner is not None and key not in fields and not (last and unknown)):
            continue  # FastAPI's root, or the tag of the union member pydantic tried
        path += f".{key}"
        if key in fields:
            members = models_in(fields[key].annotation)
            owner = next(iter(members), None)
    taken = [name for name, f in fields_of(owner).items() if not is_refused(f)] if owner is not None else []
    return path.lstrip(".") or "body", taken


def field_path(loc: Sequence[Any]) -> str:
    """``("body", "messages", 0, "role")`` -> ``"messages[0].role"`` (``locate`` without a model)."""
    return locate(None, loc)[0]


def fields_of(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A model's fields by the names a body uses (their aliases)."""
    return {f.alias or name: f for name, f in model.model_fields.items()}


def tags_of(model: type[BaseModel]) -> tuple[Any, ...]:
    """The values a model's ``type`` field takes (a ``Literal``'s), by which a union reads it."""
    field = model.model_fields.get("type")
    return get_args(field.annotation) if field is not None else ()


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation holds (``list[ChatMessageIn]``, ``StreamOptions | None``...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in models_in(arg)]


def parse(model: type[BaseModel], raw: bytes) -> Any:
    """Validate a JSON body against ``model``; a malformed one is a 400 with a readable message."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON ({e})", code="invalid_json") from None
    return validate(model, data)


def validate(model: type[BaseModel], data: Any) -> Any:
    """``data`` (a parsed body, a query's parameters) as ``model``; else a 400 naming what was expected."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise validation_error(e, model) from None
