"""Tools an agent may call: their JSON schemas, the calls a model makes, and a tolerant reader of calls
written as text (a local model has no native function calling, so it is prompted to write them).

A ``Tool`` is a name, a description and a JSON Schema for its arguments, optionally with the Python
function that runs it; ``Tool.from_function`` derives all three from a function's signature, type hints
and docstring. ``parse_tool_calls`` reads what a model wrote — ``<tool_call>{...}</tool_call>`` blocks,
a JSON object or list, or Python call syntax such as ``[area(base=10, height=5)]`` (BFCL's format) —
into the calls that name a known tool with arguments its schema accepts, and a reason for every
attempt it rejects. It never raises: a model's text is data, not a program error.

Example:
    >>> def area(base: float, height: float) -> float:
    ...     '''The area of a triangle.
    ...
    ...     Args:
    ...         base: the base, in metres.
    ...         height: the height, in metres.
    ...     '''
    ...     return base * height / 2
    >>> tool = Tool.from_function(area)
    >>> tool.parameters["required"], tool.parameters["properties"]["base"]
    (['base', 'height'], {'type': 'number', 'description': 'the base, in metres.'})
    >>> parsed = parse_tool_calls("[area(base=10, height=5)]", [tool])
    >>> parsed.calls[0].name, dict(parsed.calls[0].arguments), parsed.problems
    ('area', {'base': 10, 'height': 5}, ())
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import threading
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from connectors.errors import ConfigError

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
"""A tool's name: OpenAI's rule (letters, digits, ``_`` and ``-``, at most 64) plus dots, which BFCL's
function names use (``math.factorial``)."""

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass(frozen=True)
class ToolCall:
    """One call a model asked for: the tool's name, its arguments and the call's id (for the result).

    Example:
        >>> ToolCall("area", {"base": 10}, id="call_1").arguments_json()
        '{"base": 10}'
    """

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str = ""

    def arguments_json(self) -> str:
        return json.dumps(dict(self.arguments), ensure_ascii=False)


@dataclass(frozen=True)
class Tool:
    """A function a model may call: ``parameters`` is a JSON Schema of type ``object`` for its arguments;
    ``fn`` runs it (None for a tool described to the model and run elsewhere). ``strict`` (OpenAI's strict
    function calling) says a call's arguments must fit ``parameters``: an API model is asked to enforce
    it, and ``evolve serve`` checks the calls it answers with (``argument_problem``).

    Example:
        >>> schema = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
        >>> Tool("lookup", "Look a code up.", schema, strict=True).spec()["function"]["strict"]
        True
        >>> "strict" in Tool("lookup", "Look a code up.", schema).spec()["function"]
        False
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    fn: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    strict: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise ConfigError(
                f"Tool.name must be 1-64 letters, digits, '_', '-' or '.', starting with a letter or '_', "
                f"got {self.name!r}"
            )
        if not isinstance(self.description, str):
            raise ConfigError(
                f"Tool {self.name!r}: description must be a string, got {type(self.description).__name__}"
            )
        check_schema(self.name, self.parameters)
        if not isinstance(self.strict, bool):
            raise ConfigError(f"Tool {self.name!r}: strict must be true or false, got {self.strict!r}")

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None) -> Tool:
        """The tool of a Python function: its name, its docstring's first paragraph as the description,
        and a schema from its type hints (``Args:`` lines of the docstring describe the parameters)."""
        doc = inspect.getdoc(fn) or ""
        summary = doc.split("\n\n", 1)[0].strip()
        tool_name = name or str(getattr(fn, "__name__", ""))
        return cls(tool_name, description if description is not None else summary, schema_of(fn), fn)

    def spec(self) -> dict[str, Any]:
        """The tool as the OpenAI chat API takes it (``tools=[...]``); ``strict`` only when it is set."""
        fn = {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}
        return {"type": "function", "function": fn | ({"strict": True} if self.strict else {})}


def check_schema(name: str, schema: object) -> None:
    """ConfigError unless ``schema`` is a valid JSON Schema of type ``object`` (a tool's arguments)."""
    if not isinstance(schema, Mapping):
        raise ConfigError(f"Tool {name!r}: parameters must be a JSON Schema object, got {type(schema).__name__}")
    try:
        jsonschema.Draft202012Validator.check_schema(dict(schema))
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.path) or "(top)"
        raise ConfigError(f"Tool {name!r}: parameters is not a valid JSON Schema at {where}: {e.message}") from None
    if schema.get("type") != "object":
        raise ConfigError(f'Tool {name!r}: parameters must have "type": "object", got {schema.get("type")!r}')


def schema_of(fn: Callable[..., Any]) -> dict[str, Any]:
    """A JSON Schema for ``fn``'s keyword arguments from its type hints; a parameter without a default
    (and not ``Optional``) is required. ConfigError names a parameter whose type has no JSON form."""
    fn_name = getattr(fn, "__name__", repr(fn))
    try:
        hints = typing.get_type_hints(fn)
    except Exception as e:  # a hint naming something undefined
        raise ConfigError(f"tool {fn_name!r}: its type hints cannot be read ({e})") from None
    described = _arg_descriptions(inspect.getdoc(fn) or "")
    properties: dict[str, Any] = {}
    required = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name not in hints:
            raise ConfigError(f"tool {fn_name!r}: parameter {p.name!r} needs a type hint (str, int, float, ...)")
        hint, optional = _unwrap_optional(hints[p.name])
        prop = _json_type(hint, f"tool {fn_name!r}: parameter {p.name!r}")
        if p.name in described:
            prop["description"] = described[p.name]
        properties[p.name] = prop
        if p.default is p.empty and not optional:
            required.append(p.name)
    return {"type": "object", "properties": properties, "required": required}


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]), True  # noqa: UP007
    return hint, False


def _json_type(hint: Any, where: str) -> dict[str, Any]:
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if hint in (list, tuple) or origin in (list, tuple, Sequence):
        return {"type": "array", "items": _json_type(args[0], where)} if args else {"type": "array"}
    if hint is dict or origin in (dict, Mapping):
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_json_type(a, where) for a in args]}
    raise ConfigError(
        f"{where}: type {hint!r} has no JSON Schema form (use str, int, float, bool, list, dict, Literal)"
    )


def _arg_descriptions(doc: str) -> dict[str, str]:
    """``name: text`` lines of a Google-style ``Args:`` section (continuation lines joined)."""
    out: dict[str, str] = {}
    lines = doc.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() in ("Args:", "Arguments:", "Parameters:"))
    except StopIteration:
        return out
    current = None
    for line in lines[start + 1 :]:
        if line.strip() and not line.startswith((" ", "\t")):
            break  # the next section
        m = re.match(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
        if m:
            current = m.group(1)
            out[current] = m.group(2).strip()
        elif current and line.strip():
            out[current] = f"{out[current]} {line.strip()}".strip()
    return out


@dataclass(frozen=True)
class ParsedCalls:
    """What a model's text held: the valid calls, and why each other attempt was rejected.

    ``attempted`` is false for a plain answer (no call in any format): the text is the answer.
    """

    calls: tuple[ToolCall, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def attempted(self) -> bool:
        return bool(self.calls or self.problems)


_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"```(?:json|python|tool_code)?\s*(.*?)```", re.DOTALL)


def parse_tool_calls(text: str, tools: Sequence[Tool]) -> ParsedCalls:
    """The calls ``text`` asks for, among ``tools`` (see the module's doc). Never raises."""
    known = {t.name: t for t in tools}
    candidates = _candidates(text if isinstance(text, str) else "", set(known))
    if not candidates:
        return ParsedCalls()
    calls: list[ToolCall] = []
    problems: list[str] = []
    for raw in candidates:
        if isinstance(raw, str):
            problems.append(raw)
            continue
        name, args = raw
        tool = known.get(name)
        if tool is None:
            problems.append(f"unknown tool {name!r} (known: {', '.join(sorted(known)) or 'none'})")
            continue
        problem = argument_problem(tool, args)
        if problem:
            problems.append(problem)
        else:
            calls.append(ToolCall(name, args, id=f"call_{len(calls) + 1}"))
    return ParsedCalls(tuple(calls), tuple(problems))


def _candidates(text: str, known: set[str]) -> list[tuple[str, dict[str, Any]] | str]:
    """(name, arguments) of every call written in ``text``, or a problem string for an attempt that
    cannot be read; the first format that finds anything wins."""
    tagged = _TAGGED.findall(text)
    if tagged:
        return [c for block in tagged for c in _from_json_text(block, strict=True)]
    bodies = _FENCE.findall(text) or [text]
    for body in bodies:
        found = _from_json_text(body, strict=False) or _from_python(body, known)
        if found:
            return found
    return []


def _from_json_text(body: str, *, strict: bool) -> list[tuple[str, dict[str, Any]] | str]:
    start = min((i for i in (body.find("{"), body.find("[")) if i >= 0), default=-1)
    if start < 0:
        return ["a tool call that is not JSON: " + body[:80]] if strict else []
    try:
        value, _ = json.JSONDecoder().raw_decode(body[start:])
    except json.JSONDecodeError as e:
        return [f"a tool call whose JSON cannot be parsed ({e.msg} at column {e.colno})"] if strict else []
    items = value if isinstance(value, list) else [value]
    out: list[tuple[str, dict[str, Any]] | str] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            if strict:
                out.append(f'a tool call must be an object with a "name", got {json.dumps(item)[:80]}')
            continue
        args = arguments_of(item["name"], item.get("arguments", item.get("parameters", {})))
        out.append(args if isinstance(args, str) else (item["name"], args))
    return out


def arguments_of(name: str, raw: object) -> dict[str, Any] | str:
    """A call's arguments as a dict — given as one, or as a JSON string (OpenAI's form) — or a problem."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw or "{}")
        except json.JSONDecodeError as e:
            return f"tool {name!r}: arguments are not valid JSON ({e.msg})"
    if not isinstance(raw, dict):
        return f"tool {name!r}: arguments must be a JSON object, got {type(raw).__name__}"
    return raw


_CALL = re.compile(r"(\[\s*)?([A-Za-z_][\w.]*)\(([^()]*)")


def _from_python(body: str, known: set[str]) -> list[tuple[str, dict[str, Any]] | str]:
    """Calls in Python syntax: ``f(a=1)``, ``[f(a=1), g(b="x")]``, dotted names included. A ``name(``
    counts as a call when ``name`` is a known tool or named arguments follow, so prose with brackets
    ("the factorial (of 5)") stays an answer; the call runs to the last ``)`` or ``]``."""
    start = next((m for m in _CALL.finditer(body) if m.group(2) in known or "=" in m.group(3)), None)
    if start is None:
        return []
    tree = _longest_expression(body, start.start())
    if tree is None:
        return [f"a tool call in Python syntax that cannot be parsed: {body[start.start() :][:80]}"]
    nodes = tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]
    out: list[tuple[str, dict[str, Any]] | str] = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name is None:
            continue
        if node.args:
            out.append(f"tool {name!r}: arguments must be given by name (name=value)")
            continue
        try:
            args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
        except (ValueError, SyntaxError):
            out.append(f"tool {name!r}: an argument is not a literal value")
            continue
        out.append((name, args))
    return out


_PARSING = threading.Lock()


def parse_expression(text: str) -> ast.expr:
    """``ast.parse(text, mode="eval").body``, one thread at a time: CPython 3.11 (3.11.7 here) can fail a
    parse made while another thread parses, with "SystemError: AST constructor recursion depth mismatch"
    (seen in the suite's threaded BFCL episodes). Raises SyntaxError as ``ast.parse`` does."""
    with _PARSING:
        return ast.parse(text, mode="eval").body


def _longest_expression(body: str, start: int) -> ast.expr | None:
    """The longest Python expression starting at ``start`` and ending at a ``)`` or ``]``: the calls,
    without the prose a model may write after them (which can hold brackets of its own)."""
    ends = sorted((i for i, ch in enumerate(body) if ch in ")]" and i > start), reverse=True)
    for end in ends[:64]:  # a reply is short; a pathological one is not worth more attempts
        try:
            return parse_expression(body[start : end + 1].strip())
        except SyntaxError:
            continue
    return None


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def argument_problem(tool: Tool, args: Mapping[str, Any]) -> str | None:
    """Why ``args`` do not fit ``tool``'s schema (the first error), or None."""
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(dict(tool.parameters)).iter_errors(dict(args))
    )
    if error is None:
        return None
    where = "/".join(str(p) for p in error.path)
    return f"tool {tool.name!r}: arguments {('at ' + where + ' ') if where else ''}{error.message}"


__all__ = [
    "ParsedCalls", "Tool", "ToolCall", "argument_problem", "arguments_of", "check_schema", "parse_tool_calls", "schema_of",
]  # fmt: skip
