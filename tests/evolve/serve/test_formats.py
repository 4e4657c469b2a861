"""Reading a structured answer: JSON of the requested kind or schema, or what is wrong with it in words."""

from __future__ import annotations

import pytest

from connectors import ConfigError
from evolve.serve.formats import read_json, response_format

CARD = {
    "type": "json_schema",
    "json_schema": {
        "name": "card",
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["name"],
        },
    },
}


def test_json_object_takes_an_object_with_or_without_a_fence_and_nothing_else() -> None:
    fmt = response_format({"type": "json_object"})
    assert fmt is not None
    assert read_json('```json\n{"città": "Zürich"}\n```', fmt) == ('{"città": "Zürich"}', "")
    assert read_json('  {"a": 1}  ', fmt) == ('{"a": 1}', "")
    assert read_json("[1, 2]", fmt)[1] == "it is JSON but not an object (a list)"
    assert read_json('Sure: {"a": 1}', fmt)[1].startswith("it is not JSON")


def test_json_schema_names_the_first_mismatch_and_where() -> None:
    fmt = response_format(CARD)
    assert fmt is not None and fmt.name == "card" and '"required": ["name"]' in fmt.instruction()
    described = response_format({**CARD, "json_schema": {**CARD["json_schema"], "description": "A city's card."}})
    assert described is not None and "JSON Schema (A city's card.): {" in described.instruction()
    assert read_json('{"name": "Ölberg", "tags": ["a"]}', fmt)[1] == ""
    assert (
        read_json('{"name": "Ölberg", "tags": [3]}', fmt)[1]
        == "it does not match the schema: 3 is not of type 'string' (at tags/0)"
    )


def test_text_is_no_format_and_a_malformed_one_is_a_clear_error() -> None:
    assert response_format(None) is None and response_format({"type": "text"}) is None
    with pytest.raises(ConfigError, match="must be text, json_object or json_schema"):
        response_format({"type": "yaml"})
    with pytest.raises(ConfigError, match="needs"):
        response_format({"type": "json_schema"})
    with pytest.raises(ConfigError, match="not a valid JSON Schema"):
        response_format({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "tuple"}}})
