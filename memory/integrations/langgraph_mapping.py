"""How LangGraph's store model maps onto the memory store: namespaces, keys, values and filters.

Pure functions (no LangGraph import), used by ``memory.integrations.langgraph_store``:

- a LangGraph namespace is a tuple of labels, none of which may contain ``"."``; ours is free text.
  The tuple ``("users", "alice", "memories")`` is the store namespace ``"users.alice.memories"``, and
  back: a store namespace splits on ``"."`` into labels (one with an empty label has no tuple).
- a key names one item of a namespace. Each stored version of it is one memory whose id starts
  with a prefix derived from ``(namespace, key)`` and ends with a fresh time-ordered id, so the
  versions of a key are one index range scan away and the newest sorts last. Ids are never reused:
  a process caching a memory's text by id can never see another version's text under it.
- a value is a JSON object; it is kept whole in the memory's ``meta`` and read back unchanged.
- a search filter is LangGraph's: exact matches on top-level fields, nested objects and lists
  compared as wholes, and the operators ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``.

Example:
    >>> to_namespace(("users", "alice")), to_labels("users.alice")
    ('users.alice', ('users', 'alice'))
    >>> len(key_prefix("users.alice", "profile")), key_prefix("users.alice", "profile").startswith(KEY_PREFIX)
    (32, True)
    >>> matches_filter({"kind": "fact", "stars": 4}, {"kind": "fact", "stars": {"$gte": 3}})
    True
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from connectors.errors import ConfigError
from memory.write.checks import check_namespace, new_id

SEPARATOR = "."
KEY_PREFIX = "lg"
PREFIX_LENGTH = 32  # "lg" + 30 hex digits; + new_id()'s 32 fills the store's 64-character ids
META_KEY = "langgraph"  # where an adapter-written memory keeps its key, value and first creation time
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def to_namespace(labels: Sequence[str]) -> str:
    """The store namespace of a LangGraph namespace tuple: the labels joined by ``"."``."""
    if isinstance(labels, str) or not labels:
        raise ConfigError(f"a LangGraph namespace must be a non-empty tuple of labels, got {labels!r:.80}")
    for label in labels:
        if not isinstance(label, str) or not label or SEPARATOR in label or "\x00" in label:
            raise ConfigError(
                f"namespace labels must be non-empty strings without '.' or NUL, got {label!r:.80} in {labels!r:.80}"
            )
    return check_namespace(SEPARATOR.join(labels))


def to_labels(namespace: str) -> tuple[str, ...] | None:
    """The LangGraph tuple of a store namespace; None when it has an empty label (``"a..b"``)."""
    labels = tuple(namespace.split(SEPARATOR))
    return labels if all(labels) else None


def key_prefix(namespace: str, key: str) -> str:
    """The id prefix shared by every version of ``key`` in ``namespace`` (32 characters)."""
    digest = hashlib.sha256(f"{namespace}\x00{key}".encode()).hexdigest()
    return KEY_PREFIX + digest[: PREFIX_LENGTH - len(KEY_PREFIX)]


def version_id(prefix: str) -> str:
    """A fresh id for a new version of the key whose prefix this is (sorts after older versions)."""
    return prefix + new_id()


def prefix_bounds(prefix: str) -> tuple[str, str]:
    """``lo <= id < hi`` selects exactly the ids starting with ``prefix``: the tail is lowercase hex,
    so ``"g"`` sorts after every tail in byte order and in the usual text collations alike."""
    return prefix, prefix + "g"


def canonical(value: Mapping[str, Any]) -> str:
    """A value's canonical JSON, to tell whether a put changes anything."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def check_value(value: object) -> dict[str, Any]:
    """A put's value as a plain dict: a mapping with string keys, JSON-serialisable."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"a LangGraph value must be a mapping (a JSON object), got {type(value).__name__}")
    out = dict(value)
    bad = [k for k in out if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"a LangGraph value's keys must be strings, got {bad[:3]!r:.80}")
    try:
        json.dumps(out)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"a LangGraph value must be JSON-serialisable: {e}") from e
    return out


def value_text(value: Mapping[str, Any]) -> str:
    """The text of a whole value: its string leaves in key order, one a line (its JSON when it has none)."""
    leaves: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str):
            if node.strip():
                leaves.append(node.strip())
        elif isinstance(node, Mapping):
            for k in sorted(node):
                walk(node[k])
        elif isinstance(node, (list, tuple)):
            for child in node:
                walk(child)

    walk(value)
    return "\n".join(leaves) if leaves else canonical(value)


def matches_namespace(labels: tuple[str, ...], match_type: str, path: Sequence[str]) -> bool:
    """LangGraph's namespace match: ``path`` (``"*"`` matches any label) at the start or the end."""
    if len(labels) < len(path):
        return False
    if match_type == "prefix":
        pairs = zip(labels, path, strict=False)
    elif match_type == "suffix":
        pairs = zip(reversed(labels), reversed(path), strict=False)
    else:
        raise ConfigError(f"namespace match_type must be 'prefix' or 'suffix', got {match_type!r}")
    return all(want == "*" or have == want for have, want in pairs)


def matches_filter(value: Mapping[str, Any], filter_: Mapping[str, Any] | None) -> bool:
    """Whether a value passes a LangGraph search filter (every top-level condition holds)."""
    return not filter_ or all(_matches(value.get(field), wanted) for field, wanted in filter_.items())


def _matches(have: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping):
        ops = [k for k in wanted if isinstance(k, str) and k.startswith("$")]
        if ops:
            return all(_compare(have, op, operand) for op, operand in wanted.items())
        return isinstance(have, Mapping) and all(_matches(have.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(have, (list, tuple))
            and len(have) == len(wanted)
            and all(_matches(h, w) for h, w in zip(have, wanted, strict=True))
        )
    return bool(have == wanted)


def _compare(have: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(have == operand)
    if op == "$ne":
        return bool(have != operand)
    if op not in OPERATORS:
        raise ConfigError(f"unsupported filter operator {op!r}; expected one of {OPERATORS}")
    if not _number(have) or not _number(operand):
        return False  # a missing or non-numeric field does not pass an order comparison
    a, b = float(have), float(operand)
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)
