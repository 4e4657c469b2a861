"""Where BFCL's data lives: the ``bfcl-eval`` package (the Berkeley Function Calling Leaderboard v4),
installed with ``pip install --no-deps bfcl-eval`` (its own pins would replace our numpy and faiss; the
data files and the executable multi-turn APIs need none of its dependencies).

Example:
    >>> rows = read_rows("simple_python")                      # doctest: +SKIP
    >>> rows[0]["id"], rows[0]["question"][0][0]["role"]       # doctest: +SKIP
    ('simple_python_0', 'user')
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
from pathlib import Path
from typing import Any

from connectors.errors import ConfigError
from connectors.tools import Tool

INSTALL_HINT = "pip install --no-deps bfcl-eval  (`make test` and `make bench` install it)"
VERSION = "BFCL_v4"
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple", "multi_turn_base")
"""The categories Evolve reads (the file ``BFCL_v4_<category>.json`` and its ``possible_answer``)."""


def data_dir() -> Path:
    """The ``data`` folder of the installed ``bfcl-eval``; ConfigError with the install line otherwise."""
    if importlib.util.find_spec("bfcl_eval") is None:
        raise ConfigError(f"BFCL needs the bfcl-eval package: {INSTALL_HINT}")
    return Path(str(importlib.resources.files("bfcl_eval") / "data"))


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_rows(category: str) -> list[dict[str, Any]]:
    """The questions of ``category`` in file order, each with its ``ground_truth`` (from
    ``possible_answer/``) added when the category has one."""
    if category not in CATEGORIES:
        raise ConfigError(f"unknown BFCL category {category!r}; expected one of {', '.join(CATEGORIES)}")
    folder = data_dir()
    rows = _read_jsonl(folder / f"{VERSION}_{category}.json")
    answers = folder / "possible_answer" / f"{VERSION}_{category}.json"
    if answers.exists():
        truth = {r["id"]: r["ground_truth"] for r in _read_jsonl(answers)}
        for row in rows:
            if row["id"] in truth:
                row["ground_truth"] = truth[row["id"]]
    return rows


def function_docs(name: str) -> list[dict[str, Any]]:
    """The function documents of one multi-turn API class file (``multi_turn_func_doc/<name>.json``)."""
    return _read_jsonl(data_dir() / "multi_turn_func_doc" / f"{name}.json")


_TYPES = {"dict": "object", "float": "number", "tuple": "array"}
"""BFCL's type names that JSON Schema spells otherwise; ``any`` means no type constraint."""


def json_schema(schema: Any) -> Any:
    """A BFCL parameter schema (Python-flavoured types: ``dict``, ``float``, ``tuple``, ``any``) as JSON
    Schema, recursively; every other key is kept.

    Example:
        >>> json_schema({"type": "dict", "properties": {"x": {"type": "float"}, "v": {"type": "any"}}})
        {'type': 'object', 'properties': {'x': {'type': 'number'}, 'v': {}}}
    """
    if isinstance(schema, list):
        return [json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            if value != "any":
                out[key] = _TYPES.get(value, value)
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf"):
            out[key] = json_schema(value)
        else:
            out[key] = value
    return out


def tool_of(function: dict[str, Any], fn: Any = None) -> Tool:
    """One BFCL function document as a ``Tool`` (``fn`` runs it; None when calls are only checked)."""
    params = json_schema(function.get("parameters") or {"type": "dict", "properties": {}})
    params.setdefault("type", "object")
    return Tool(function["name"], function.get("description", ""), params, fn)


__all__ = ["CATEGORIES", "INSTALL_HINT", "VERSION", "data_dir", "function_docs", "json_schema", "read_rows", "tool_of"]
