"""Trained LoRA adapters as versions of the agents' models, recorded and rolled back like prompt versions.

A version is one agent's adapter folder (peft's ``adapter_config.json`` and weights, plus whatever else
the folder holds). Its id is a content address: the sha256 of the sorted ``(relative path, sha256 of the
file's bytes)`` pairs, so the same bytes always get the same id and committing them again stores nothing
new. Files are copied into ``<root>/<run>/<agent>/<id>/`` through a temporary folder that is renamed
into place (:mod:`evolve.weights.files`), so a version folder is complete or absent. Rows live in
``adapter_*`` tables in the same database as memory and prompts; a row is never changed. Each agent of a
run has a HEAD that says which adapter it runs with (none: the bare base model); every HEAD move is a
row in ``adapter_head_moves``, so a rollback is auditable and nothing is ever deleted. HEAD, its moves
and its lock are the shared ledger of :mod:`evolve.ledger` (prompt graphs use the same one). This
module only moves files and rows: it never imports torch or peft.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import numbers
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine, insert, select

from connectors.db import for_reads
from connectors.errors import ConfigError, StoreError
from evolve.ledger import Ledger, check_limit, check_text, head_tables, id_prefix, transaction
from evolve.weights.files import check_adapter_folder, content_id, manifest, store_files

log = logging.getLogger(__name__)

BASE = "base"  # rollback(to=BASE): the agent runs on the bare base model again
FOLDER_BYTES = 200  # longest folder name used, in UTF-8 bytes (filesystems allow 255)

metadata = sa.MetaData()

adapter_versions = sa.Table(
    "adapter_versions",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),  # ascending = older first
    sa.Column("run", sa.String(200), nullable=False),
    sa.Column("agent", sa.String(200), nullable=False),
    sa.Column("id", sa.String(64), nullable=False),
    sa.Column("parent", sa.String(64), nullable=True),  # None: trained from the bare base model
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("files", sa.Text, nullable=False),  # JSON object: relative path -> sha256 of the bytes
    sa.Column("metrics", sa.Text, nullable=False),  # JSON object: name -> float
    sa.Column("message", sa.Text, nullable=False, default=""),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.UniqueConstraint("run", "agent", "id", name="uq_adapter_versions_run_agent_id"),
)

# HEAD None: the agent runs on the bare base model, so a HEAD and a move may point at no version.
adapter_heads, adapter_head_moves = head_tables(metadata, "adapter", ["run", "agent"], may_be_empty=True)
LEDGER = Ledger(adapter_versions, adapter_heads, adapter_head_moves, noun="adapters", empty=BASE)


@dataclass(frozen=True)
class AdapterVersion:
    """One immutable, stored adapter of one agent.

    Example:
        >>> version = AdapterVersion("3f2a9c0d1e2b4a5f", "demo", "solver", None, Path("/a"), {"reward": 0.7}, "", 0.0)
        >>> version.parent is None  # trained from the bare base model: a rollback returns to base
        True
    """

    id: str
    run: str
    agent: str
    parent: str | None
    path: Path
    metrics: Mapping[str, float]
    message: str
    created_at: float

    def __hash__(self) -> int:
        return hash((self.run, self.agent, self.id))


def check_name(value: Any, what: str) -> str:
    """A run or agent name that is safe as one folder name."""
    bad = not isinstance(value, str) or not value.strip() or value != value.strip() or len(value) > 200
    if bad or value.startswith(".") or any(c in value for c in "/\\\0"):
        raise ConfigError(f"{what} must be a folder-safe name (1-200 chars, no '/', '\\', leading '.'), got {value!r}")
    return value


def folder_name(name: str) -> str:
    """``name`` as one folder name that fits every filesystem's 255-byte limit: unchanged when its UTF-8
    form has at most ``FOLDER_BYTES`` bytes, else a head of it, ``~`` and 16 hex digits of its hash."""
    if len(name.encode("utf-8")) <= FOLDER_BYTES:
        return name
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
    head = name.encode("utf-8")[: FOLDER_BYTES - len(digest) - 1].decode("utf-8", "ignore")
    return f"{head}~{digest}"


def check_metrics(metrics: Any) -> dict[str, float]:
    """Metrics as ``{name: finite float}``."""
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise ConfigError(f"metrics must map names to numbers, got {type(metrics).__name__}")
    out: dict[str, float] = {}
    for name, value in metrics.items():
        real = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if not isinstance(name, str) or not name or not real or not math.isfinite(float(value)):
            raise ConfigError(f"metric {name!r} must be named by a non-empty str and be a finite number, got {value!r}")
        out[name] = float(value)
    return out


class AdapterRegistry:
    """The trained adapters of one run's agents under version control: files under ``root``, rows in SQL.

    Example:
        >>> import tempfile
        >>> from connectors import make_engine
        >>> tmp = Path(tempfile.mkdtemp())
        >>> for step in ("step1", "step2"):
        ...     (tmp / step).mkdir()
        ...     _ = (tmp / step / "adapter_config.json").write_text('{"r": 8}')
        ...     _ = (tmp / step / "adapter_model.safetensors").write_bytes(step.encode())
        >>> registry = AdapterRegistry(make_engine("sqlite://"), "demo", root=tmp / "adapters")
        >>> first = registry.commit("solver", tmp / "step1", metrics={"reward": 0.5})
        >>> second = registry.commit("solver", tmp / "step2", parent=first.id, metrics={"reward": 0.4})
        >>> registry.path("solver") == second.path == tmp / "adapters" / "demo" / "solver" / second.id
        True
        >>> registry.rollback("solver").id == first.id  # back to HEAD's parent
        True
        >>> registry.rollback("solver", to="base") is None  # the bare base model again
        True
    """

    def __init__(self, engine: Engine, run: str, *, root: Path) -> None:
        self.engine = engine
        self.run = check_name(run, "a run name")
        self.root = Path(root).expanduser().absolute()
        metadata.create_all(engine)

    # ---- reading ------------------------------------------------------------------------------------

    def head(self, agent: str) -> AdapterVersion | None:
        """The adapter ``agent`` runs with, or None when it runs on the bare base model."""
        with for_reads(self.engine).connect() as conn:
            head = LEDGER.head(conn, self._key(agent))
            return None if head is None else self._load(conn, agent, head)

    def path(self, agent: str) -> Path | None:
        """The folder of HEAD's adapter (what peft or vLLM loads), or None for the bare base model."""
        version = self.head(agent)
        return None if version is None else version.path

    def get(self, version_id: str, *, agent: str | None = None) -> AdapterVersion:
        """The version with this id or unique id prefix (``agent`` narrows the search to one agent)."""
        with for_reads(self.engine).connect() as conn:
            found_agent, vid = self._resolve(conn, agent, version_id)
            return self._load(conn, found_agent, vid)

    def log(self, agent: str, limit: int | None = None) -> list[AdapterVersion]:
        """Every version of ``agent``'s adapter, newest first (compare with ``head(agent)`` to mark HEAD)."""
        v = adapter_versions.c
        query = select(adapter_versions).where(v.run == self.run, v.agent == check_name(agent, "an agent name"))
        query = query.order_by(v.seq.desc())
        if limit is not None:
            query = query.limit(check_limit(limit))
        with for_reads(self.engine).connect() as conn:
            return [_version(r) for r in conn.execute(query)]

    def agents(self) -> list[str]:
        """The agents of this run that have adapter versions or a HEAD, sorted."""
        v, h = adapter_versions.c, adapter_heads.c
        with for_reads(self.engine).connect() as conn:
            names = set(conn.execute(select(v.agent).where(v.run == self.run).distinct()).scalars())
            names |= set(conn.execute(select(h.agent).where(h.run == self.run)).scalars())
        return sorted(names)

    def history(self, agent: str, limit: int | None = None) -> list[dict[str, Any]]:
        """HEAD moves of ``agent``, newest first: ``{"from", "to", "reason", "at"}`` (None means base)."""
        with for_reads(self.engine).connect() as conn:
            return LEDGER.history(conn, self._key(agent), limit)

    def verify(self, version_id: str, *, agent: str | None = None) -> AdapterVersion:
        """Recompute the stored files' hashes; StoreError when a file was changed, added or removed."""
        with for_reads(self.engine).connect() as conn:
            found_agent, vid = self._resolve(conn, agent, version_id)
            row = self._row(conn, found_agent, vid)
        version, expected = _version(row), json.loads(row.files)
        if not version.path.is_dir():
            raise StoreError(f"adapter {vid} of agent {found_agent!r}: its folder {version.path} is gone")
        found = manifest(version.path)
        if found != expected:
            changed = sorted(p for p in expected if p in found and found[p] != expected[p])
            removed, added = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
            raise StoreError(
                f"adapter {vid} of agent {found_agent!r} at {version.path} no longer matches what was committed: "
                f"changed {changed}, removed {removed}, added {added}; commit the files again as a new version"
            )
        return version

    # ---- writing ------------------------------------------------------------------------------------

    def commit(
        self,
        agent: str,
        folder: Path,
        *,
        parent: str | None = None,
        metrics: Mapping[str, float] | None = None,
        message: str = "",
    ) -> AdapterVersion:
        """Store ``folder`` as a version of ``agent``'s adapter and move HEAD to it.

        ``parent`` (id or unique prefix) is the version training started from; None means the bare base
        model, so rolling back from this version returns to base. Identical bytes give the identical id:
        committing them again stores nothing new (the stored parent, metrics and message stay) and only
        moves HEAD.
        """
        key = self._key(agent)
        found, clean = check_metrics(metrics), check_text(message, "message")
        files = check_adapter_folder(folder)
        vid = content_id(files)
        if parent is not None:
            with for_reads(self.engine).connect() as conn:
                parent = self._resolve(conn, agent, parent)[1]
        target = store_files(Path(folder), self.root / folder_name(self.run) / folder_name(agent), vid, files)

        def write(conn: Connection) -> AdapterVersion:
            head = LEDGER.head(conn, key, lock=True)  # locked before the insert, as before the shared ledger
            if self._row(conn, agent, vid, missing_ok=True) is None:
                row = {"run": self.run, "agent": agent, "id": vid, "parent": parent, "path": str(target)}
                row |= {"files": json.dumps(files), "metrics": json.dumps(found), "message": clean}
                conn.execute(insert(adapter_versions).values(**row, created_at=time.time()))
            LEDGER.move(conn, key, head, vid, "commit")
            return self._load(conn, agent, vid)

        return transaction(self.engine, write)

    def rollback(self, agent: str, to: str | None = None, *, reason: str = "rollback") -> AdapterVersion | None:
        """Move ``agent``'s HEAD to version ``to`` (id or unique prefix), to ``"base"``, or by default to
        HEAD's parent (base for a version trained from the base model). Returns the new HEAD (None: base).

        Nothing is deleted: the version left behind stays in ``log()`` and the move in ``history()``.
        """
        key, why = self._key(agent), check_text(reason, "reason") or "rollback"

        def write(conn: Connection) -> AdapterVersion | None:
            def pick(current: str | None) -> str | None:
                if to is None:
                    if current is None:
                        raise StoreError(f"agent {agent!r} of run {self.run!r} is on the base model: nothing to undo")
                    return self._row(conn, agent, current).parent  # None: trained from base, so back to base
                if isinstance(to, str) and to.strip().lower() == BASE:
                    return None
                return self._resolve(conn, agent, to)[1]

            target = LEDGER.rollback(conn, key, pick, why)
            return None if target is None else self._load(conn, agent, target)

        return transaction(self.engine, write)

    # ---- SQL helpers (each runs inside the caller's transaction) --------------------------------------

    def _key(self, agent: str) -> dict[str, str]:
        """Whose HEAD, in the shared ledger: this run's ``agent``."""
        return {"run": self.run, "agent": check_name(agent, "an agent name")}

    def _resolve(self, conn: Connection, agent: str | None, ref: Any) -> tuple[str, str]:
        """(agent, full id) for an id or unique prefix; ConfigError lists the candidates otherwise."""
        prefix, v = id_prefix(ref, "an adapter version id"), adapter_versions.c
        scope = {"run": self.run} if agent is None else self._key(agent)
        found = [] if prefix is None else [(r.agent, r.id) for r in LEDGER.matches(conn, scope, prefix, limit=20)]
        if len(found) == 1:
            return str(found[0][0]), str(found[0][1])
        where_said = f"run {self.run!r}" + ("" if agent is None else f", agent {agent!r}")
        if found:
            listed = ", ".join(f"{a}:{i}" for a, i in found)
            raise ConfigError(f"adapter version prefix {ref!r} is ambiguous in {where_said}: it matches {listed}")
        where = [v.run == self.run] + ([] if agent is None else [v.agent == agent])
        known = list(conn.execute(select(v.agent, v.id).where(*where).order_by(v.seq.desc()).limit(10)))
        listed = ", ".join(f"{a}:{i}" for a, i in known) or "none"
        raise ConfigError(f"unknown adapter version {ref!r} in {where_said}; known (newest first): {listed}, or 'base'")

    def _row(self, conn: Connection, agent: str, vid: str, *, missing_ok: bool = False) -> Any:
        v = adapter_versions.c
        row = conn.execute(select(adapter_versions).where(v.run == self.run, v.agent == agent, v.id == vid)).first()
        if row is None and not missing_ok:
            raise StoreError(f"unknown adapter version {vid!r} of agent {agent!r} in run {self.run!r}")
        return row

    def _load(self, conn: Connection, agent: str, vid: str) -> AdapterVersion:
        return _version(self._row(conn, agent, vid))


def _version(row: Any) -> AdapterVersion:
    metrics = MappingProxyType(json.loads(row.metrics))
    return AdapterVersion(row.id, row.run, row.agent, row.parent, Path(row.path), metrics, row.message, row.created_at)
