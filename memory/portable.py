"""Moving memories between stores (JSONL export/import) and the checks at the store's edges.

An export is one header line (format, version, embedder, dimension) and one JSON object per memory
with its id, Q, visits, timestamps, meta and embedding (base64 float32). Importing into a store with
the same embedder reuses the embeddings; otherwise the intents are embedded again.
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Connection, select

from connectors.embedders import Embedder, normalise_rows
from connectors.errors import ConfigError, StoreError
from connectors.redact import redact_url
from memory.batch import NewItems, check_chars, check_id, check_namespace, check_reward, check_text
from memory.schema import from_blobs, intents, memory_items, read_state, record_embedder

FORMAT = "evolve.memory"
VERSION = 1
EXPORT_BATCH = 1000
UNIT_TOLERANCE = 1e-6  # |norm - 1| below this counts as unit length (float32 rounding)


def check_embedder(conn: Connection, name: str, dim: int, url: str) -> None:
    """Record the embedder on a new store; refuse a different one on an existing store."""
    st = read_state(conn)
    if st.embedder is None:
        record_embedder(conn, name, dim)
    elif st.embedder != name or st.dim != dim:
        raise StoreError(
            f"the memory store at {redact_url(url)} was built with embedder {st.embedder!r} (dim {st.dim}), "
            f"but was opened with {name!r} (dim {dim}); open it with the same embedder, "
            "or export it and import into a new store"
        )


def check_embeddings(vecs: Any, n: int, dim: int, *, source: str = "embeddings") -> np.ndarray:
    """An (n, dim) finite float32 matrix with unit rows (zero rows stay zero)."""
    try:
        arr = np.asarray(vecs, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"{source}: expected an ({n}, {dim}) array of numbers, got {type(vecs).__name__} ({e})"
        ) from None
    if arr.shape != (n, dim):
        raise ConfigError(f"{source}: expected shape ({n}, {dim}), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ConfigError(f"{source}: embeddings contain NaN or infinite values")
    # Rows already of unit length are kept bit for bit: normalising them again moves some by one ulp,
    # and an export -> import round trip must give back exactly the stored vectors.
    norms = np.linalg.norm(arr.astype(np.float64), axis=1)
    off = np.abs(norms - 1.0) > UNIT_TOLERANCE
    if off.any():
        arr = arr.copy()
        arr[off] = normalise_rows(arr[off])
    return arr


def check_feedback_id(value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > 128:
        raise ConfigError(f"feedback_id must be a non-empty string of at most 128 characters, got {value!r:.120}")
    return check_chars("feedback_id", value)


@dataclass(frozen=True)
class Record:
    """One memory read from an export file."""

    id: str
    namespace: str
    intent: str
    experience: str
    q: float
    visits: int
    success: bool | None
    created_at: float
    updated_at: float
    meta: dict[str, Any]
    embedding: np.ndarray | None


def export_jsonl(conn: Connection, path: Path, namespace: str | None, embedder: Embedder, dim: int) -> int:
    """Write the header and every memory (of ``namespace``, or all) oldest first; atomic."""
    query = (
        select(memory_items, intents.c.embedding)
        .join(intents, intents.c.id == memory_items.c.intent_id)
        .order_by(memory_items.c.seq)
    )
    if namespace is not None:
        query = query.where(memory_items.c.namespace == check_namespace(namespace))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    header = {
        "format": FORMAT,
        "version": VERSION,
        "embedder": getattr(embedder, "name", "?"),
        "dim": dim,
        "exported_at": time.time(),
    }
    count = 0
    with tmp.open("w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for row in conn.execution_options(yield_per=EXPORT_BATCH).execute(query).mappings():
            record = {
                k: row[k]
                for k in (
                    "id",
                    "namespace",
                    "intent",
                    "experience",
                    "q",
                    "visits",
                    "success",
                    "created_at",
                    "updated_at",
                )
            }
            record["meta"] = row["meta"] or {}
            record["embedding"] = base64.b64encode(row["embedding"]).decode("ascii")
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    os.replace(tmp, path)
    return count


def read_jsonl(path: Path) -> tuple[dict[str, Any], dict[str, list[Record]]]:
    """Parse an export file: its header, and its records grouped by namespace (file order kept)."""
    if not path.exists():
        raise ConfigError(f"import: {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"import: {path} is not UTF-8 text (byte {e.start}: {e.reason}); expected JSONL") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ConfigError(f"import: {path} is empty; expected a header line then one memory per line")
    header = _parse(lines[0], path, 1)
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise ConfigError(f"import: {path}:1 is not an {FORMAT} v{VERSION} header, got {lines[0][:120]!r}")
    out: dict[str, list[Record]] = {}
    for n, line in enumerate(lines[1:], 2):
        record = _record(_parse(line, path, n), header, f"{path}:{n}")
        out.setdefault(record.namespace, []).append(record)
    return header, out


def same_embedder(header: dict[str, Any], embedder: Embedder, dim: int) -> bool:
    """Whether an export's embeddings can be reused by a store with this embedder."""
    return header.get("embedder") == getattr(embedder, "name", None) and header.get("dim") == dim


def to_batch(records: list[Record], embedder: Embedder, dim: int, *, reuse: bool) -> NewItems:
    """New items for ``records``; the file's embeddings when ``reuse``, else the intents embedded again."""
    if reuse and all(r.embedding is not None and len(r.embedding) == dim for r in records):
        vecs = np.stack([r.embedding for r in records if r.embedding is not None])
    else:
        vecs = np.asarray(embedder.embed([r.intent for r in records]), dtype=np.float32)
    return NewItems.build(
        [r.intent for r in records],
        [r.experience for r in records],
        check_embeddings(vecs, len(records), dim, source="import"),
        q=[r.q for r in records],
        success=[r.success for r in records],
        meta=[r.meta for r in records],
        ids=[r.id for r in records],
        visits=[r.visits for r in records],
        created=[r.created_at for r in records],
        updated=[r.updated_at for r in records],
    )


def _parse(line: str, path: Path, n: int) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as e:
        raise ConfigError(f"import: {path}:{n} is not valid JSON ({e})") from e
    if not isinstance(value, dict):
        raise ConfigError(f"import: {path}:{n} must be a JSON object, got {type(value).__name__}")
    return value


def _record(d: dict[str, Any], header: dict[str, Any], where: str) -> Record:
    try:
        check_id(f"{where} id", d["id"])
        for name in ("intent", "experience"):
            check_text(f"{where} {name}", d[name])
        embedding = None
        if d.get("embedding") and header.get("dim"):
            embedding = from_blobs([base64.b64decode(d["embedding"])], int(header["dim"]))[0]
        return Record(
            id=d["id"],
            namespace=check_namespace(d.get("namespace", "default")),
            intent=d["intent"],
            experience=d["experience"],
            q=check_reward(d["q"], f"{where} q"),
            visits=int(d.get("visits", 0)),
            success=None if d.get("success") is None else bool(d["success"]),
            created_at=float(d["created_at"]),
            updated_at=float(d.get("updated_at", d["created_at"])),
            meta=dict(d.get("meta") or {}),
            embedding=embedding,
        )
    except (KeyError, TypeError, ValueError, StoreError) as e:
        raise ConfigError(f"import: {where}: expected id, intent, experience, q, created_at; {e}") from e
