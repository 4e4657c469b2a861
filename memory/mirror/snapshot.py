"""A namespace's mirror saved beside its vector index and memory-mapped on open (issue 25, item 2).

Reopening a store used to read every row of a namespace back from SQL (27.9 s at a million items).
``MirrorSet.save`` now also writes each changed mirror's columns (``ROW_COLUMNS``, ``KEY_COLUMNS``: seqs,
ids, Q, visits, created, intent codes, kinds; the intent keys' ids, seqs and vectors) to
``<slug>-<digest>.mirror`` beside the namespace's ``.faiss`` file, with the generation they reflect. Opening
maps the file, so nothing is read until used, and ``memory.mirror.sync`` catches the mirror up from SQL by
the rows stamped with a newer generation.

The file: ``MAGIC``, the header's length and the JSON header (namespace, dim, generation, a random token, the
row and key counts, each column's dtype, offset and capacity, a CRC-32 of the numeric columns), then each
column at a page-aligned offset with room for ``capacity`` entries. The room is a hole (no disk) mapped with
the rest, so rows appended after a reopen fill private pages instead of copying a column. The mapping is
private (``ACCESS_COPY``): the store writes to its columns in place (a reward's Q), the kernel copies the pages
it touches, and the file never changes, so a crash cannot damage it and processes share its pages. A file
is written under a temporary name and renamed: whole or absent. On close, a process whose mirror did not change
while it caught up to a newer generation rewrites only the sidecar ``<file>.json`` (token, generation), which
counts only beside the file with its token.

``load`` trusts nothing it can check cheaply: magic, version, namespace, dimension, each column's place
within the file, the CRC, seqs strictly ascending, codes within the keys. ``disagreement`` compares the
caught-up mirror with SQL (both ends and a sample of items and keys). Anything wrong: the mirror is read
from SQL instead. Not checked, to keep opening free of reading them whole: the ids and key vectors outside
the sampled rows.

Example:
    >>> import tempfile
    >>> from memory.mirror.index import VectorIndex
    >>> m = NamespaceMirror("default", 2, VectorIndex(2, backend="numpy"))
    >>> m.add_keys(np.array(["k1"], dtype=object), np.array([1]), np.array([[1.0, 0.0]]))
    >>> path = Path(tempfile.mkdtemp()) / "default.mirror"
    >>> _ = save(m, path, generation=7)
    >>> saved = load(path, namespace="default", dim=2)
    >>> saved.generation, saved.keys, saved.columns["keys"][0].tolist()
    (7, 1, [1.0, 0.0])
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import mmap
import os
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
from sqlalchemy import Connection, select

from connectors.errors import StoreError
from memory.mirror.arrays import EPISODE, KEY_COLUMNS, ROW_COLUMNS, STRATEGY, NamespaceMirror
from memory.mirror.files import file_fault, meta_path, remove_stale_temps
from memory.mirror.keyrows import FileRows
from memory.storage.schema import from_blobs, intents, memory_items, tombstones

log = logging.getLogger(__name__)

MAGIC = b"EVMIRROR"
VERSION = 1
PAGE = 4096
DTYPES = {  # the stored dtype of each column; "U": fixed-width text, as wide as its longest value
    "seqs": "<i8", "ids": "U", "q": "<f8", "visits": "<i8", "created": "<f8", "intent_codes": "<i8",
    "kinds": "|i1", "key_ids": "U", "key_seqs": "<i8", "keys": "<f4",
}  # fmt: skip
CHECKED = ("seqs", "q", "visits", "created", "intent_codes", "kinds", "key_seqs")
"""The columns under the CRC: every one but the ids and the key vectors, which would have to be read whole."""
SPOT_CHECKS = 8

# Held while a file is written: the temporary names are per process, so two stores of one process take turns.
_SAVING = threading.Lock()


@dataclass(frozen=True)
class SavedMirror:
    """A mapped snapshot: its columns (room after the first ``rows`` items and ``keys`` keys), the
    generation they reflect, the file's token and its newest item (seq, id)."""

    generation: int
    token: str
    rows: int
    keys: int
    columns: dict[str, np.ndarray]
    newest: tuple[int, str] | None = None
    keys_file: FileRows | None = None  # the saved keys, read without the map (``memory.mirror.keyrows``)


def mirror_file(index_file: Path) -> Path:
    """The snapshot beside a namespace's index file (``memory.mirror.sync.index_file``)."""
    return index_file.with_suffix(".mirror")


# -- writing ---------------------------------------------------------------------------------------
def save(mirror: NamespaceMirror, path: Path, generation: int) -> str:
    """Write ``mirror`` to ``path`` as reflecting ``generation``, atomically; returns the file's token.

    A failed write (a full disk, a read-only folder) is a ``StoreError`` naming its cause; no temporary
    file is left behind.
    """
    columns = {name: _stored(name, values) for name, values in mirror.columns().items()}
    token = os.urandom(8).hex()
    header, size = _layout(mirror, columns, generation, token)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _SAVING:
            _replace(path, lambda f: _write(f, header, columns, size))  # a sidecar beside it names another token
        remove_stale_temps(path)
    except OSError as e:
        raise _fault(path, e) from e
    return token


def restamp(path: Path, token: str, generation: int) -> None:
    """Record that the unchanged file with ``token`` now reflects ``generation`` (the sidecar only)."""
    stamp = json.dumps({"token": token, "generation": generation}).encode("utf-8")
    try:
        with _SAVING:
            _replace(meta_path(path), lambda f: f.write(stamp))
        remove_stale_temps(path)
    except OSError as e:
        raise _fault(path, e) from e


def _stored(name: str, values: np.ndarray) -> np.ndarray:
    if DTYPES[name] == "U":
        return values if values.dtype.kind == "U" else np.asarray(values.tolist(), dtype=str)
    return np.ascontiguousarray(values, dtype=DTYPES[name])


def _layout(mirror: NamespaceMirror, columns: dict[str, np.ndarray], generation: int, token: str) -> tuple[bytes, int]:
    """The header (magic, length, JSON) and the file's size; each column's offset and capacity in the JSON."""
    specs: dict[str, dict[str, Any]] = {}
    crc = 0
    for name in CHECKED:
        crc = zlib.crc32(_buffer(columns[name]), crc)
    rows, keys = len(mirror), len(mirror.key_seqs)
    offset = 64 * 1024  # the header's room (one column spec is ~80 bytes)
    for name, values in columns.items():
        n = keys if name in KEY_COLUMNS else rows
        capacity = n + n // 8 + 64
        specs[name] = {"dtype": values.dtype.str, "offset": offset, "capacity": capacity}
        offset += -(-capacity * _row_bytes(values.dtype, mirror.dim, name) // PAGE) * PAGE
    meta = {
        "version": VERSION, "namespace": mirror.namespace, "dim": mirror.dim, "generation": generation,
        "token": token, "rows": rows, "keys": keys, "crc": crc, "columns": specs,
        "newest": [int(columns["seqs"][-1]), str(columns["ids"][-1])] if rows else None,
    }  # fmt: skip
    text = json.dumps(meta).encode("utf-8")
    return MAGIC + len(text).to_bytes(8, "little") + text, offset


def _row_bytes(dtype: np.dtype, dim: int, name: str) -> int:
    return dtype.itemsize * (dim if name == "keys" else 1)


def _write(f: IO[bytes], header: bytes, columns: dict[str, np.ndarray], size: int) -> None:
    if len(header) > 64 * 1024:
        raise OSError(f"the mirror's header is {len(header):,} bytes, more than its 64 KiB room")
    f.write(header)
    meta = json.loads(header[16:])
    for name, values in columns.items():
        f.seek(meta["columns"][name]["offset"])
        f.write(_buffer(values))
    f.truncate(size)  # the last column's room: a hole


def _buffer(values: np.ndarray) -> memoryview:
    """The array's bytes without a copy (for writing and checksums)."""
    return memoryview(np.ascontiguousarray(values).reshape(-1).view(np.uint8))  # type: ignore[arg-type]


def _replace(path: Path, write: Any) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            write(f)
        os.replace(tmp, path)
    finally:  # a write cut short (a full disk) leaves a torn temporary file: remove it
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _fault(path: Path, e: OSError) -> StoreError:
    return StoreError(
        f"{file_fault(e)}: cannot save the memory mirror {str(path)!r} ({e}). The memories are safe in the "
        "database and the mirror is read from it on open; free space or make the folder writable, or pass "
        "index_path= to save it elsewhere"
    )


# -- reading ---------------------------------------------------------------------------------------
def load(path: Path, *, namespace: str, dim: int) -> SavedMirror | None:
    """The snapshot at ``path`` mapped privately, or None when it is missing, torn, foreign or damaged."""
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            if f.read(8) != MAGIC:
                raise ValueError("not a mirror file")
            length = int.from_bytes(f.read(8), "little")
            if not 0 < length <= 64 * 1024 - 16:
                raise ValueError(f"a header of {length:,} bytes")
            meta = json.loads(f.read(length))
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            fd = os.dup(f.fileno())  # the same file as the map, for reading key rows (``FileRows``)
        try:
            saved = _mapped(buf, meta, size, namespace=namespace, dim=dim, start=16 + length)
        except BaseException:
            os.close(fd)
            raise
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:  # torn, garbage, foreign: read from SQL instead
        log.warning("memory mirror %s cannot be used (%s); it is read from the database", path, e)
        return None
    keys_file = FileRows(fd, offset=int(meta["columns"]["keys"]["offset"]), count=saved.keys, dim=dim)
    generation = _stamped(path, saved.token, saved.generation)
    return dataclasses.replace(saved, generation=generation, keys_file=keys_file)


def _mapped(buf: mmap.mmap, meta: dict[str, Any], size: int, *, namespace: str, dim: int, start: int) -> SavedMirror:
    """The columns of a file whose header (``meta``) ends at ``start``, after checking all but SQL."""
    if meta["version"] != VERSION or meta["namespace"] != namespace or meta["dim"] != dim:
        raise ValueError(f"version {meta['version']}, namespace {meta['namespace']!r}, dim {meta['dim']}")
    rows, keys = int(meta["rows"]), int(meta["keys"])
    if min(rows, keys) < 0:
        raise ValueError(f"{rows} items and {keys} keys")
    columns: dict[str, np.ndarray] = {}
    for name in ROW_COLUMNS + KEY_COLUMNS:
        spec = meta["columns"][name]
        dtype, capacity, offset = np.dtype(spec["dtype"]), int(spec["capacity"]), int(spec["offset"])
        text = DTYPES[name] == "U"
        if (text and dtype.kind != "U") or (not text and dtype != np.dtype(DTYPES[name])):
            raise ValueError(f"column {name} holds {dtype}")
        if capacity < (keys if name in KEY_COLUMNS else rows) or offset < start:
            raise ValueError(f"column {name} has room for {capacity:,} entries at byte {offset:,}")
        width = dim if name == "keys" else 1
        if offset + capacity * width * dtype.itemsize > size:
            raise ValueError(f"column {name} ends past the file's end ({size:,} bytes): a truncated file")
        data = np.frombuffer(buf, dtype=dtype, count=capacity * width, offset=offset)
        if name == "keys" and capacity and hasattr(mmap, "MADV_RANDOM"):  # a recall reads a few scattered rows
            buf.madvise(mmap.MADV_RANDOM, offset, capacity * width * dtype.itemsize)
        columns[name] = data.reshape(capacity, dim) if name == "keys" else data
    crc = 0
    for name in CHECKED:
        crc = zlib.crc32(_buffer(columns[name][: keys if name in KEY_COLUMNS else rows]), crc)
    if crc != meta["crc"]:
        raise ValueError("its checksum does not match its contents")
    seqs, codes, kinds = (columns[n][:rows] for n in ("seqs", "intent_codes", "kinds"))
    if (
        np.any(np.diff(seqs) <= 0)
        or np.any((codes < 0) | (codes >= keys))
        or np.any((kinds != EPISODE) & (kinds != STRATEGY))
    ):
        raise ValueError("its items are out of order or point at keys it does not hold")
    newest = (int(meta["newest"][0]), str(meta["newest"][1])) if meta["newest"] else None
    return SavedMirror(int(meta["generation"]), str(meta["token"]), rows, keys, columns, newest)


def _stamped(path: Path, token: str, generation: int) -> int:
    """The generation the sidecar records for the file with ``token``, when newer than its own."""
    try:
        stamp = json.loads(meta_path(path).read_text(encoding="utf-8"))
        if stamp["token"] == token:
            return max(generation, int(stamp["generation"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no sidecar, or another file's: the file's own generation
    return generation


# -- checking against SQL ----------------------------------------------------------------------------
def forked(conn: Connection, saved: SavedMirror) -> bool:
    """True when the database is not the one the snapshot saw (a copy restored and written since): its
    newest item's seq holds another memory, or none and no removal after the snapshot explains it."""
    if saved.newest is None:
        return False
    seq, item_id = saved.newest
    found = conn.execute(select(memory_items.c.id).where(memory_items.c.seq == seq)).scalar()
    if found is not None:
        return bool(found != item_id)
    removed = select(tombstones.c.gen).where(tombstones.c.seq == seq, tombstones.c.gen > saved.generation)
    return conn.execute(removed).first() is None


def disagreement(conn: Connection, mirror: NamespaceMirror, *, samples: int = SPOT_CHECKS) -> str | None:
    """What a snapshot, once caught up, gets wrong against SQL (None: nothing found).

    Checked: the namespace's first and last valid items, and a sample of items (spread evenly, and drawn
    at random) and of intent keys, column by column. (Its newest key is not checked: SQLite would sort the
    namespace's keys to find it.)
    """
    ns, c = mirror.namespace, memory_items.c
    valid = select(c.seq).where(c.namespace == ns, c.valid_to.is_(None))
    ends = [conn.execute(valid.order_by(order).limit(1)).scalar() for order in (c.seq.asc(), c.seq.desc())]
    held = [int(mirror.seqs[0]), int(mirror.seqs[-1])] if len(mirror) else [None, None]
    if ends != held:
        return f"its first and last items are seqs {held}, the database's {ends}"
    return _rows_disagree(conn, mirror, _sample(len(mirror), samples)) or _keys_disagree(
        conn, mirror, _sample(len(mirror.key_seqs), samples)
    )


def _sample(n: int, samples: int) -> np.ndarray:
    spread = np.linspace(0, n - 1, min(samples // 2, n)).astype(np.int64)
    drawn = np.random.default_rng().integers(0, n, min(samples - samples // 2, n)) if n else spread
    return np.unique(np.concatenate([spread, drawn]))


def _rows_disagree(conn: Connection, mirror: NamespaceMirror, rows: np.ndarray) -> str | None:
    if not len(rows):
        return None
    c = memory_items.c
    stored = {
        int(r[0]): tuple(r[1:])
        for r in conn.execute(
            select(c.seq, c.id, c.q, c.visits, c.created_at, c.intent_id, c.kind, c.valid_to, c.namespace).where(
                c.seq.in_([int(s) for s in mirror.seqs[rows]])
            )
        )
    }
    cols = mirror.columns()  # the ids as held: no conversion of the whole column for a sample
    for row in rows.tolist():
        held = (
            str(cols["ids"][row]), float(mirror.q[row]), int(mirror.visits[row]), float(mirror.created[row]),
            str(cols["key_ids"][mirror.intent_codes[row]]), int(mirror.kinds[row]), None, mirror.namespace,
        )  # fmt: skip
        got = stored.get(int(mirror.seqs[row]))
        if got is None or (*got[:5], STRATEGY if got[5] == "strategy" else EPISODE, *got[6:]) != held:
            return f"item seq {int(mirror.seqs[row])} is {held!r:.200} here and {got!r:.200} in the database"
    return None


def _keys_disagree(conn: Connection, mirror: NamespaceMirror, pos: np.ndarray) -> str | None:
    if not len(pos):
        return None
    key_ids, seqs = mirror.columns()["key_ids"], [int(s) for s in mirror.key_seqs[pos]]
    stored = {
        int(r[0]): (r[1], r[2], r[3])
        for r in conn.execute(
            select(intents.c.seq, intents.c.id, intents.c.namespace, intents.c.embedding).where(intents.c.seq.in_(seqs))
        )
    }
    for p, seq in zip(pos.tolist(), seqs, strict=True):
        got = stored.get(seq)
        if got is None or (got[0], got[1]) != (str(key_ids[p]), mirror.namespace):
            return f"intent key seq {seq} is not the database's"
        if not np.array_equal(from_blobs([got[2]], mirror.dim)[0], mirror.keys[p]):
            return f"intent key seq {seq} has another vector than the database's"
    return None
