"""BFCL's AST check of function calls, for its Python categories, written from BFCL's rules.

A call is ``{name: {argument: value}}`` (BFCL's decoded form); a row's ``ground_truth`` lists one
``{name: {argument: [allowed values]}}`` per expected call. ``check_calls`` passes the calls when:

- the count is right and the names match: ``simple`` categories one call to the (only) function;
  ``multiple`` one call to the ground truth's function; ``parallel`` and ``parallel_multiple`` one call
  per expected call, in any order (each expected call, in turn, takes the first unmatched call that fits);
- every required argument is there, no argument is unknown to the function or absent from the answer,
  and every argument the answer needs is given ("" among the allowed values lets it be left out);
- each value has the parameter's type under BFCL's Python mapping (an int is accepted for a float; a
  tuple is a list; elements of an array are checked one level deep; a value of the allowed values' own
  type is a "variable" and must then equal one of them exactly);
- each value is allowed: strings compare after ``standardise`` (case, spaces and ``,./-_*^`` ignored),
  lists element-wise (their strings standardised), dicts key by key against each allowed dict.

``decode_answer`` reads a model's answer text into such calls (see ``evolve.envs.bfcl.decode``).

Example:
    >>> fn = {"name": "area", "parameters": {"type": "dict", "properties": {"base": {"type": "integer"}},
    ...       "required": ["base"]}}
    >>> check_calls([fn], [{"area": {"base": [10]}}], [{"area": {"base": 12}}], "simple_python")
    CheckVerdict(valid=False, error="wrong value for 'base': got 12, expected one of [10]")
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connectors.prompted_tools import call_text
from connectors.tools import ToolCall
from evolve.envs.bfcl.decode import Call, decode_answer

PYTHON_TYPES: dict[str, type] = {
    "string": str, "integer": int, "float": float, "boolean": bool,
    "array": list, "tuple": list, "dict": dict, "any": str,
}  # fmt: skip
"""BFCL's parameter types as the Python types a decoded value must have (``any`` is checked as a string)."""

_IGNORED = re.compile(r"[ ,./\-_*^]")


@dataclass(frozen=True)
class CheckVerdict:
    """Whether the calls pass, and if not the first thing wrong, in words an agent can act on."""

    valid: bool
    error: str = ""


def standardise(text: str) -> str:
    """A string as BFCL compares it: spaces and ``,./-_*^`` removed, lower case, ``'`` read as ``"``.

    Example:
        >>> standardise("April 1, 2024") == standardise("april 1 2024")
        True
    """
    return _IGNORED.sub("", text).lower().replace("'", '"')


def check_calls(
    functions: Sequence[Mapping[str, Any]],
    ground_truth: Sequence[Mapping[str, Any]],
    calls: Sequence[Any],
    category: str,
) -> CheckVerdict:
    """Check ``calls`` against a row's ``ground_truth`` under ``category``'s rule (see the module doc).

    ``category`` picks the rule by name, as BFCL does: one containing "parallel" is checked in any
    order, one containing "multiple" as one call among several functions, any other as one simple call.
    """
    problem = _shape_problem(calls)
    if problem is None:
        if "parallel" in category:
            problem = _check_unordered(functions, ground_truth, calls)
        elif "multiple" in category:
            problem = _check_multiple(functions, ground_truth, calls)
        elif len(calls) != 1:
            problem = f"expected exactly one function call, got {len(calls)}"
        else:
            problem = _check_call(functions[0], calls[0], ground_truth[0])
    return CheckVerdict(problem is None, problem or "")


def _shape_problem(calls: Sequence[Any]) -> str | None:
    if not isinstance(calls, list):
        return f"the calls must be a list of {{name: {{argument: value}}}}, got {type(calls).__name__}"
    for call in calls:
        if not (isinstance(call, dict) and len(call) == 1 and isinstance(next(iter(call.values())), dict)):
            return f"each call must be {{name: {{argument: value}}}}, got {_show(call)}"
    return None


def _find(functions: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    return next((f for f in functions if f.get("name") == name), None)


def _check_multiple(
    functions: Sequence[Mapping[str, Any]], truth: Sequence[Mapping[str, Any]], calls: Sequence[Call]
) -> str | None:
    if len(calls) != len(truth):
        return f"expected {len(truth)} function call{'s' if len(truth) != 1 else ''}, got {len(calls)}"
    name = next(iter(truth[0]))
    function = _find(functions, name)
    if function is None:
        return f"the expected function {name!r} is not among the functions given"
    return _check_call(function, calls[0], truth[0])


def _check_unordered(
    functions: Sequence[Mapping[str, Any]], truth: Sequence[Mapping[str, Any]], calls: Sequence[Call]
) -> str | None:
    """BFCL's greedy matching: each expected call, in order, takes the first unmatched call that passes."""
    if len(calls) != len(truth):
        return f"expected {len(truth)} function calls, got {len(calls)}"
    matched: set[int] = set()
    for expected in truth:
        name = next(iter(expected))
        function = _find(functions, name)
        if function is None:
            return f"the expected function {name!r} is not among the functions given"
        problems: list[str] = []
        for index, call in enumerate(calls):
            if index in matched:
                continue
            problem = _check_call(function, call, expected)
            if problem is None:
                matched.add(index)
                break
            problems.append(problem)
        else:
            wanted = call_text(ToolCall(name, reference_arguments(function, expected)))
            named = [p for p in problems if not p.startswith("called ")]  # a same-name call says most
            return f"no call matches the expected {wanted}: {(named or problems)[0]}"
    return None


def _check_call(function: Mapping[str, Any], call: Call, expected: Mapping[str, Any]) -> str | None:
    """One call against one function and one expected call's allowed values (BFCL's simple check)."""
    allowed: Mapping[str, Any] = next(iter(expected.values()))
    name = function["name"]
    if name not in call:
        return f"called {next(iter(call), '?')!r}, expected a call to {name!r}"
    args = call[name]
    parameters = function.get("parameters") or {}
    properties = parameters.get("properties") or {}
    for param in parameters.get("required") or ():
        if param not in args:
            return f"{name} is missing the required argument {param!r}"
    for param, value in args.items():
        if param not in properties:
            return f"unknown argument {param!r} for {name} (it takes {', '.join(properties) or 'no arguments'})"
        if param not in allowed:
            return f"argument {param!r} should not be given here"
        problem = _check_argument(param, value, properties[param], allowed[param])
        if problem is not None:
            return problem
    for param, options in allowed.items():
        if param not in args and "" not in options:
            return f"{name} is missing the argument {param!r}: expected {_options(options)}"
    return None


def _check_argument(param: str, value: Any, schema: Mapping[str, Any], options: list[Any]) -> str | None:
    kind = schema.get("type")
    expected = PYTHON_TYPES.get(kind) if isinstance(kind, str) else None
    if expected is None:
        return f"cannot check {param!r}: its type {kind!r} is not one of BFCL's ({', '.join(PYTHON_TYPES)})"
    item_kind = (schema.get("items") or {}).get("type") if kind in ("array", "tuple") else None
    inner = PYTHON_TYPES.get(item_kind) if isinstance(item_kind, str) else None
    if kind == "tuple" and type(value) is tuple:
        value = list(value)
    if kind == "float" and type(value) is int:
        value = float(value)  # Python's own int → float promotion
    answer_type = next((type(o) for o in options if o != ""), None)
    variable = answer_type is not None and answer_type is not expected
    same_type = type(value) is expected  # a bool, so that mypy keeps ``value`` as Any
    if same_type:
        if inner is not None and not _elements_fit(value, options, inner):
            return f"wrong element type in {param!r}: expected a list of {item_kind}, got {_show(value)}"
    elif answer_type is not None and type(value) is answer_type:
        variable = True  # the allowed values are of another type than the schema says: compare exactly
    else:
        return f"wrong type for {param!r}: got {_type_name(value)} {_show(value)}, expected {kind}"
    if not variable:
        if expected is dict:
            return _check_dict(param, value, options)
        if expected is list and inner is dict:
            return _check_dict_list(param, value, options)
        if expected is str:
            return _check_string(param, value, options)
        if expected is list:
            return _check_list(param, value, options)
    if value not in options:
        return f"wrong value for {param!r}: got {_show(value)}, expected {_options(options)}"
    return None


def _elements_fit(value: list[Any], options: list[Any], inner: type) -> bool:
    """One level deep: every element has the item type (or that of one allowed list's elements)."""
    for option in options:
        if type(option) is not list:
            return True  # BFCL lets a non-list allowed value (the "" of an omittable one) pass any elements
        hint = next((type(o) for o in option if o != ""), None)
        if all(type(v) is inner or (hint is not None and type(v) is hint) for v in value):
            return True
    return False


def _std(value: Any) -> Any:
    return standardise(value) if type(value) is str else value


def _check_string(param: str, value: str, options: list[Any]) -> str | None:
    if standardise(value) in [standardise(o) for o in options if type(o) is str]:
        return None
    return f"wrong value for {param!r}: got {value!r}, expected {_options(options)} (case and punctuation aside)"


def _check_list(param: str, value: list[Any], options: list[Any]) -> str | None:
    got = [_std(v) for v in value]
    if any(isinstance(o, (list, str)) and got == [_std(v) for v in o] for o in options):
        return None
    return f"wrong value for {param!r}: got {_show(value)}, expected {_options(options)}"


def _check_dict(param: str, value: dict[Any, Any], options: list[Any]) -> str | None:
    problem: str | None = f"wrong value for {param!r}: got {_show(value)}, expected {_options(options)}"
    for option in options:
        if option != "":
            problem = _dict_problem(param, value, option)
            if problem is None:
                return None
    return problem


def _dict_problem(param: str, value: dict[Any, Any], option: Any) -> str | None:
    if not isinstance(option, dict):
        return f"wrong value for {param!r}: got {_show(value)}, expected {_show(option)}"
    for key, item in value.items():
        if key not in option:
            return f"unexpected key {key!r} in {param!r} (allowed: {', '.join(map(repr, option))})"
        wanted = option[key] if isinstance(option[key], list) else [option[key]]
        if _std(item) not in [_std(w) for w in wanted]:
            return f"wrong value for {param}[{key!r}]: got {_show(item)}, expected {_options(wanted)}"
    for key, wanted in option.items():
        if key not in value and "" not in wanted:
            return f"{param!r} is missing the key {key!r}: expected {_options(wanted)}"
    return None


def _check_dict_list(param: str, value: list[Any], options: list[Any]) -> str | None:
    problem = f"wrong value for {param!r}: got {_show(value)}, expected {_options(options)}"
    for option in options:
        if not isinstance(option, (list, str)):
            continue
        if len(value) != len(option):
            problem = f"wrong number of items in {param!r}: got {len(value)}, expected {len(option)}"
            continue
        for index, (item, want) in enumerate(zip(value, option, strict=True)):
            where = f"{param}[{index}]"
            found = _check_dict(where, item, [want]) if isinstance(item, dict) else f"{where} must be a dict"
            if found is not None:
                problem = found
                break
        else:
            return None
    return problem


# ---------------------------------------------------------------- text for feedback
def _show(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(value: Any) -> str:
    return {str: "string", int: "integer", float: "float", bool: "boolean", list: "array", dict: "dict"}.get(
        type(value), type(value).__name__
    )


def _options(options: list[Any]) -> str:
    given = [o for o in options if o != ""]
    text = f"one of {_show(given)}" if given else "it left out"
    return text + (" (or left out)" if given and len(given) < len(options) else "")


def reference_arguments(function: Mapping[str, Any], expected: Mapping[str, Any]) -> dict[str, Any]:
    """A correct call's arguments from one expected call: the first allowed value of each argument,
    left out where "" allows it and the function does not require it."""
    allowed: Mapping[str, Any] = next(iter(expected.values()))
    required = set((function.get("parameters") or {}).get("required") or ())
    return {p: _first(options) for p, options in allowed.items() if not ("" in options and p not in required)}


def _first(options: list[Any]) -> Any:
    value = next((o for o in options if o != ""), "")
    if isinstance(value, dict):
        return {k: _first(v) for k, v in value.items() if isinstance(v, list) and v != [""] and v}
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [_first([v]) for v in value]
    return value


def reference_calls(functions: Sequence[Mapping[str, Any]], ground_truth: Sequence[Mapping[str, Any]]) -> list[Call]:
    """One correct answer to a row: a call per expected call (see ``reference_arguments``)."""
    out: list[Call] = []
    for expected in ground_truth:
        name = next(iter(expected))
        function = _find(functions, name) or {"name": name}
        out.append({name: reference_arguments(function, expected)})
    return out


def calls_text(calls: Sequence[Call]) -> str:
    """Calls in BFCL's call syntax: ``f(a=1)`` for one, ``[f(a=1), g(b='x')]`` for several."""
    texts = [call_text(ToolCall(name, args)) for call in calls for name, args in call.items()]
    return texts[0] if len(texts) == 1 else f"[{', '.join(texts)}]"


__all__ = [
    "PYTHON_TYPES", "Call", "CheckVerdict", "calls_text", "check_calls", "decode_answer", "reference_arguments",
    "reference_calls", "standardise",
]  # fmt: skip
