"""The versioned prompt graph: the team's prompts as content-addressed versions with a movable HEAD.

Nodes are prompt components named ``"<agent>.<part>"`` (``"solver.system"``, ``"solver.library"``);
edges are the team's message flow ``(from_agent, to_agent, weight)``. Every change is an immutable
version whose id is the sha256 of its canonical content (nodes, edges, parents), so committing the
same text twice is a no-op. HEAD is a pointer: rollback moves it and nothing is deleted. Only two
things ever change after a write: per-example validation scores merge into a version (they are
measurements of an immutable text, so they may arrive later), and HEAD moves — each move is a row in
``prompt_head_moves``, so a rollback is auditable. Tables carry a ``prompt_`` prefix and live in the
same database as memory.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import math
import numbers
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Float,
    Integer,
    MetaData,
    RowMapping,
    String,
    Table,
    Text,
    UniqueConstraint,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from connectors.errors import ConfigError, StoreError
from connectors.types import Usage
from optimizers.types import Candidate, Version

log = logging.getLogger(__name__)

ID_CHARS = 16  # hex chars of the sha256 kept as the id: 64 bits, and a collision is checked on write
HEX = frozenset("0123456789abcdef")
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

prompt_heads = Table(
    "prompt_heads",
    metadata,
    Column("graph", String(200), primary_key=True),
    Column("version", String(64), nullable=False),
    Column("moved_at", Float, nullable=False),
)

prompt_head_moves = Table(
    "prompt_head_moves",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("graph", String(200), nullable=False, index=True),
    Column("from_version", String(64), nullable=True),  # None for the move that set the first HEAD
    Column("to_version", String(64), nullable=False),
    Column("reason", Text, nullable=False),
    Column("at", Float, nullable=False),
)

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


def canonical_json(value: Any) -> str:
    """The one JSON spelling of ``value``: sorted keys, no spaces, ASCII only (lone surrogates survive)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def version_id(nodes: Mapping[str, str], edges: Sequence[Edge], parents: Sequence[str]) -> str:
    """The content address of a version: sha256 over canonical JSON of (nodes, edges, parents).

    Parents keep their order (the first parent is where a rollback goes); edges are sorted by the caller.
    """
    payload = {"nodes": dict(nodes), "edges": [list(e) for e in edges], "parents": list(parents)}
    return hashlib.sha256(canonical_json(payload).encode("ascii")).hexdigest()[:ID_CHARS]


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


def _edge_text(edges: Sequence[Edge]) -> dict[str, str]:
    return {"(edges)": "".join(f"{a} -> {b} {w:g}\n" for a, b, w in edges)} if edges else {}


def _usage(usage: Usage | None) -> Usage:
    if usage is None:
        return Usage()
    if not isinstance(usage, Usage):
        raise ConfigError(f"usage must be a connectors.Usage, got {type(usage).__name__}")
    return usage


def _usage_row(usage: Usage) -> dict[str, Any]:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens, "cost": usage.cost}


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a str, got {type(value).__name__}")
    return value


class PromptGraph:
    """A team's prompts under version control, stored in SQL beside memory.

    Example:
        >>> from connectors import make_engine
        >>> graph = PromptGraph(make_engine("sqlite://"), "demo")
        >>> seed = graph.init({"solver.system": "Answer briefly."}, [("planner", "solver", 1.0)])
        >>> better = graph.commit({"solver.system": "Answer briefly. Show units."}, parents=[seed.id])
        >>> graph.head().id == better.id
        True
        >>> graph.rollback().candidate["solver.system"]
        'Answer briefly.'
    """

    def __init__(self, engine: Engine, name: str = "default") -> None:
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            raise ConfigError(f"a prompt graph name is a non-empty str of at most 200 chars, got {name!r:.220}")
        self.engine = engine
        self.name = name
        metadata.create_all(engine)

    # ---- reading ------------------------------------------------------------------------------------

    def head(self) -> PromptVersion:
        """The version agents render their prompts from."""
        with self.engine.connect() as conn:
            return self._load(conn, self._head_or_raise(conn))

    def get(self, version_id: str) -> PromptVersion:
        """The version with this id or with this unique id prefix."""
        with self.engine.connect() as conn:
            return self._load(conn, self._resolve(conn, version_id))

    def checkout(self, version_id: str) -> Candidate:
        """A fresh copy of one version's component texts (HEAD does not move)."""
        return dict(self.get(version_id).nodes)

    def log(self, limit: int | None = None) -> list[PromptVersion]:
        """Every version of the graph, newest first (compare with ``head().id`` to mark HEAD)."""
        v = prompt_versions.c
        query = select(prompt_versions).where(v.graph == self.name).order_by(v.seq.desc())
        if limit is not None:
            query = query.limit(_limit(limit))
        with self.engine.connect() as conn:
            rows = [r._mapping for r in conn.execute(query)]
            by_version = self._scores(conn, None)
        return [_version(row, by_version.get(row["id"], {})) for row in rows]

    def versions(self) -> list[Version]:
        """Every version as optimizers see it (id, candidate, per-example scores), oldest first."""
        return [Version(v.id, v.candidate, v.scores) for v in reversed(self.log())]

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """HEAD moves, newest first: ``{"from": id | None, "to": id, "reason": str, "at": unix time}``."""
        m = prompt_head_moves.c
        query = select(m.from_version, m.to_version, m.reason, m.at).where(m.graph == self.name).order_by(m.seq.desc())
        if limit is not None:
            query = query.limit(_limit(limit))
        with self.engine.connect() as conn:
            return [{"from": r[0], "to": r[1], "reason": r[2], "at": r[3]} for r in conn.execute(query)]

    def rejected(self, limit: int = 5) -> list[tuple[Candidate, str]]:
        """The most recent rejected proposals, newest first, as ``(nodes, reason)``."""
        r = prompt_rejections.c
        query = select(r.nodes, r.reason).where(r.graph == self.name).order_by(r.seq.desc()).limit(_limit(limit))
        with self.engine.connect() as conn:
            return [(json.loads(row[0]), row[1]) for row in conn.execute(query)]

    def diff(self, a: str, b: str) -> str:
        """Unified diffs of the components (and edges) that differ between versions ``a`` and ``b``."""
        va, vb = self.get(a), self.get(b)
        return diff_nodes(
            {**va.nodes, **_edge_text(va.edges)}, {**vb.nodes, **_edge_text(vb.edges)}, va.id[:8], vb.id[:8]
        )

    # ---- writing ------------------------------------------------------------------------------------

    def init(self, nodes: Candidate, edges: Iterable[Any] = (), *, message: str = "seed") -> PromptVersion:
        """Store the seed version and point HEAD at it; when HEAD exists already, return it unchanged.

        Resuming a run calls ``init`` again with the team's prompts as written in code: HEAD (the evolved
        prompts) wins, and a warning says when the code's seed no longer matches the stored one.
        """
        clean, edge_t, message = check_nodes(nodes), check_edges(edges), _text(message, "message")
        vid = version_id(clean, edge_t, ())
        try:
            with self.engine.begin() as conn:
                if self._head_id(conn) is None:
                    self._insert_version(conn, vid, (), clean, edge_t, Usage(), message)
                    self._move_head(conn, None, vid, "init")
                    return self._load(conn, vid)
        except IntegrityError:  # another process initialised the graph first (PostgreSQL; SQLite serialises)
            log.debug("prompt graph %r initialised concurrently", self.name)
        if vid not in self._root_ids():
            log.warning(
                "prompt graph %r exists and its seed differs from the nodes or edges given to init(); keeping HEAD. "
                "Use another graph name to start from the new prompts.",
                self.name,
            )
        return self.head()

    def commit(
        self,
        nodes: Candidate,
        *,
        parents: Sequence[str],
        scores: Mapping[str, float] | None = None,
        usage: Usage | None = None,
        message: str = "",
        edges: Iterable[Any] | None = None,
        move_head: bool = True,
        allow_new: bool = False,
    ) -> PromptVersion:
        """Store a new version (two parents for a merge) and, by default, move HEAD to it.

        Identical content and parents give the identical id, so a repeated commit stores nothing new (its
        scores still merge). ``edges=None`` keeps the first parent's edges. Components must be those of
        the parents; ``allow_new=True`` lets a version add components.
        """
        clean, found = check_nodes(nodes), check_scores(scores)
        spent, message = _usage(usage), _text(message, "message")
        edge_t = None if edges is None else check_edges(edges)
        if isinstance(parents, str) or not isinstance(parents, Sequence) or not parents:
            raise ConfigError(f"parents must be a non-empty list of version ids (e.g. [head.id]), got {parents!r}")
        with self.engine.begin() as conn:
            ids = tuple(self._resolve(conn, p) for p in parents)
            if len(set(ids)) != len(ids):
                raise ConfigError(f"parents must be distinct versions, got {list(ids)}")
            first = self._load(conn, ids[0])
            others = [self._load(conn, p) for p in ids[1:]]
            _check_components(clean, [first, *others], allow_new)
            edge_t = first.edges if edge_t is None else edge_t
            vid = version_id(clean, edge_t, ids)
            self._insert_version(conn, vid, ids, clean, edge_t, spent, message)
            self._merge_scores(conn, vid, found)
            head = self._head_id(conn, lock=True)
            if move_head and head != vid:
                self._move_head(conn, head, vid, "commit")
            return self._load(conn, vid)

    def set_scores(self, version_id: str, scores: Mapping[str, float]) -> PromptVersion:
        """Merge per-example validation scores into a version (a new measurement of an example wins)."""
        found = check_scores(scores)
        with self.engine.begin() as conn:
            vid = self._resolve(conn, version_id)
            self._merge_scores(conn, vid, found)
            return self._load(conn, vid)

    def reject(
        self,
        nodes: Candidate,
        *,
        parent: str,
        reason: str,
        scores: Mapping[str, float] | None = None,
        usage: Usage | None = None,
    ) -> None:
        """Record a proposal that failed its gate, so later rewrites can be shown what did not work."""
        clean = check_nodes(nodes, strict=False)  # a failed proposal may be malformed
        found, spent = check_scores(scores), _usage(usage)
        if not _text(reason, "reason").strip():
            raise ConfigError("reason must say why the proposal was rejected, got an empty str")
        with self.engine.begin() as conn:
            row = {"graph": self.name, "parent": self._resolve(conn, parent), "nodes": canonical_json(clean)}
            conn.execute(
                insert(prompt_rejections).values(
                    **row, reason=reason, scores=canonical_json(found), created_at=time.time(), **_usage_row(spent)
                )
            )

    def rollback(self, to: str | None = None, *, reason: str = "rollback") -> PromptVersion:
        """Move HEAD to version ``to`` (any version, by id or prefix) or, by default, to HEAD's first parent.

        Nothing is deleted: the version left behind stays in ``log()`` and the move in ``history()``.
        """
        with self.engine.begin() as conn:
            head = self._head_or_raise(conn, lock=True)
            if to is None:
                parents = self._load(conn, head).parents
                if not parents:
                    raise StoreError(f"HEAD {head} of prompt graph {self.name!r} is the seed; there is no parent")
                target = parents[0]
            else:
                target = self._resolve(conn, to)
            if target != head:
                self._move_head(conn, head, target, _text(reason, "reason") or "rollback")
            return self._load(conn, target)

    # ---- SQL helpers (each runs inside the caller's transaction) --------------------------------------

    def _head_id(self, conn: Connection, *, lock: bool = False) -> str | None:
        # FOR UPDATE makes read-then-move atomic on PostgreSQL; SQLite's BEGIN IMMEDIATE already is.
        query = select(prompt_heads.c.version).where(prompt_heads.c.graph == self.name)
        return conn.execute(query.with_for_update() if lock else query).scalar()

    def _head_or_raise(self, conn: Connection, *, lock: bool = False) -> str:
        head = self._head_id(conn, lock=lock)
        if head is None:
            raise StoreError(f"prompt graph {self.name!r} has no versions yet: call init(nodes) first")
        return head

    def _resolve(self, conn: Connection, ref: str) -> str:
        if not isinstance(ref, str):
            raise ConfigError(f"a version id is a str, got {type(ref).__name__}")
        key = ref.strip().lower()
        if not key or not set(key) <= HEX:
            raise StoreError(f"unknown version {ref!r} in prompt graph {self.name!r} (ids are hex, see log())")
        v = prompt_versions.c
        query = select(v.id).where(v.graph == self.name, v.id.startswith(key)).limit(2)
        found = list(conn.execute(query).scalars())
        if len(found) != 1:
            kind = "ambiguous version prefix" if found else "unknown version"
            raise StoreError(f"{kind} {ref!r} in prompt graph {self.name!r} (see log())")
        return str(found[0])

    def _load(self, conn: Connection, vid: str) -> PromptVersion:
        v = prompt_versions.c
        row = conn.execute(select(prompt_versions).where(v.graph == self.name, v.id == vid)).first()
        if row is None:
            raise StoreError(f"unknown version {vid!r} in prompt graph {self.name!r}")
        return _version(row._mapping, self._scores(conn, vid).get(vid, {}))

    def _scores(self, conn: Connection, vid: str | None) -> dict[str, dict[str, float]]:
        s = prompt_scores.c
        query = select(s.version, s.example, s.score).where(s.graph == self.name).order_by(s.example)
        if vid is not None:
            query = query.where(s.version == vid)
        out: dict[str, dict[str, float]] = {}
        for version, example, score in conn.execute(query):
            out.setdefault(version, {})[example] = score
        return out

    def _root_ids(self) -> set[str]:
        v = prompt_versions.c
        query = select(v.id).where(v.graph == self.name, v.parents == "[]")
        with self.engine.connect() as conn:
            return set(conn.execute(query).scalars())

    def _insert_version(
        self,
        conn: Connection,
        vid: str,
        parents: tuple[str, ...],
        nodes: dict[str, str],
        edges: tuple[Edge, ...],
        usage: Usage,
        message: str,
    ) -> None:
        row: dict[str, Any] = {"parents": canonical_json(list(parents)), "nodes": canonical_json(nodes)}
        row["edges"] = canonical_json([list(e) for e in edges])
        v = prompt_versions.c
        stored = conn.execute(select(v.parents, v.nodes, v.edges).where(v.graph == self.name, v.id == vid)).first()
        if stored is not None:
            if tuple(stored) != (row["parents"], row["nodes"], row["edges"]):
                raise StoreError(f"version id {vid} collides with different stored content in {self.name!r}")
            return  # same content, same parents: the version exists already
        row |= {"graph": self.name, "id": vid, "message": message, "created_at": time.time(), **_usage_row(usage)}
        conn.execute(insert(prompt_versions).values(**row))

    def _merge_scores(self, conn: Connection, vid: str, found: Mapping[str, float]) -> None:
        if not found:
            return
        now, s = time.time(), prompt_scores.c
        known = set(conn.execute(select(s.example).where(s.graph == self.name, s.version == vid)).scalars())
        for example, score in found.items():
            if example in known:
                where = (s.graph == self.name, s.version == vid, s.example == example)
                conn.execute(update(prompt_scores).where(*where).values(score=score, updated_at=now))
        new = [
            {"graph": self.name, "version": vid, "example": e, "score": v, "updated_at": now}
            for e, v in found.items()
            if e not in known
        ]
        if new:
            conn.execute(insert(prompt_scores), new)

    def _move_head(self, conn: Connection, frm: str | None, to: str, reason: str) -> None:
        now = time.time()
        if frm is None:
            conn.execute(insert(prompt_heads).values(graph=self.name, version=to, moved_at=now))
        else:
            conn.execute(update(prompt_heads).where(prompt_heads.c.graph == self.name).values(version=to, moved_at=now))
        move = {"graph": self.name, "from_version": frm, "to_version": to, "reason": reason, "at": now}
        conn.execute(insert(prompt_head_moves).values(**move))
        log.info("prompt graph %r: HEAD %s -> %s (%s)", self.name, frm, to, reason)


def _version(row: RowMapping, found: Mapping[str, float]) -> PromptVersion:
    return PromptVersion(
        id=row["id"],
        graph=row["graph"],
        parents=tuple(json.loads(row["parents"])),
        nodes=MappingProxyType(json.loads(row["nodes"])),
        edges=tuple((a, b, float(w)) for a, b, w in json.loads(row["edges"])),
        scores=MappingProxyType(dict(found)),
        usage=Usage(row["prompt_tokens"], row["completion_tokens"], row["cost"]),
        message=row["message"],
        created_at=row["created_at"],
    )


def _check_components(nodes: Mapping[str, str], parents: Sequence[PromptVersion], allow_new: bool) -> None:
    expected = set().union(*(p.nodes for p in parents))
    missing, extra = sorted(expected - set(nodes)), sorted(set(nodes) - expected)
    if missing:
        raise ConfigError(f"components {missing} of the parent version are missing; every component must be kept")
    if extra and not allow_new:
        raise ConfigError(f"components {extra} are not in the parent version; pass allow_new=True to add them")


def _limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigError(f"limit must be an int >= 0, got {limit!r}")
    return limit
