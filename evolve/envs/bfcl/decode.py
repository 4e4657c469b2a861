"""Reading a model's answer into BFCL's decoded calls, ``[{name: {argument: value}}, ...]``.

Two forms are read: BFCL's Python call syntax, ``[f(a=1), g(b='x')]`` (the brackets may be left out,
a fenced code block is unwrapped), and JSON, ``{"name": ..., "arguments": {...}}`` or a list of them.
Values follow BFCL's decoder: literals, ``-x``, lists, tuples and dicts; a bare name is read as its
text (BFCL's variables: ``f(data=my_data)`` passes ``"my_data"``); a nested call with keywords is a
``{name: {...}}`` dict and one without is its source text; arithmetic on numbers is worked out (safely,
never with ``eval``). Anything else is an error message, never an exception.

Example:
    >>> decode_answer("[area(base=10, unit='cm'), math.sqrt(x=-4.0)]")
    [{'area': {'base': 10, 'unit': 'cm'}}, {'math.sqrt': {'x': -4.0}}]
    >>> decode_answer("The area is 25.")
    'No function call found'
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Callable
from typing import Any

from connectors.tools import arguments_of, parse_expression

Call = dict[str, dict[str, Any]]
"""One decoded call: ``{name: {argument: value}}``."""

NO_CALL = "No function call found"
_FENCED = re.compile(r"^```[\w-]*[ \t]*\n?(.*?)\n?```$", re.DOTALL)
_CALL_START = re.compile(r"\[?\s*[A-Za-z_][\w.]*\(")
_EMBEDDED_CALL = re.compile(r"[A-Za-z_][\w.]*\(\s*[A-Za-z_]\w*\s*=")
_ARITHMETIC: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}  # fmt: skip
_MAX_POWER = 64  # 10**64 is a number a question may need; 9**9**9 is a denial of service


class _Unreadable(Exception):
    """A value the decoder does not take; the message says which."""


def decode_answer(text: str) -> list[Call] | str:
    """The calls ``text`` holds (see the module doc), or a message saying why none could be read:
    ``NO_CALL`` for prose, or what is wrong with an attempted call."""
    if not isinstance(text, str):
        return f"expected the answer as text, got {type(text).__name__}"
    body = text.strip()
    fenced = _FENCED.match(body)
    body = fenced.group(1).strip() if fenced else body
    if body[:1] in ("[", "{"):
        from_json = _from_json(body)
        if from_json is not None:
            return from_json
    if _CALL_START.match(body):
        return _from_python(body)
    if _EMBEDDED_CALL.search(body):
        return "The answer has text around its calls; answer with only the calls, like [f(a=1), g(b='x')]"
    return NO_CALL


def _from_json(body: str) -> list[Call] | str | None:
    """Calls written as JSON objects with "name" and "arguments"; None when the text is not that."""
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        return None
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items):
        return None
    calls: list[Call] = []
    for item in items:
        args = arguments_of(item["name"], item.get("arguments", item.get("parameters", {})))
        if isinstance(args, str):
            return args
        calls.append({item["name"]: args})
    return calls


def _from_python(body: str) -> list[Call] | str:
    source = body if body.startswith("[") else f"[{body}"
    source = source if source.endswith("]") else f"{source}]"  # BFCL's own wrapping
    try:
        tree = parse_expression(source)
    except SyntaxError as e:
        return f"Could not read the answer as function calls ({e.msg}); answer with only the calls, like [f(a=1), g(b='x')]"
    nodes = tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]
    calls: list[Call] = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            return f"expected only function calls, found {_source(node)!r}; answer like [f(a=1), g(b='x')]"
        try:
            calls.append(_call(node))
        except _Unreadable as e:
            return str(e)
    return calls


def _call(node: ast.Call) -> Call:
    name = _dotted(node.func)
    if name is None:
        raise _Unreadable(f"cannot read the function name of {_source(node)!r}")
    if node.args:
        raise _Unreadable(
            f"{name}: give every argument by name (name=value), got {_source(node.args[0])!r} by position"
        )
    args: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise _Unreadable(f"{name}: give every argument by name (name=value), got **{_source(keyword.value)}")
        try:
            args[keyword.arg] = _value(keyword.value)
        except _Unreadable as e:
            raise _Unreadable(f"{name}: argument {keyword.arg!r} is {e}") from None
    return {name: args}


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _value(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.Name):
        return node.id  # a variable stands for itself, as in BFCL
    if isinstance(node, ast.List):
        return [_value(e) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_value(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise _Unreadable("a dict with ** unpacking (write its keys out)")
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    if isinstance(node, ast.Call):
        return _call(node) if node.keywords else _source(node)
    if isinstance(node, ast.Subscript):
        return _source(node)
    if isinstance(node, (ast.UnaryOp, ast.BinOp)):
        return _number(node)
    raise _Unreadable(f"not a literal value: {_source(node)!r}")


def _number(node: ast.expr) -> Any:
    """Arithmetic on numeric literals, worked out without ``eval``."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, complex):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _number(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _number(node.left), _number(node.right)
        if isinstance(node.op, ast.Pow) and not _small_power(left, right):
            raise _Unreadable(f"a power too large to work out: {_source(node)!r}")
        try:
            return _ARITHMETIC[type(node.op)](left, right)
        except (ArithmeticError, TypeError, ValueError) as e:
            raise _Unreadable(f"arithmetic that fails ({e}): {_source(node)!r}") from None
    raise _Unreadable(f"not a literal value: {_source(node)!r}")


def _small_power(base: Any, exponent: Any) -> bool:
    if not isinstance(exponent, (int, float)) or abs(exponent) > _MAX_POWER:
        return False
    return not isinstance(base, int) or base.bit_length() * abs(exponent) <= 4096


def _source(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 80 else text[:77] + "..."


__all__ = ["NO_CALL", "Call", "decode_answer"]
