"""Moving memories between stores (JSONL export/import) and the checks at the store's edges.

An export is one header line (format, version, embedder, dimension) and one JSON object per memory
with its id, Q, visits, timestamps, validity (``valid_from``, ``valid_to``, ``superseded_by``) and kind
(``episode``/``strategy``) — all four optional on import, for files written before them — meta and
embedding (base64 float32). Lines end with "\\n" only;
U+0085, U+2028 and U+2029 inside texts are written as JSON escapes (so line-splitting tools other
than ours see one record per line) and read back raw or escaped. Importing into a store with the
same embedder reuses the embeddings; otherwise the intents are embedded again.

An import reads the file twice, in bounded memory: ``check_file`` checks every record (nothing is
written when one is bad), then ``records`` yields them again in runs for the store to insert.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import math
import os
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Connection, RowMapping, select

from connectors.embedders import Embedder
from connectors.errors import ConfigError, StoreError
from memory.storage.schema import intents, memory_items, quarantine
from memory.storage.statements import chunks
from memory.write.batch import NewItems
from memory.write.checks import (
    check_embeddings,
    check_id,
    check_meta,
    check_namespace,
    check_reward,
    check_success,
    check_text,
)

FORMAT = "evolve.memory"
VERSION = 1
EXPORT_BATCH = 1000
IMPORT_BATCH = 2000
"""Records per insert during an import: bounds its memory whatever the file's size."""
KEEP_BYTES = 32 * 2**20
"""An import file up to this size keeps its checked records for the write; a larger one is read twice."""
MAX_VISITS = 2**31 - 1  # the visits column is a 32-bit INTEGER on PostgreSQL
FIELDS = ("id", "namespace", "intent", "experience", "q", "visits", "success", "created_at", "updated_at")
KINDS = ("episode", "strategy")  # MemoryItem.kind
ESCAPES = (("\x85", "\\u0085"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))
"""Line breaks to ``str.splitlines`` that JSON may hold raw; written escaped (control characters always are)."""


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
    valid_from: float
    valid_to: float | None
    superseded_by: str | None
    kind: str = "episode"


def as_path(value: object, what: str) -> Path:
    """``value`` as a ``Path``: a ``str`` or ``os.PathLike`` naming a file."""
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{what}: path must be a str or Path naming a file, got {type(value).__name__}")
    return Path(value)


# -- export ---------------------------------------------------------------------------------------
def export_jsonl(conn: Connection, path: Path, namespace: str | None, embedder: Embedder, dim: int) -> int:
    """Write the header and every memory (of ``namespace``, or all) oldest first.

    Atomic: the lines go to a temporary file beside ``path`` that replaces it once complete and on
    disk; whatever stops the export removes the temporary file and leaves an older ``path`` as it was.
    """
    query = (
        select(memory_items, intents.c.embedding)
        .join(intents, intents.c.id == memory_items.c.intent_id)
        .order_by(memory_items.c.seq)
    )
    if namespace is not None:
        query = query.where(memory_items.c.namespace == check_namespace(namespace))
    header = {"format": FORMAT, "version": VERSION, "embedder": getattr(embedder, "name", "?"), "dim": dim,
              "exported_at": time.time()}  # fmt: skip
    tmp = _temp_beside(path)
    count = 0
    try:
        with tmp.open("w", encoding="utf-8", newline="\n") as f:
            f.write(json.dumps(header) + "\n")
            for row in conn.execution_options(yield_per=EXPORT_BATCH).execute(query).mappings():
                f.write(_line(row))
                count += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise StoreError(f"export: could not write {path} ({e.strerror or e}); it was left as it was") from e
    finally:
        tmp.unlink(missing_ok=True)
    return count


def _temp_beside(path: Path) -> Path:
    """A new empty file in ``path``'s folder (created if needed), or a ``ConfigError`` saying why not."""
    if path.is_dir():
        raise ConfigError(f"export: {path} is a directory; expected the path of a file to write")
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.open("x").close()
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(
            f"export: {path.parent} is not a directory (a file is in the way); expected a folder to write {path.name} in"
        ) from None
    except OSError as e:
        raise ConfigError(f"export: cannot write in {path.parent} ({e.strerror or e}); choose another path") from None
    return tmp


def _line(row: RowMapping) -> str:
    """One memory as a JSON line; the separators in ``ESCAPES`` escaped (only strings can hold them)."""
    record = {k: row[k] for k in FIELDS}
    record["valid_from"] = row["created_at"] if row["valid_from"] is None else row["valid_from"]
    record["valid_to"], record["superseded_by"] = row["valid_to"], row["superseded_by"]
    record["kind"] = row["kind"] or "episode"
    record["meta"] = row["meta"] or {}
    record["embedding"] = base64.b64encode(row["embedding"]).decode("ascii")
    line = json.dumps(record, ensure_ascii=False)
    for raw, escaped in ESCAPES:
        if raw in line:
            line = line.replace(raw, escaped)
    return line + "\n"


# -- import ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Checked:
    """An export file whose every record passed the checks: its header, each id's (namespace, line), and
    the records themselves when the file is small (``KEEP_BYTES``)."""

    path: Path
    header: dict[str, Any]
    ids: dict[str, tuple[str, int]]
    stamp: tuple[int, int, int]
    kept: list[Record] | None


def check_file(path: Path) -> Checked:
    """Read the whole file once, checking every record; a large file keeps only ids (bounded memory)."""
    stamp = _stamp(path)
    kept: list[Record] | None = [] if stamp[0] <= KEEP_BYTES else None
    lines = _lines(path)
    header = _header(path, lines)
    ids: dict[str, tuple[str, int]] = {}
    for n, value in lines:
        record = _record(value, header, path, n)
        first = ids.get(record.id)
        if first is not None:
            raise ConfigError(
                f"import: {path}:{n}: id {record.id!r} already appears on line {first[1]}; expected each id once"
            )
        ids[record.id] = (record.namespace, n)
        if kept is not None:
            kept.append(record)
    if _stamp(path) != stamp:
        raise ConfigError(f"import: {path} changed while it was read; import it again once it is complete")
    return Checked(path, header, ids, stamp, kept)


def already_stored(conn: Connection, checked: Checked) -> set[str]:
    """The file's ids stored (or held in quarantine, ``memory.defences.quarantine``) in the same namespace (to skip); an
    id stored in another one is refused."""
    stored: dict[str, str] = {}
    for table, part in itertools.product((memory_items, quarantine), chunks(list(checked.ids))):
        stored.update(
            (i, ns) for i, ns in conn.execute(select(table.c.id, table.c.namespace).where(table.c.id.in_(part)))
        )
    crossing = sorted((checked.ids[i][1], i, ns) for i, ns in stored.items() if checked.ids[i][0] != ns)
    if crossing:
        n, ident, ns = crossing[0]
        more = f" ({len(crossing) - 1} more ids like it)" if len(crossing) > 1 else ""
        raise ConfigError(
            f"import: {checked.path}:{n}: id {ident!r} is in namespace {checked.ids[ident][0]!r} here, but the store "
            f"holds it in namespace {ns!r}{more}; memory ids are unique across a store: nothing was imported"
        )
    return set(stored)


def records(checked: Checked, skip: set[str]) -> Iterator[tuple[str, list[Record]]]:
    """The checked file's records again, in file order, as runs of one namespace of at most ``IMPORT_BATCH``."""
    run: list[Record] = []
    for record in _reread(checked) if checked.kept is None else checked.kept:
        if record.id in skip:
            continue
        if run and (record.namespace != run[0].namespace or len(run) >= IMPORT_BATCH):
            yield run[0].namespace, run
            run = []
        run.append(record)
    if run:
        yield run[0].namespace, run


def _reread(checked: Checked) -> Iterator[Record]:
    """A large file's records read and checked again (it must not have changed since ``check_file``)."""
    if _stamp(checked.path) != checked.stamp:
        raise ConfigError(f"import: {checked.path} changed since it was checked; import it again")
    lines = _lines(checked.path)
    next(lines)  # the header
    for n, value in lines:
        yield _record(value, checked.header, checked.path, n)


def same_embedder(header: dict[str, Any], embedder: Embedder, dim: int) -> bool:
    """Whether an export's embeddings can be reused by a store with this embedder."""
    return header.get("embedder") == getattr(embedder, "name", None) and header.get("dim") == dim


Stamp = Callable[[dict[str, Any]], dict[str, Any]]


def to_batch(
    records: list[Record], embedder: Embedder, dim: int, *, reuse: bool, stamp: Stamp | None = None
) -> tuple[NewItems, bool]:
    """New items for ``records`` and whether the file's embeddings were reused (``reuse`` and all present);
    otherwise the intents are embedded again. ``stamp`` turns a record's meta into the one stored (its writer)."""
    reused = reuse and all(r.embedding is not None for r in records)
    if reused:
        vecs = np.stack([r.embedding for r in records if r.embedding is not None])
    else:
        vecs = np.asarray(embedder.embed([r.intent for r in records]), dtype=np.float32)
    batch = NewItems.build(
        [r.intent for r in records],
        [r.experience for r in records],
        check_embeddings(vecs, len(records), dim, source="import"),
        q=[r.q for r in records],
        success=[r.success for r in records],
        meta=[r.meta if stamp is None else stamp(r.meta) for r in records],
        ids=[r.id for r in records],
        visits=[r.visits for r in records],
        created=[r.created_at for r in records],
        updated=[r.updated_at for r in records],
        valid_from=[r.valid_from for r in records],
        valid_to=[r.valid_to for r in records],
        superseded_by=[r.superseded_by for r in records],
        kinds=[r.kind for r in records],
    )
    return batch, reused


def _stamp(path: Path) -> tuple[int, int, int]:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"import: {path} does not exist; expected a file written by memory export") from None
    except OSError as e:
        raise ConfigError(f"import: cannot read {path} ({e.strerror or e})") from None
    return st.st_size, st.st_mtime_ns, st.st_ino


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) for each non-blank line; lines end at "\\n" only, one read at a time."""
    try:
        f = path.open("rb")
    except IsADirectoryError:
        raise ConfigError(f"import: {path} is a directory; expected a file written by memory export") from None
    except OSError as e:
        raise ConfigError(f"import: cannot read {path} ({e.strerror or e}); expected a memory export file") from None
    with f:
        for n, raw in enumerate(f, 1):  # a binary file splits on b"\n" alone, unlike str.splitlines
            if n == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark some editors add
                raw = raw[3:]
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ConfigError(
                    f"import: {path}:{n} is not UTF-8 text (byte {e.start + 1} of the line: {e.reason}); expected JSONL"
                ) from None
            yield n, _parse(text, path, n)


def _header(path: Path, lines: Iterator[tuple[int, Any]]) -> dict[str, Any]:
    first = next(lines, None)
    if first is None:
        raise ConfigError(f"import: {path} is empty; expected a header line then one memory per line")
    n, header = first
    version, dim, embedder = header.get("version"), header.get("dim"), header.get("embedder")
    if header.get("format") != FORMAT or type(version) is not int or version != VERSION:
        raise ConfigError(
            f"import: {path}:{n} is not an {FORMAT} v{VERSION} header, got {json.dumps(header, ensure_ascii=False):.120}"
        )
    if dim is not None and (type(dim) is not int or dim <= 0):
        raise ConfigError(f"import: {path}:{n}: the header's dim must be a positive whole number, got {dim!r:.40}")
    if embedder is not None and not isinstance(embedder, str):
        raise ConfigError(f"import: {path}:{n}: the header's embedder must be a name, got {embedder!r:.40}")
    return header


def _parse(line: str, path: Path, n: int) -> dict[str, Any]:
    try:
        value = _DECODER.decode(line)
    except ValueError as e:  # JSONDecodeError, a repeated key, an integer of over 4300 digits
        raise ConfigError(f"import: {path}:{n} is not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"import: {path}:{n} must be a JSON object, got {type(value).__name__}")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        keys = [k for k, _ in pairs]
        twice = next(k for i, k in enumerate(keys) if k in keys[:i])
        raise ValueError(f"an object has the key {twice!r} twice")
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=_object)


def _kind(value: object) -> str:
    if value not in KINDS:
        raise ConfigError(f"kind must be one of {KINDS} (optional; default episode), got {value!r:.60}")
    return str(value)


def _record(d: dict[str, Any], header: dict[str, Any], path: Path, n: int) -> Record:
    """One record, every field checked; a ``ConfigError`` naming the file, line and field otherwise."""
    try:
        created = _time(_required(d, "created_at", "a number of seconds (Unix time)"), "created_at")
        return Record(
            id=check_id("id", _required(d, "id", "a non-empty string")),
            namespace=check_namespace(d.get("namespace", "default")),
            intent=_text(d, "intent"),
            experience=_text(d, "experience"),
            q=_q(_required(d, "q", "a finite number")),
            visits=_visits(d.get("visits", 0)),
            success=check_success(d.get("success"), "success"),
            created_at=created,
            updated_at=_time(d.get("updated_at", created), "updated_at"),
            meta=check_meta(d.get("meta"), "meta"),
            embedding=_embedding(d.get("embedding"), header.get("dim")),
            valid_from=_time(d.get("valid_from", created), "valid_from"),
            valid_to=None if d.get("valid_to") is None else _time(d["valid_to"], "valid_to"),
            superseded_by=None if d.get("superseded_by") is None else check_id("superseded_by", d["superseded_by"]),
            kind=_kind(d.get("kind", "episode")),
        )
    except ConfigError as e:
        raise ConfigError(f"import: {path}:{n}: {e}") from None


def _required(d: dict[str, Any], name: str, expected: str) -> Any:
    if name not in d:
        raise ConfigError(f"{name} is missing; expected {expected}")
    return d[name]


def _text(d: dict[str, Any], name: str) -> str:
    value = _required(d, name, "a non-empty string")
    check_text(name, value)
    return value  # type: ignore[no-any-return]  # checked above


def _q(value: object) -> float:
    if isinstance(value, bool):  # check_reward reads a bool reward as 1.0 / 0.0; a stored Q is never one
        raise ConfigError(f"q must be a finite number, got {value!r}")
    return check_reward(value, "q") + 0.0  # + 0.0: -0.0 becomes 0.0, as SQLite stores it


def _visits(value: object) -> int:
    if type(value) is not int or not 0 <= value <= MAX_VISITS:
        raise ConfigError(
            f"visits must be a whole number from 0 to {MAX_VISITS:,}, got {value!r:.40} ({type(value).__name__})"
        )
    return value


def _time(value: object, name: str) -> float:
    expected = f"{name} must be a finite number of seconds (Unix time)"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{expected}, got {value!r:.40} ({type(value).__name__})")
    try:
        number = float(value)
    except OverflowError:
        raise ConfigError(f"{expected}, got an integer with {len(str(value))} digits") from None
    if not math.isfinite(number):
        raise ConfigError(f"{expected}, got {number!r}")
    return number + 0.0


def _embedding(value: object, dim: int | None) -> np.ndarray | None:
    if value is None:
        return None
    if dim is None:
        raise ConfigError("embedding given, but the file's header has no dim; expected a header naming the dimension")
    expected = f"embedding must be base64 of {dim} float32 values ({4 * dim} bytes)"
    if not isinstance(value, str):
        raise ConfigError(f"{expected}, got {type(value).__name__}")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ConfigError(f"{expected}, got text that is not base64 ({e})") from None
    if len(raw) != 4 * dim:
        raise ConfigError(f"{expected}, got {len(raw)} bytes")
    vec = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.isfinite(vec).all():
        raise ConfigError(f"{expected}, got NaN or infinite values")
    return vec
