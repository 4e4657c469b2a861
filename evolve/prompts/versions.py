"""Prompt versions at rest: the ``prompt_*`` tables, the immutable ``PromptVersion`` and the pure helpers
that address, validate and diff versions. ``evolve.prompts.graph.PromptGraph`` moves HEAD over them
through ``LEDGER``, the shared HEAD ledger of :mod:`evolve.ledger`."""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Column,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from connectors.errors import ConfigError
from connectors.types import Usage
from evolve.ledger import Ledger, content_address, head_tables
from optimizers.types import Candidate

# An experience library is a list of lessons and may hold none; any other empty component is a broken rewrite.
MAY_BE_EMPTY = frozenset({"library"})

Edge = tuple[str, str, float]

metadata = MetaData()

prompt_versions = Table(
    "prompt_versions",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),  # ascending = older first
    Column("graph", String(200), nullable=False),
    Column("id", String(64), nullable=False),
    Column("parents", Text, nullable=False),  # JSON list, first parent first
    Column("nodes", Text, nullable=False),  # JSON object: component -> text
    Column("edges", Text, nullable=False),  # JSON list of [from_agent, to_agent, weight]
    Column("prompt_tokens", Integer, nullable=False, default=0),
    Column("completion_tokens", Integer, nullable=False, default=0),
    Column("cost", Float, nullable=False, default=0.0),
    Column("message", Text, nullable=False, default=""),
    Column("created_at", Float, nullable=False),
    UniqueConstraint("graph", "id", name="uq_prompt_versions_graph_id"),
)

prompt_scores = Table(
    "prompt_scores",
    metadata,
    Column("graph", String(200), primary_key=True),
    Column("version", String(64), primary_key=True),
    Column("example", String(300), primary_key=True),
    Column("score", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

prompt_heads, prompt_head_moves = head_tables(metadata, "prompt", ["graph"], may_be_empty=False)

prompt_rejections = Table(
    "prompt_rejections",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("graph", String(200), nullable=False, index=True),
    Column("parent", String(64), nullable=False),
    Column("nodes", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("scores", Text, nullable=False),
    Column("prompt_tokens", Integer, nullable=False, default=0),
    Column("completion_tokens", Integer, nullable=False, default=0),
    Column("cost", Float, nullable=False, default=0.0),
    Column("created_at", Float, nullable=False),
)


LEDGER = Ledger(prompt_versions, prompt_heads, prompt_head_moves, noun="prompt graph")


@dataclass(frozen=True)
class PromptVersion:
    """One immutable version of a prompt graph.

    Example:
        >>> from connectors import make_engine
        >>> graph = PromptGraph(make_engine("sqlite://"), "demo")
        >>> seed = graph.init({"solver.system": "Answer briefly."})
        >>> seed.candidate["solver.system"], seed.parents, seed.mean_score
        ('Answer briefly.', (), None)
    """

    id: str
    graph: str
    parents: tuple[str, ...]
    nodes: Mapping[str, str]
    edges: tuple[Edge, ...]
    scores: Mapping[str, float]
    usage: Usage
    message: str
    created_at: float

    def __hash__(self) -> int:
        return hash((self.graph, self.id))

    @property
    def candidate(self) -> Candidate:
        """The component texts, as optimizers see them."""
        return self.nodes

    @property
    def mean_score(self) -> float | None:
        """Mean per-example validation score, or None when the version has not been measured."""
        return sum(self.scores.values()) / len(self.scores) if self.scores else None


def version_id(nodes: Mapping[str, str], edges: Sequence[Edge], parents: Sequence[str]) -> str:
    """The content address of a version: sha256 over canonical JSON of (nodes, edges, parents).

    Parents keep their order (the first parent is where a rollback goes); edges are sorted by the caller.
    """
    return content_address({"nodes": dict(nodes), "edges": [list(e) for e in edges], "parents": list(parents)})


def check_nodes(nodes: Any, *, strict: bool = True) -> dict[str, str]:
    """``nodes`` as a plain dict of str -> str; ``strict`` also checks names and that texts are not empty.

    Names look like ``"<agent>.<part>"``; only ``MAY_BE_EMPTY`` parts may hold blank text.
    """
    if not isinstance(nodes, Mapping) or not nodes:
        raise ConfigError(f"nodes must be a non-empty mapping of '<agent>.<part>' -> text, got {nodes!r:.200}")
    out: dict[str, str] = {}
    for name, text in nodes.items():
        if not isinstance(name, str) or (strict and not _is_component_name(name)):
            raise ConfigError(f"component names look like 'solver.system' ('<agent>.<part>'), got {name!r}")
        if not isinstance(text, str):
            raise ConfigError(f"component {name!r} must hold a str, got {type(text).__name__}")
        if strict and not text.strip() and name.partition(".")[2] not in MAY_BE_EMPTY:
            raise ConfigError(f"component {name!r} is empty; only {sorted(MAY_BE_EMPTY)} parts may be empty")
        out[name] = text
    return out


def _is_component_name(name: str) -> bool:
    agent, dot, part = name.partition(".")
    return bool(agent.strip() and dot and part.strip()) and name == name.strip()


def check_edges(edges: Iterable[Any]) -> tuple[Edge, ...]:
    """Edges as sorted ``(from_agent, to_agent, weight)`` triples; a pair ``(a, b)`` means weight 1.0."""
    if isinstance(edges, str | bytes) or not isinstance(edges, Iterable):
        raise ConfigError(f"edges must be a sequence of (from_agent, to_agent[, weight]), got {edges!r:.200}")
    out: dict[tuple[str, str], float] = {}
    for edge in edges:
        if isinstance(edge, str | bytes) or not isinstance(edge, Sequence) or len(edge) not in (2, 3):
            raise ConfigError(f"an edge is (from_agent, to_agent[, weight]), got {edge!r}")
        a, b = edge[0], edge[1]
        weight = edge[2] if len(edge) == 3 else 1.0
        if not (isinstance(a, str) and a.strip() and isinstance(b, str) and b.strip()):
            raise ConfigError(f"edge ends must be agent names (non-empty str), got {edge!r}")
        if (a, b) in out:
            raise ConfigError(f"edge {a!r} -> {b!r} appears twice")
        out[(a, b)] = _finite(weight, f"weight of edge {a!r} -> {b!r}")
    return tuple(sorted((a, b, w) for (a, b), w in out.items()))


def check_scores(values: Mapping[str, Any] | None) -> dict[str, float]:
    """Per-example scores as ``{example_id: float}``; NaN, infinities and non-numbers are refused."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise ConfigError(f"scores must map example ids to numbers, got {type(values).__name__}")
    out: dict[str, float] = {}
    for example, value in values.items():
        if not isinstance(example, str) or not example:
            raise ConfigError(f"score keys are example ids (non-empty str), got {example!r}")
        out[example] = _finite(value, f"score of example {example!r}")
    return out


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ConfigError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def diff_nodes(a: Mapping[str, str], b: Mapping[str, str], a_label: str, b_label: str) -> str:
    """A unified diff per changed component, headed ``<component> @ <label>``; "" when all are equal."""
    chunks: list[str] = []
    for name in sorted(set(a) | set(b)):
        old, new = a.get(name), b.get(name)
        if old == new:
            continue
        lines = list(
            difflib.unified_diff(
                (old or "").splitlines(),
                (new or "").splitlines(),
                fromfile=f"{name} @ {a_label}" + ("" if old is not None else " (absent)"),
                tofile=f"{name} @ {b_label}" + ("" if new is not None else " (absent)"),
                lineterm="",
            )
        )
        if not lines:  # the texts differ only in line endings or a final newline
            lines = [f"--- {name} @ {a_label}", f"+++ {name} @ {b_label}", "(line endings or final newline differ)"]
        chunks.append("\n".join(lines))
    return "\n".join(chunks) + "\n" if chunks else ""


def edge_text(edges: Sequence[Edge]) -> dict[str, str]:
    return {"(edges)": "".join(f"{a} -> {b} {w:g}\n" for a, b, w in edges)} if edges else {}


def as_usage(usage: Usage | None) -> Usage:
    if usage is None:
        return Usage()
    if not isinstance(usage, Usage):
        raise ConfigError(f"usage must be a connectors.Usage, got {type(usage).__name__}")
    return usage


def usage_row(usage: Usage) -> dict[str, Any]:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens, "cost": usage.cost}
