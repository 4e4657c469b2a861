"""Recorded answers to BFCL rows for ``bench.bfcl_checker_agreement``: right ones and wrong ones, made
from each row's ground truth by named variations with a fixed seed.

Right: the reference call (every omittable argument left out), the omittable arguments given, another
allowed value, a string in other case and punctuation, an int for a float, a parallel answer reordered.
Wrong: another function name, a required argument missing, an unknown argument, a string or a float
for an integer, a value not allowed, the wrong number of calls, a list element of the wrong type or
value, a dict value changed. Corners: cases where BFCL's rules surprise (see ``CORNERS``). A variation that does not apply to a row is skipped; for each row the
least used right one and the least used wrong one that apply are taken (ties broken by the seed).
"""

from __future__ import annotations

import copy
import itertools
import random
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from evolve.envs.bfcl.ast_check import Call, reference_calls
from evolve.envs.bfcl.data import read_rows

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple")
Row = dict[str, Any]
Variation = Callable[[Row, list[Call], random.Random], list[Call] | None]
Slot = tuple[int, str, str, dict[str, Any], list[Any]]
"""(call index, function name, argument, its schema, its allowed values) of one argument in an answer."""


def _schema(row: Row, name: str, param: str) -> dict[str, Any]:
    function = next(f for f in row["function"] if f["name"] == name)
    props: dict[str, Any] = function["parameters"].get("properties", {})
    return props.get(param, {})


def _slots(row: Row, calls: list[Call], want: Callable[[dict[str, Any], list[Any], Any], bool]) -> list[Slot]:
    """The arguments given in ``calls`` whose schema, allowed values and value ``want`` accepts."""
    out: list[Slot] = []
    for index, (call, truth) in enumerate(zip(calls, row["ground_truth"], strict=True)):
        name, args = next(iter(call.items()))
        allowed = next(iter(truth.values()))
        for param, value in args.items():
            schema = _schema(row, name, param)
            if param in allowed and want(schema, allowed[param], value):
                out.append((index, name, param, schema, allowed[param]))
    return out


def _set(calls: list[Call], slot: Slot, value: Any) -> list[Call]:
    out = copy.deepcopy(calls)
    index, name, param = slot[:3]
    out[index][name][param] = value
    return out


def _pick_and_set(
    row: Row, calls: list[Call], rng: random.Random, want: Any, change: Callable[[Any, Slot], Any]
) -> list[Call] | None:
    slots = _slots(row, calls, want)
    if not slots:
        return None
    slot = rng.choice(slots)
    value = change(next(iter(calls[slot[0]].values()))[slot[2]], slot)
    return None if value is _SKIP else _set(calls, slot, value)


_SKIP = object()


# ---------------------------------------------------------------- right variations
def optional_given(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    out = copy.deepcopy(calls)
    changed = False
    for call, truth in zip(out, row["ground_truth"], strict=True):
        name, args = next(iter(call.items()))
        for param, options in next(iter(truth.values())).items():
            given = [o for o in options if o != ""]
            if param not in args and given and _schema(row, name, param):
                args[param] = given[0]
                changed = True
    return out if changed else None


def alternative_value(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    def change(value: Any, slot: Slot) -> Any:
        others = [o for o in slot[4] if o != "" and o != value]
        return rng.choice(others) if others else _SKIP

    return _pick_and_set(row, calls, rng, lambda s, a, v: len([o for o in a if o != ""]) > 1, change)


def _restyle(text: str, rng: random.Random) -> str:
    styled = rng.choice([str.upper, str.lower, str.title, str.swapcase])(text)
    return (
        styled.replace(" ", rng.choice(["_", "-", "  ", ""])) if " " in styled else styled + rng.choice([".", "", "-"])
    )


def string_restyled(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    return _pick_and_set(
        row,
        calls,
        rng,
        lambda s, a, v: s.get("type") == "string" and isinstance(v, str) and v.strip(),
        lambda v, slot: _restyle(v, rng),
    )


def list_strings_restyled(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    return _pick_and_set(
        row,
        calls,
        rng,
        lambda s, a, v: isinstance(v, list) and any(isinstance(x, str) and x.strip() for x in v),
        lambda v, slot: [_restyle(x, rng) if isinstance(x, str) and x.strip() else x for x in v],
    )


def int_for_float(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    return _pick_and_set(
        row,
        calls,
        rng,
        lambda s, a, v: s.get("type") == "float" and type(v) is float and v.is_integer(),
        lambda v, slot: int(v),
    )


def reordered(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    """Another order of the calls (None when every order is the same, as with identical calls)."""
    if len(calls) > 6:  # 7! orders is too many to list; reversing does
        backwards = copy.deepcopy(calls[::-1])
        return backwards if backwards != calls else None
    orders = [o for o in itertools.permutations(range(len(calls))) if [calls[i] for i in o] != calls]
    return [copy.deepcopy(calls[i]) for i in rng.choice(orders)] if orders else None


def dict_restyled(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    def change(value: dict[str, Any], slot: Slot) -> Any:
        items = [(k, _restyle(v, rng) if isinstance(v, str) and v.strip() else v) for k, v in value.items()]
        rng.shuffle(items)
        return dict(items)

    return _pick_and_set(row, calls, rng, lambda s, a, v: isinstance(v, dict) and len(v) > 0, change)


# ---------------------------------------------------------------- wrong variations
def wrong_name(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    out = copy.deepcopy(calls)
    index = rng.randrange(len(out))
    name, args = next(iter(out[index].items()))
    others = [f["name"] for f in row["function"] if f["name"] != name]
    out[index] = {(rng.choice(others) if others and row["category"] == "multiple" else f"{name}_v2"): args}
    return out


def missing_required(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    options = []
    for index, call in enumerate(calls):
        name, args = next(iter(call.items()))
        function = next(f for f in row["function"] if f["name"] == name)
        options += [(index, name, p) for p in function["parameters"].get("required", []) if p in args]
    if not options:
        return None
    index, name, param = rng.choice(options)
    out = copy.deepcopy(calls)
    del out[index][name][param]
    return out


def unknown_argument(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    out = copy.deepcopy(calls)
    next(iter(out[rng.randrange(len(out))].values()))[rng.choice(["verbose", "extra_option", "mode_x"])] = True
    return out


def _integer(s: dict[str, Any], a: list[Any], v: Any) -> bool:
    return s.get("type") == "integer" and type(v) is int


def string_for_int(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    return _pick_and_set(row, calls, rng, _integer, lambda v, slot: str(v))


def float_for_int(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    return _pick_and_set(row, calls, rng, _integer, lambda v, slot: float(v) + rng.choice([0.0, 0.5]))


def _not_allowed(value: Any, slot: Slot) -> Any:
    if type(value) is bool:
        return not value
    if type(value) in (int, float):
        return value * 3 + 7
    if isinstance(value, str):
        return value + " Springfield"
    return _SKIP


def value_not_allowed(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    return _pick_and_set(row, calls, rng, lambda s, a, v: type(v) in (bool, int, float, str), _not_allowed)


def wrong_count(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    if len(calls) > 1 and rng.random() < 0.7:
        out = copy.deepcopy(calls)
        del out[rng.randrange(len(out))]
        return out
    return copy.deepcopy(calls) + [copy.deepcopy(rng.choice(calls))] if rng.random() < 0.8 else []


def _plain_list(s: dict[str, Any], a: list[Any], v: Any) -> bool:
    items = s.get("items") or {}
    return isinstance(v, list) and bool(v) and items.get("type") != "dict" and not any(isinstance(x, dict) for x in v)


def element_wrong_type(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    def change(value: list[Any], slot: Slot) -> list[Any]:
        i = rng.randrange(len(value))
        return value[:i] + [7 if isinstance(value[i], str) else "seven"] + value[i + 1 :]

    return _pick_and_set(row, calls, rng, _plain_list, change)


def element_wrong_value(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    def change(value: list[Any], slot: Slot) -> Any:
        i = rng.randrange(len(value))
        new = _not_allowed(value[i], slot)
        return _SKIP if new is _SKIP else value[:i] + [new] + value[i + 1 :]

    return _pick_and_set(row, calls, rng, _plain_list, change)


def dict_value_wrong(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    def change(value: dict[str, Any], slot: Slot) -> Any:
        keys = [k for k, v in value.items() if type(v) in (bool, int, float, str)]
        if not keys:
            return _SKIP
        key = rng.choice(keys)
        return {**value, key: _not_allowed(value[key], slot)}

    return _pick_and_set(row, calls, rng, lambda s, a, v: isinstance(v, dict) and len(v) > 0, change)


# ---------------------------------------------------------------- BFCL's corners (verdict known from its rules)
def _omittable(row: Row, calls: list[Call], kinds: tuple[str, ...]) -> list[Slot]:
    out: list[Slot] = []
    for index, (call, truth) in enumerate(zip(calls, row["ground_truth"], strict=True)):
        name, args = next(iter(call.items()))
        for param, options in next(iter(truth.values())).items():
            schema = _schema(row, name, param)
            if param not in args and "" in options and schema.get("type") in kinds:
                out.append((index, name, param, schema, options))
    return out


def _fill_omitted(kinds: tuple[str, ...], value: Any) -> Variation:
    def fill(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
        slots = _omittable(row, calls, kinds)
        return _set(calls, rng.choice(slots), copy.deepcopy(value)) if slots else None

    return fill


def ints_in_float_list(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    def floats(s: dict[str, Any], a: list[Any], v: Any) -> bool:
        listed = isinstance(v, list) and v and all(type(x) in (int, float) for x in v)
        return bool(listed) and (s.get("items") or {}).get("type") == "float"

    return _pick_and_set(row, calls, rng, floats, lambda v, slot: [round(x) for x in v])


def float_in_dict_for_int(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    def has_int(s: dict[str, Any], a: list[Any], v: Any) -> bool:
        return isinstance(v, dict) and any(type(x) is int for x in v.values())

    def change(value: dict[str, Any], slot: Slot) -> Any:
        return {k: float(x) if type(x) is int else x for k, x in value.items()}

    return _pick_and_set(row, calls, rng, has_int, change)


def dict_key_case(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    def change(value: dict[str, Any], slot: Slot) -> Any:
        keys = [k for k in value if isinstance(k, str) and k.upper() != k]
        return {(k.upper() if k == keys[0] else k): x for k, x in value.items()} if keys else _SKIP

    return _pick_and_set(row, calls, rng, lambda s, a, v: isinstance(v, dict) and len(v) > 0, change)


def string_for_float(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    return _pick_and_set(
        row, calls, rng, lambda s, a, v: s.get("type") == "float" and type(v) is float, lambda v, slot: str(v)
    )


def bool_for_int(row: Row, calls: list[Call], rng: random.Random) -> list[Call] | None:
    return _pick_and_set(row, calls, rng, _integer, lambda v, slot: bool(v))


CORNERS: dict[str, Variation] = {
    "empty_string_for_omittable": _fill_omitted(("string",), ""),
    "punctuation_for_omittable": _fill_omitted(("string",), " - "),
    "empty_list_for_omittable": _fill_omitted(("array",), []),
    "none_for_omittable": _fill_omitted(("string", "integer", "float", "boolean", "array", "dict"), None),
    "ints_in_float_list": ints_in_float_list, "float_in_dict_for_int": float_in_dict_for_int,
    "dict_key_case": dict_key_case, "string_for_float": string_for_float, "bool_for_int": bool_for_int,
}  # fmt: skip
"""Where a naive checker and BFCL's part: ""-like strings and [] pass for an omittable argument (BFCL
standardises "" among the allowed values, and reads it as an empty list); ints inside a list of floats
fail (no promotion one level down), while a float for an int inside a dict passes (compared by ==)."""

RIGHT: dict[str, Variation] = {
    "reference": lambda row, calls, rng: copy.deepcopy(calls),
    "optional_given": optional_given, "alternative_value": alternative_value, "string_restyled": string_restyled,
    "list_strings_restyled": list_strings_restyled, "int_for_float": int_for_float, "reordered": reordered,
    "dict_restyled": dict_restyled,
}  # fmt: skip
WRONG: dict[str, Variation] = {
    "wrong_name": wrong_name, "missing_required": missing_required, "unknown_argument": unknown_argument,
    "string_for_int": string_for_int, "float_for_int": float_for_int, "value_not_allowed": value_not_allowed,
    "wrong_count": wrong_count, "element_wrong_type": element_wrong_type,
    "element_wrong_value": element_wrong_value, "dict_value_wrong": dict_value_wrong,
}  # fmt: skip


def _least_used(
    kinds: dict[str, Variation], used: Counter[str], row: Row, calls: list[Call], rng: random.Random
) -> tuple[str, list[Call]] | None:
    order = sorted(kinds, key=lambda k: (used[k], rng.random()))
    for kind in order:
        made = kinds[kind](row, calls, rng)
        if made is not None:
            used[kind] += 1
            return kind, made
    return None


def make_answers(*, rows_per_category: int = 60, seed: int = 0) -> Iterator[dict[str, Any]]:
    """For each of ``rows_per_category`` sampled rows of every category: one right answer, one wrong, and
    one from ``CORNERS`` (``intended_valid`` None: BFCL's rules decide)."""
    rng = random.Random(seed)
    used: Counter[str] = Counter()
    for category in CATEGORIES:
        rows = read_rows(category)
        for index in sorted(rng.sample(range(len(rows)), min(rows_per_category, len(rows)))):
            row = {**rows[index], "category": category}
            calls = reference_calls(row["function"], row["ground_truth"])
            for intended, kinds in ((True, RIGHT), (False, WRONG), (None, CORNERS)):
                made = _least_used(kinds, used, row, calls, rng)
                if made is None:
                    continue
                kind, output = made
                yield {
                    "id": f"{row['id']}:{kind}", "category": category, "kind": kind, "intended_valid": intended,
                    "model_output": output, "functions": row["function"], "ground_truth": row["ground_truth"],
                }  # fmt: skip
