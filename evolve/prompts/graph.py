"""The versioned prompt graph: the team's prompts as content-addressed versions with a movable HEAD.

Nodes are prompt components named ``"<agent>.<part>"`` (``"solver.system"``, ``"solver.library"``);
edges are the team's message flow ``(from_agent, to_agent, weight)``. Every change is an immutable
version whose id is the sha256 of its canonical content (nodes, edges, parents), so committing the
same text twice is a no-op. HEAD is a pointer: rollback moves it and nothing is deleted. Only two
things ever change after a write: per-example validation scores merge into a version (they are
measurements of an immutable text, so they may arrive later), and HEAD moves — each move is a row in
``prompt_head_moves``, so a rollback is auditable. HEAD, its moves and its lock are the shared ledger
of :mod:`evolve.ledger` (adapters use the same one); this module stores and loads the versions.
Tables carry a ``prompt_`` prefix and live in the same database as memory.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    RowMapping,
    insert,
    select,
    update,
)

from connectors.db import for_reads
from connectors.errors import ConfigError, StoreError
from connectors.types import Usage
from evolve.ledger import canonical_json, check_limit, check_text, id_prefix, transaction
from evolve.prompts.versions import (
    LEDGER,
    Edge,
    PromptVersion,
    as_usage,
    check_edges,
    check_nodes,
    check_scores,
    diff_nodes,
    edge_text,
    metadata,
    prompt_rejections,
    prompt_scores,
    prompt_versions,
    usage_row,
    version_id,
)
from optimizers.types import Candidate, Version

log = logging.getLogger(__name__)


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
        self._key = {"graph": name}  # whose HEAD, in the shared ledger
        metadata.create_all(engine)

    # ---- reading ------------------------------------------------------------------------------------

    def head(self) -> PromptVersion:
        """The version agents render their prompts from."""
        with for_reads(self.engine).connect() as conn:
            return self._load(conn, self._head_or_raise(conn))

    def head_id(self) -> str:
        """HEAD's version id alone (one indexed read): a caller that keeps the version it loaded reloads only when
        this moved (versions never change their components; their scores may)."""
        with for_reads(self.engine).connect() as conn:
            return self._head_or_raise(conn)

    def get(self, version_id: str) -> PromptVersion:
        """The version with this id or with this unique id prefix."""
        with for_reads(self.engine).connect() as conn:
            return self._load(conn, self._resolve(conn, version_id))

    def checkout(self, version_id: str) -> Candidate:
        """A fresh copy of one version's component texts (HEAD does not move)."""
        return dict(self.get(version_id).nodes)

    def log(self, limit: int | None = None) -> list[PromptVersion]:
        """Every version of the graph, newest first (compare with ``head().id`` to mark HEAD)."""
        v = prompt_versions.c
        query = select(prompt_versions).where(v.graph == self.name).order_by(v.seq.desc())
        if limit is not None:
            query = query.limit(check_limit(limit))
        with for_reads(self.engine).connect() as conn:
            rows = [r._mapping for r in conn.execute(query)]
            by_version = self._scores(conn, None)
        return [_version(row, by_version.get(row["id"], {})) for row in rows]

    def versions(self) -> list[Version]:
        """Every version as optimizers see it (id, candidate, per-example scores), oldest first."""
        return [Version(v.id, v.candidate, v.scores) for v in reversed(self.log())]

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """HEAD moves, newest first: ``{"from": id | None, "to": id, "reason": str, "at": unix time}``."""
        with for_reads(self.engine).connect() as conn:
            return LEDGER.history(conn, self._key, limit)

    def rejected(self, limit: int = 5) -> list[tuple[Candidate, str]]:
        """The most recent rejected proposals, newest first, as ``(nodes, reason)``."""
        r = prompt_rejections.c
        query = select(r.nodes, r.reason).where(r.graph == self.name).order_by(r.seq.desc()).limit(check_limit(limit))
        with for_reads(self.engine).connect() as conn:
            return [(json.loads(row[0]), row[1]) for row in conn.execute(query)]

    def diff(self, a: str, b: str) -> str:
        """Unified diffs of the components (and edges) that differ between versions ``a`` and ``b``."""
        va, vb = self.get(a), self.get(b)
        return diff_nodes(
            {**va.nodes, **edge_text(va.edges)}, {**vb.nodes, **edge_text(vb.edges)}, va.id[:8], vb.id[:8]
        )

    # ---- writing ------------------------------------------------------------------------------------

    def init(self, nodes: Candidate, edges: Iterable[Any] = (), *, message: str = "seed") -> PromptVersion:
        """Store the seed version and point HEAD at it; when HEAD exists already, return it unchanged.

        Resuming a run calls ``init`` again with the team's prompts as written in code: HEAD (the evolved
        prompts) wins, and a warning says when the code's seed no longer matches the stored one.
        """
        clean, edge_t, message = check_nodes(nodes), check_edges(edges), check_text(message, "message")
        vid = version_id(clean, edge_t, ())

        def write(conn: Connection) -> PromptVersion | None:
            if LEDGER.head(conn, self._key) is not None:
                return None
            self._insert_version(conn, vid, (), clean, edge_t, Usage(), message)
            LEDGER.move(conn, self._key, None, vid, "init")
            return self._load(conn, vid)

        # A concurrent init that won (PostgreSQL; SQLite serialises) makes the retry find HEAD and return None.
        made = transaction(self.engine, write)
        if made is not None:
            return made
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
        spent, message = as_usage(usage), check_text(message, "message")
        edge_t = None if edges is None else check_edges(edges)
        if isinstance(parents, str) or not isinstance(parents, Sequence) or not parents:
            raise ConfigError(f"parents must be a non-empty list of version ids (e.g. [head.id]), got {parents!r}")

        def write(conn: Connection) -> PromptVersion:
            ids = tuple(self._resolve(conn, p) for p in parents)
            if len(set(ids)) != len(ids):
                raise ConfigError(f"parents must be distinct versions, got {list(ids)}")
            first = self._load(conn, ids[0])
            others = [self._load(conn, p) for p in ids[1:]]
            _check_components(clean, [first, *others], allow_new)
            edges_here = first.edges if edge_t is None else edge_t
            vid = version_id(clean, edges_here, ids)
            self._insert_version(conn, vid, ids, clean, edges_here, spent, message)
            self._merge_scores(conn, vid, found)
            head = LEDGER.head(conn, self._key, lock=True)  # locked after the insert, as before the shared ledger
            if move_head:
                LEDGER.move(conn, self._key, head, vid, "commit")
            return self._load(conn, vid)

        return transaction(self.engine, write)

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
        found, spent = check_scores(scores), as_usage(usage)
        if not check_text(reason, "reason").strip():
            raise ConfigError("reason must say why the proposal was rejected, got an empty str")
        with self.engine.begin() as conn:
            row = {"graph": self.name, "parent": self._resolve(conn, parent), "nodes": canonical_json(clean)}
            conn.execute(
                insert(prompt_rejections).values(
                    **row, reason=reason, scores=canonical_json(found), created_at=time.time(), **usage_row(spent)
                )
            )

    def rollback(self, to: str | None = None, *, reason: str = "rollback") -> PromptVersion:
        """Move HEAD to version ``to`` (any version, by id or prefix) or, by default, to HEAD's first parent.

        Nothing is deleted: the version left behind stays in ``log()`` and the move in ``history()``.
        """
        why = check_text(reason, "reason") or "rollback"

        def write(conn: Connection) -> PromptVersion:
            def pick(head: str | None) -> str:
                if head is None:
                    raise self._no_head()
                if to is not None:
                    return self._resolve(conn, to)
                parents = self._load(conn, head).parents
                if not parents:
                    raise StoreError(f"HEAD {head} of prompt graph {self.name!r} is the seed; there is no parent")
                return parents[0]

            return self._load(conn, LEDGER.rollback(conn, self._key, pick, why))

        return transaction(self.engine, write)

    # ---- SQL helpers (each runs inside the caller's transaction) --------------------------------------

    def _head_or_raise(self, conn: Connection) -> str:
        head = LEDGER.head(conn, self._key)
        if head is None:
            raise self._no_head()
        return head

    def _no_head(self) -> StoreError:
        return StoreError(f"prompt graph {self.name!r} has no versions yet: call init(nodes) first")

    def _resolve(self, conn: Connection, ref: str) -> str:
        prefix = id_prefix(ref, "a version id")
        if prefix is None:
            raise StoreError(f"unknown version {ref!r} in prompt graph {self.name!r} (ids are hex, see log())")
        found = LEDGER.matches(conn, self._key, prefix, limit=2)
        if len(found) != 1:
            kind = "ambiguous version prefix" if found else "unknown version"
            raise StoreError(f"{kind} {ref!r} in prompt graph {self.name!r} (see log())")
        return str(found[0].id)

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
        with for_reads(self.engine).connect() as conn:
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
        row |= {"graph": self.name, "id": vid, "message": message, "created_at": time.time(), **usage_row(usage)}
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
