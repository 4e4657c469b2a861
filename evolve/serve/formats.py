"""Structured answers for ``evolve serve``: OpenAI's ``response_format`` (``json_object``, ``json_schema``)
for any backend, by instruction, validation and retry.

The answering agent is told the format; its answer is read as JSON (a Markdown code fence around it is
taken off) and, for ``json_schema``, checked against the schema. An answer that fails is sent back with
what was wrong, up to ``ATTEMPTS`` tries in all; one that still fails is a ``ParseError``, never free
text passed off as JSON. An OpenAI-compatible backend also gets the format itself (its server
constrains decoding), and so does a local model, which generates the answer under a grammar compiled from
the schema (``connectors.constrained``: valid on the first try); their answers are checked all the same.

Example:
    >>> fmt = response_format({"type": "json_schema", "json_schema": {"name": "city",
    ...     "schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}})
    >>> read_json('```json\\n{"name": "Zürich"}\\n```', fmt)
    ('{"name": "Zürich"}', '')
    >>> read_json('{"town": "Zürich"}', fmt)[1]
    "it does not match the schema: 'name' is a required property"
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from connectors import ConfigError

ATTEMPTS = 3
"""Answers asked for in all before an answer that is still not valid JSON is an error."""

FENCE = re.compile(r"^\s*```(?:json)?\s*\n?(.*?)\n?```\s*$", re.S)


@dataclass(frozen=True)
class Format:
    """A requested JSON format: ``schema`` is None for ``json_object`` (any JSON object)."""

    kind: str
    name: str = ""
    schema: Mapping[str, Any] | None = None
    description: str = ""

    def instruction(self) -> str:
        """What the answering agent is told, after the request (with the schema's description, if it has one)."""
        if self.schema is None:
            return "Reply with one JSON object only: no prose, no code fence."
        schema = json.dumps(self.schema, ensure_ascii=False)
        about = f" ({self.description})" if self.description else ""
        head = "Reply with one JSON value only (no prose, no code fence) that matches this JSON Schema"
        return f"{head}{about}: {schema}"


def response_format(value: Mapping[str, Any] | None) -> Format | None:
    """The format a request asked for (None for text); ConfigError names what is malformed."""
    if value is None or value.get("type") == "text":
        return None
    kind = value.get("type")
    if kind == "json_object":
        return Format("json_object")
    if kind != "json_schema":
        raise ConfigError(f"response_format.type must be text, json_object or json_schema, got {kind!r:.80}")
    spec = value.get("json_schema")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("schema", {}), Mapping):
        raise ConfigError("response_format json_schema needs {'json_schema': {'name': ..., 'schema': {...}}}")
    schema = dict(spec.get("schema") or {})
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as e:
        raise ConfigError(f"response_format.json_schema.schema is not a valid JSON Schema: {e.message}") from None
    return Format("json_schema", str(spec.get("name") or ""), schema, str(spec.get("description") or ""))


def read_json(text: str, fmt: Format) -> tuple[str, str]:
    """``(json_text, "")`` for an answer in the format, else ``("", what is wrong)``."""
    fenced = FENCE.match(text)
    body = (fenced.group(1) if fenced else text).strip()
    try:
        value = json.loads(body)
    except ValueError as e:
        return "", f"it is not JSON ({e})"
    if fmt.schema is None:
        if not isinstance(value, dict):
            return "", f"it is JSON but not an object (a {type(value).__name__})"
        return body, ""
    from jsonschema import Draft202012Validator

    errors = sorted(Draft202012Validator(fmt.schema).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        where = "/".join(str(p) for p in errors[0].path)
        return "", f"it does not match the schema: {errors[0].message}" + (f" (at {where})" if where else "")
    return body, ""


def retry_note(problem: str, fmt: Format) -> str:
    """What an answer that failed is told before the next try."""
    return f"Your last reply could not be used: {problem}. {fmt.instruction()}"


__all__ = ["ATTEMPTS", "Format", "read_json", "response_format", "retry_note"]
