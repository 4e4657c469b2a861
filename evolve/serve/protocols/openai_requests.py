"""The request bodies ``evolve serve`` reads, and its errors in OpenAI's shape.

Unknown fields are ignored (OpenAI clients send many); a field that is read is honoured or refused with
a 400 that says why, never dropped: ``ChatRequest.request_tools`` turns the app's tools and tool choice
into described-only ``Tool``s and refuses what a team cannot serve. The operator's bodies and queries
(``evolve.serve.protocols.openai_admin``) are ours alone: an unknown field there is a 400 naming the fields they take.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from connectors import ConfigError, Message, Tool
from connectors.types import as_messages
from memory.write.checks import MAX_ID, MAX_NAMESPACE, check_writer

# ---- request bodies (unknown fields are ignored: OpenAI clients send many) ------------------------------


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ChatMessageIn(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    @field_validator("content")
    @classmethod
    def _text_parts(cls, content: str | list[dict[str, Any]] | None) -> str | list[dict[str, Any]] | None:
        for part in content if isinstance(content, list) else []:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError(
                    f"only text content parts ({{'type': 'text', 'text': ...}}) are served, got {part!r:.80}"
                )
        return content

    def text(self) -> str:
        if isinstance(self.content, list):
            return "\n".join(part["text"] for part in self.content)
        return self.content or ""

    def message(self) -> Message:
        """As an Evolve message: developer -> system; an assistant's tool calls and a tool result's call id kept."""
        role = "system" if self.role == "developer" else self.role
        return as_messages([{"role": role, "content": self.text(), "tool_calls": self.tool_calls,
                             "tool_call_id": self.tool_call_id}])[0]  # fmt: skip


class FunctionIn(_Lenient):
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolIn(_Lenient):
    type: Literal["function"]
    function: FunctionIn


class ResponseFormat(_Lenient):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class StreamOptions(_Lenient):
    include_usage: bool = False


class ChatRequest(_Lenient):
    model: str
    messages: list[ChatMessageIn] = Field(min_length=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = None
    user: str | None = None
    tools: list[ToolIn] | None = None
    tool_choice: Literal["auto", "none", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int | None) -> int | None:
        if n not in (None, 1):
            raise ValueError(f"only n=1 is served (the team gives one answer per request), got {n}")
        return n

    def chat_messages(self) -> list[Message]:
        """The conversation as Evolve messages (``ChatMessageIn.message``); a malformed tool call is a 400."""
        try:
            return [m.message() for m in self.messages]
        except ConfigError as e:
            raise ApiError(400, f"invalid request: {e}", param="messages") from None

    def request_tools(self) -> tuple[list[Tool] | None, str | None]:
        """The app's tools (described, run by the app) and the tool choice: a named function narrows the
        tools to it and requires a call; an invalid schema or unknown name is a 400."""
        if self.top_logprobs:
            raise ApiError(
                400,
                "top_logprobs are not served: only the chosen tokens' logprobs (logprobs: true)",
                param="top_logprobs",
            )
        try:
            tools = [Tool(t.function.name, t.function.description, t.function.parameters) for t in self.tools or ()]
        except ConfigError as e:
            raise ApiError(400, f"invalid request: {e}", param="tools") from None
        choice = self.tool_choice
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name") if choice.get("type") == "function" else None
            named = [t for t in tools if t.name == name]
            if not named:
                raise ApiError(
                    400, f"tool_choice names the function {name!r:.80}, which is not among the request's tools "
                    f"({', '.join(t.name for t in tools) or 'none'})", param="tool_choice",
                )  # fmt: skip
            tools, choice = named, "required"
        return tools or None, choice

    def params(self) -> dict[str, Any]:
        """The sampling parameters the request set (``evolve.serve.chat_requests.REQUEST_PARAMS``)."""
        max_tokens = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        params: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": max_tokens}
        params |= {"seed": self.seed, "stop": self.stop, "logprobs": True if self.logprobs else None}
        return {k: v for k, v in params.items() if v is not None}


class FeedbackRequest(_Lenient):
    response_id: str = Field(min_length=1, max_length=64)
    score: float = Field(ge=0.0, le=1.0, allow_inf_nan=False)
    comment: str = Field("", max_length=20_000)
    key: str | None = Field(None, min_length=1, max_length=200)


# ---- the operator's bodies (``evolve.serve.protocols.openai_admin``; unknown fields are refused) --------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _writer(value: str) -> str:
    try:
        return check_writer(value)
    except ConfigError as e:
        raise ValueError(str(e)) from None


Writer = Annotated[str, AfterValidator(_writer)]
StoreNamespace = Annotated[str, Field(min_length=1, max_length=MAX_NAMESPACE)]


class QuarantinedQuery(_Strict):
    namespace: StoreNamespace | None = None
    writer: Writer | None = None


class DistrustRequest(_Strict):
    writer: Writer
    namespace: StoreNamespace | None = None
    action: Literal["remove", "reset"] = "remove"


class UndoRequest(_Strict):
    writer: Writer
    namespace: StoreNamespace | None = None


class ReleaseRequest(_Strict):
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


def validation_error(e: ValidationError | Any, fields: Sequence[str] = ()) -> ApiError:
    """A 400 that names each offending field and what was expected (pydantic's or FastAPI's errors); an
    unknown field names the ``fields`` the body takes."""
    problems = e.errors()
    if problems and problems[0].get("type") == "json_invalid":
        return ApiError(400, "the request body is not valid JSON", code="invalid_json")
    where = [field_path(p.get("loc", ())) for p in problems]
    unknown = f"unknown field: this takes only {', '.join(fields)}" if fields else "unknown field"
    said = [unknown if p.get("type") == "extra_forbidden" else p.get("msg", "invalid") for p in problems]
    message = "; ".join(f"{w}: {m}" for w, m in zip(where, said, strict=True))
    return ApiError(400, f"invalid request: {message}", param=where[0] if where else None)


def field_path(loc: Sequence[Any]) -> str:
    """``("body", "messages", 0, "role")`` -> ``"messages[0].role"``."""
    path = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in loc if x != "body").lstrip(".")
    return path or "body"


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
        raise validation_error(e, list(model.model_fields)) from None
