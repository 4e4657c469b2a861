"""A grammar of the calls a prompted model is asked to write: ``[name(arg=value, ...), ...]`` in Python
syntax (``connectors.prompted_tools``), with each argument's value a Python literal of the type its
tool's JSON Schema gives.

``call_grammar(tools)`` is a Lark grammar (llguidance's dialect: ``connectors.constrained`` compiles it)
that only admits one or more calls to ``tools``, each naming a tool, giving its required arguments and
none it lacks, in the schema's order, with values that fit the schema's structure: ``type`` (strings,
integers, numbers, booleans, ``None``, lists with their ``items``, dicts with their ``properties``),
``enum`` and ``const``, ``anyOf``/``oneOf`` and lists of types. Keywords a grammar does not enforce
(``minimum``, ``pattern``, ``maxLength``...) are still checked when the call is read
(``connectors.tools.argument_problem``). A schema without a type admits any literal.

Example:
    >>> from connectors.tools import Tool
    >>> tool = Tool("area", "", {"type": "object", "properties": {"base": {"type": "number"}}, "required": ["base"]})
    >>> print(call_grammar([tool]).splitlines()[0])
    start: "[" call (", " call)* "]"
    >>> call_grammar([tool]).splitlines()[1:3]
    ['call: r2', 'r1: "base=" NUM']
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from connectors.tools import Tool

SEP = '", "'
"""Between two arguments, list items or dict entries (the form ``call_text`` and the prompt's example write)."""

LITERALS = r"""
STR: /"(?:[^"\\\x00-\x1f]|\\["'\\nrt])*"/ | /'(?:[^'\\\x00-\x1f]|\\["'\\nrt])*'/
INT: /-?(?:0|[1-9][0-9]*)/
NUM: /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/
any: STR | NUM | "True" | "False" | "None" | any_list | any_dict
any_list: "[" (any (", " any)*)? "]"
any_dict: "{" (STR ": " any (", " STR ": " any)*)? "}"
"""
"""Python literals: strings in either quote with the escapes ``ast.literal_eval`` reads as JSON does,
numbers, and ``any`` (a literal of any type, for a schema that names none)."""

SCALARS = {"string": "STR", "integer": "INT", "number": "NUM", "boolean": '("True" | "False")', "null": '"None"'}


def call_grammar(tools: Sequence[Tool], *, opened: bool = False) -> str:
    """The Lark grammar of one or more calls to ``tools`` (see the module's doc); ``tools`` must not be empty.
    ``opened``: the answer's ``[`` is already written (a prefill the grammar engine does not read)."""
    rules = Rules()
    calls = [rules.call(tool) for tool in tools]
    opening = "" if opened else '"[" '
    head = [f'start: {opening}call ({SEP} call)* "]"', f"call: {' | '.join(calls)}"]
    return "\n".join(head + rules.lines) + LITERALS


def literal(text: str) -> str:
    """``text`` as a Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


def python_literals(value: Any) -> list[str]:
    """The ways a JSON value is written as a Python literal (a string in either quote), as Lark literals."""
    if isinstance(value, str):
        return [literal(json.dumps(value, ensure_ascii=False)), literal(repr(value))]
    if isinstance(value, (bool, int, float)) or value is None:
        return [literal(repr(value))]  # True, 3, 2.5, None
    if isinstance(value, list):
        return [" ".join(['"["', f" {SEP} ".join(python_literals(v)[0] for v in value), '"]'])]
    if isinstance(value, dict):
        pairs = (f'{python_literals(str(k))[0]} ": " {python_literals(v)[0]}' for k, v in value.items())
        return [" ".join(['"{"', f" {SEP} ".join(pairs), '"}"'])]
    return ["any"]


class Rules:
    """The grammar's rules as they are made: one per tool, per argument position, per list or dict schema."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def rule(self, body: str) -> str:
        """A new rule with ``body`` (which may match nothing); its name."""
        name = f"r{len(self.lines) + 1}"
        self.lines.append(f"{name}: {body}")
        return name

    def call(self, tool: Tool) -> str:
        """The rule of one call to ``tool``: its name, ``(``, its keyword arguments, ``)``."""
        props: Mapping[str, Any] = tool.parameters.get("properties") or {}
        required = set(tool.parameters.get("required") or ())
        pairs = [(f"{literal(name + '=')} {self.value(schema)}", name in required) for name, schema in props.items()]
        return self.rule(f'{literal(tool.name + "(")} {self.items(pairs)} ")"')

    def items(self, pairs: list[tuple[str, bool]]) -> str:
        """``pairs`` (an item's expression, whether it is required) in order, each required one present, joined
        by ``SEP``: a rule's name, or ``""`` for no items.

        Two rules per position, ``first`` (nothing written yet: no separator before the item) and ``rest``
        (something written: a separator first), keep the grammar linear in the number of items.
        """
        first = rest = ""  # the rules of the next position ("" past the end)
        for at in reversed(range(len(pairs))):
            item, needed = pairs[at]
            tail = f" {rest}" if rest else ""
            if needed:
                first = self.rule(f"{item}{tail}")
            else:
                first = self.rule(f"{item}{tail} | {first}" if first else f"({item}{tail})?")
            if at:  # the first position is never written after a separator
                rest = self.rule(f"{SEP} {item}{tail}" if needed else f"({SEP} {item})?{tail}")
        return first

    def value(self, schema: Any) -> str:
        """The expression of a Python literal that fits ``schema``."""
        if not isinstance(schema, Mapping):
            return "any"
        if "const" in schema:
            return f"({' | '.join(python_literals(schema['const']))})"
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return f"({' | '.join(x for v in schema['enum'] for x in python_literals(v))})"
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                return f"({' | '.join(self.value(s) for s in schema[key])})"
        kind = schema.get("type")
        if isinstance(kind, list):
            return f"({' | '.join(self.value({**schema, 'type': k}) for k in kind)})" if kind else "any"
        if kind in SCALARS:
            return SCALARS[kind]
        if kind == "array":
            item = self.value(schema.get("items", {}))
            return self.rule(f'"[" {item} ({SEP} {item})* "]"' + ("" if schema.get("minItems") else ' | "[]"'))
        if kind == "object" and schema.get("properties"):
            required = set(schema.get("required") or ())
            pairs = [(f"({' | '.join(python_literals(k))}) \": \" {self.value(s)}", k in required)
                     for k, s in schema["properties"].items()]  # fmt: skip
            return self.rule(f'"{{" {self.items(pairs)} "}}"')
        return "any_dict" if kind == "object" else "any"


__all__ = ["SEP", "LITERALS", "Rules", "call_grammar", "literal", "python_literals"]
