"""The checks at the memory store's edges: what a text, an id, a namespace, a reward or meta may be, and
the ids the store makes (fresh ones, and ones built from user-chosen names that must fit their columns).

Every check raises ``ConfigError`` naming the argument, what was expected and what arrived, before
anything is written; a text every backend can store is one without NUL or lone surrogates.

Example:
    >>> check_namespace("tenant-a/coder"), fit_id("run:1:task")
    ('tenant-a/coder', 'run:1:task')
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Mapping
from numbers import Real
from typing import Any

import numpy as np
from sqlalchemy import Connection

from connectors.db import check_chars
from connectors.embedders import normalise_rows
from connectors.errors import ConfigError, StoreError
from connectors.redact import redact_url
from memory.config import MemoryConfig, RetrievalConfig, real_number
from memory.defences.trust import MAX_WRITER, WRITER_KINDS, has_control, is_writer
from memory.storage.records import MemoryItem
from memory.storage.schema import read_state, record_embedder

MAX_NAMESPACE = 200
MAX_ID = 64  # the id columns are VARCHAR(64)
MAX_FEEDBACK_ID = 128  # memory_feedback.id is VARCHAR(128)
UNIT_TOLERANCE = 1e-6  # |norm - 1| below this counts as unit length (float32 rounding)
NORM_ROWS = 1024  # rows whose float64 copy (3 MB at 384-d) stays in cache while their norms are taken
MAX_VALUE = 1e12
"""The largest magnitude of a reward or a Q-value (see ``check_reward``)."""
MAX_META_DEPTH = 64
"""How deeply ``meta`` (and a write's ``provenance``) may nest lists and mappings."""
MAX_TEXT = 1_000_000
"""The most characters in one intent, experience or query; a larger text is refused, not stored."""


def new_id() -> str:
    """A fresh id: 32 hex digits, the time in milliseconds then 80 random bits (like UUIDv7).

    Ids that grow with time land at the right edge of the primary-key indexes, so a batch of new
    rows touches a few index pages instead of one random page each.
    """
    return new_ids(1)[0]


def new_ids(n: int) -> list[str]:
    """``n`` fresh ids (see ``new_id``), drawn in one system call."""
    prefix = f"{time.time_ns() // 1_000_000:012x}"
    raw = os.urandom(10 * n).hex()
    return [prefix + raw[i : i + 20] for i in range(0, 20 * n, 20)]


def fit_id(text: str, limit: int = MAX_ID) -> str:
    """``text`` when it has at most ``limit`` characters, else its head, ``~`` and 16 hex digits of its
    SHA-256: ids and namespaces built from user-chosen names (runs, tenants, agents, tasks) always fit
    their columns, stay readable, and two different texts never share a shortened form by accident.

    Example:
        >>> fit_id("short-run:1:task")
        'short-run:1:task'
        >>> long = fit_id("heldout-similarity-s7:3:escalation-alderney/heldout-similarity-s7/solver")
        >>> len(long), long[:30]
        (64, 'heldout-similarity-s7:3:escala')
    """
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{text[: limit - len(digest) - 1]}~{digest}"


def check_owner(item: MemoryItem, namespace: str) -> MemoryItem:
    """``item`` when it belongs to ``namespace``; a ``StoreError`` when its id is taken elsewhere."""
    if item.namespace != namespace:
        raise StoreError(
            f"memory id {item.id!r} is taken by a memory outside namespace {namespace!r} "
            "(ids are unique across the store); choose another id"
        )
    return item


def check_text(name: str, value: object, *, limit: int = MAX_TEXT) -> None:
    """A non-empty string of at most ``limit`` characters that every backend can store (``check_chars``)."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name} must be a non-empty string, got {value!r:.120}")
    if len(value) > limit:
        raise ConfigError(f"{name} must be at most {limit:,} characters, got {len(value):,}")
    check_chars(name, value)


def check_k(k: object, where: str = "", *, most: int | None = None) -> int:
    """How many memories a recall returns: an integer from 1 (to ``most`` when given); a ``ConfigError``
    that says so otherwise.

    Example:
        >>> check_k(3, "MemoryRetriever"), check_k(50, most=50)
        (3, 50)
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1 or (most is not None and k > most):
        bounds = ">= 1" if most is None else f"from 1 to {most}"
        prefix = f"{where}: " if where else ""
        raise ConfigError(f"{prefix}k must be an integer {bounds} (how many memories to recall), got {k!r:.80}")
    return k


def check_id(name: str, value: object) -> str:
    """A memory or recall id: a non-empty string of at most ``MAX_ID`` characters."""
    check_text(name, value, limit=MAX_ID)
    return value  # type: ignore[return-value]  # checked above


def as_list(values: object, name: str) -> list[Any]:
    """``values`` as a list; anything not iterable (None, a number) is a ``ConfigError``."""
    try:
        return list(values)  # type: ignore[call-overload]
    except TypeError:
        raise ConfigError(f"{name} must be a sequence, got {type(values).__name__}") from None


def check_texts(values: object, name: str, *, single: str) -> list[str]:
    """A sequence of non-empty strings (a lone string is refused: ``single`` says what to do instead)."""
    if isinstance(values, str):
        raise ConfigError(f"{name} must be a sequence of strings, got a single string ({single})")
    out = as_list(values, name)
    for i, text in enumerate(out):
        check_text(f"{name}[{i}]", text)
    return out


def check_rows(rows: object) -> list[tuple[str, str]]:
    """``add_many``'s rows: (intent, experience) pairs of non-empty strings."""
    out = as_list(rows, "add_many: rows")
    for i, row in enumerate(out):
        if not isinstance(row, (tuple, list)) or len(row) != 2:
            raise ConfigError(f"add_many: rows[{i}] must be an (intent, experience) pair, got {row!r:.120}")
        check_text(f"rows[{i}] intent", row[0])
        check_text(f"rows[{i}] experience", row[1])
    return [(r[0], r[1]) for r in out]


def check_namespace(namespace: object) -> str:
    if not isinstance(namespace, str) or not namespace or len(namespace) > MAX_NAMESPACE:
        raise ConfigError(
            f"namespace must be a non-empty string of at most {MAX_NAMESPACE} characters, got {namespace!r:.120}"
        )
    return check_chars("namespace", namespace)


def check_writer(writer: object, where: str = "writer") -> str:
    """A memory's writer (``memory.defences.trust``): ``"<kind>:<name>"``, else a ``ConfigError`` saying the form."""
    if not is_writer(writer):
        raise ConfigError(
            f"{where} must be '<kind>:<name>' with kind one of {', '.join(WRITER_KINDS)} and a name that is not "
            f"blank, at most {MAX_WRITER} characters without control characters (e.g. 'tenant:Zürich Nord'), "
            f"got {writer!r:.120}"
        )
    return str(writer)


def writer_name(kind: str, name: str) -> str:
    """The writer ``"<kind>:<name>"`` for a name the caller did not choose to fit (a run, a file name): control
    characters become spaces and a long one is shortened with a hash (``fit_id``).

    Example:
        >>> writer_name("import", "codes\\n2026.jsonl")
        'import:codes 2026.jsonl'
    """
    clean = "".join(" " if has_control(c) else c for c in name).strip() or "?"
    return check_writer(fit_id(f"{kind}:{clean}", MAX_WRITER))


def stamped(meta: object, writer: str) -> object:
    """``meta`` (a mapping; anything else is left for ``check_meta`` to refuse) with ``writer`` as its
    ``"writer"``; a different writer it claimed is kept as ``"claimed_writer"``."""
    if not isinstance(meta, Mapping):
        return {"writer": writer} if meta is None else meta
    out = dict(meta)
    claimed, out["writer"] = out.get("writer"), writer
    if claimed is not None and claimed != writer:
        out["claimed_writer"] = claimed
    return out


def with_writer(meta: object, writer: object) -> Any:
    """``add``/``add_many``'s ``meta`` (one mapping, one per row, or None) stamped with a checked ``writer``."""
    who = check_writer(writer)
    if meta is None or isinstance(meta, Mapping):
        return stamped(meta, who)
    return [stamped(m, who) for m in as_list(meta, "meta")]


def imported_meta(meta: dict[str, Any], *, writer: str | None, fallback: str) -> dict[str, Any]:
    """An imported record's meta: with ``writer`` None its own valid writer, kept as it is (so a restore of an
    export is bit-exact), else ``fallback`` (``import:<file name>``); a given ``writer`` stamps it (``stamped``)."""
    if writer is None and is_writer(meta.get("writer")):
        return meta
    return stamped(meta, fallback if writer is None else writer)  # type: ignore[return-value]  # a dict in


def check_retrieval(cfg: object) -> RetrievalConfig:
    if not isinstance(cfg, RetrievalConfig):
        raise ConfigError(f"retrieve: config must be a RetrievalConfig, got {type(cfg).__name__}")
    return cfg


def check_shared(shared: object, namespace: str) -> str | None:
    """The namespace a recall searches besides ``namespace`` (None: none); ConfigError when it is the same."""
    if shared is None:
        return None
    if check_namespace(shared) == namespace:
        raise ConfigError(f"retrieve: shared must be another namespace than {namespace!r}")
    return str(shared)


def check_time(value: object, name: str) -> float | None:
    """A moment as Unix time in seconds (a finite number; ``time.time()`` gives one), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (Real, np.number)) or not math.isfinite(float(value)):  # type: ignore[arg-type]
        raise ConfigError(f"retrieve: {name} must be a finite Unix time in seconds (time.time()), got {value!r:.80}")
    return float(value)  # type: ignore[arg-type]


def check_moment(value: object, where: str) -> float:
    """``value`` as a finite Unix time (None: now); ``where`` names the call in the error."""
    if value is None:
        return time.time()
    number = real_number(value)
    if number is None:
        raise ConfigError(f"{where}: now must be a finite Unix time in seconds (time.time()), got {value!r:.80}")
    return number


def check_success(value: object, where: str) -> bool | None:
    """A success flag: True, False or None (unknown); ``"no"`` or 1 are refused, not read as truthy."""
    if value is not None and not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{where} must be True, False or None, got {value!r:.80} ({type(value).__name__})")
    return None if value is None else bool(value)


def check_reward(value: object, where: str, *, what: str = "reward") -> float:
    """A finite float of magnitude at most ``MAX_VALUE`` (bools count as 1.0 / 0.0); anything else is a
    ``ConfigError``.

    The bound keeps every stored Q finite: ``Q + α·(r − Q)`` with both within ±1e12 cannot overflow
    (finite values near 1.8e308 could: ``r − Q`` would be infinite).
    """
    if not isinstance(value, (Real, np.number)) or isinstance(value, complex):
        raise ConfigError(f"{where}: {what} must be a finite number, got {value!r} ({type(value).__name__})")
    try:
        number = float(value)  # type: ignore[arg-type]
    except OverflowError:
        raise ConfigError(
            f"{where}: {what} must be a finite number, got an integer with {len(str(value))} digits"
        ) from None
    if not math.isfinite(number):
        raise ConfigError(f"{where}: {what} must be a finite number, got {number!r}")
    if abs(number) > MAX_VALUE:
        raise ConfigError(f"{where}: {what} must be within ±{MAX_VALUE:.0e}, got {number!r}")
    return number + 0.0  # -0.0 becomes 0.0: SQLite stores no negative zero, so both backends agree


def check_meta(meta: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    """``meta`` as a dict: a mapping that is JSON without NaN or infinity, every text storable, nested at
    most ``MAX_META_DEPTH`` deep (``{}`` for None)."""
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {type(meta).__name__}")
    out = dict(meta)
    _check_json_text(out, where)  # first: it bounds the depth json.dumps would recurse into
    try:
        json.dumps(out, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where} must be JSON-serialisable without NaN or infinity, got {out!r:.120} ({e})") from e
    return out


def _check_json_text(value: object, where: str) -> None:
    """Every key and string inside a JSON value passes ``check_chars`` (PostgreSQL's JSON refuses NUL),
    and nothing is nested deeper than ``MAX_META_DEPTH``; iterative, so any depth gets a clear error."""
    stack: list[tuple[object, str, int]] = [(value, where, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            check_chars(path, item)
        elif isinstance(item, (Mapping, list, tuple)):
            if depth >= MAX_META_DEPTH:
                raise ConfigError(
                    f"{where} must be nested at most {MAX_META_DEPTH} levels deep, got deeper at {path:.200}"
                )
            if isinstance(item, Mapping):
                for k, v in item.items():
                    check_chars(f"{path} key", str(k))
                    stack.append((v, f"{path}[{k!r:.40}]", depth + 1))
            else:
                stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(item))


def check_store_args(embedder: object, config: object) -> MemoryConfig:
    """``MemoryStore``'s embedder (``.embed(texts)`` and an int ``.dim``) and config (None: the defaults)."""
    if not callable(getattr(embedder, "embed", None)) or not isinstance(getattr(embedder, "dim", None), int):
        raise ConfigError(f"MemoryStore needs an embedder with .embed(texts) and an int .dim, got {embedder!r}")
    config = config if config is not None else MemoryConfig()
    if not isinstance(config, MemoryConfig):
        raise ConfigError(f"MemoryStore config must be a MemoryConfig, got {type(config).__name__}")
    return config


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
    off = np.abs(row_norms(arr) - 1.0) > UNIT_TOLERANCE
    if off.any():
        arr = arr.copy()
        arr[off] = normalise_rows(arr[off])
    return arr


def row_norms(arr: np.ndarray, *, rows: int = NORM_ROWS) -> np.ndarray:
    """Each row's L2 norm in float64, ``rows`` rows at a time: the same values as one ``np.linalg.norm``
    over the whole matrix (each row is summed on its own), without its float64 copy of the matrix, which
    made it five times slower for a 10,000-row batch of 384-d vectors."""
    if len(arr) <= rows:
        return np.linalg.norm(arr.astype(np.float64), axis=1)
    return np.concatenate(
        [np.linalg.norm(arr[i : i + rows].astype(np.float64), axis=1) for i in range(0, len(arr), rows)]
    )


def check_feedback_id(value: object) -> str:
    """A feedback id the ``memory_feedback`` table can key: a non-empty string of at most 128 characters."""
    if not isinstance(value, str) or not value or len(value) > MAX_FEEDBACK_ID:
        raise ConfigError(
            f"feedback_id must be a non-empty string of at most {MAX_FEEDBACK_ID} characters, got {value!r:.120}"
        )
    return check_chars("feedback_id", value)
