"""Reliability: memory exports re-import bit for bit, and a bad file or path changes nothing.

`python -m bench.reliability_portable [--full] [--url POSTGRES_URL]` prints JSON.

- Hostile texts (every character ``str.splitlines`` splits on, emoji, RTL, combining marks, quotes,
  backslashes, texts shaped like records and headers, 100k-character texts) in every text field: ids,
  namespaces, intents, experiences, meta keys and values. SQLite → export → import into a fresh SQLite
  store, and into PostgreSQL then back out of it when a server is given; every field of every memory
  compared (floats through ``float.hex``, embeddings byte for byte).
- Malformed imports (a bad value in every field, lines that are no record, headers that are not v1,
  repeated ids, ids held in another namespace, folders, missing files): each must be a ``ConfigError``
  naming the file, the line and the field, and leave the store exactly as it was.
- Exports to a folder, under a file, and failing half way (disk full, a crash): no temporary file may
  remain and an older export at the path must be unchanged.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import select

from connectors.embedders import HashEmbedder
from connectors.errors import ConfigError, StoreError
from memory.storage import jsonl as portable
from memory.storage.schema import intents, memory_items
from memory.store import MemoryStore

DIM = 64
SEPARATORS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
POOL = (SEPARATORS + "🙂👩‍👧🇫🇷\u05e9\u05dc\u0645\u0631\u202e\u202c\u200b\u200de\u0301\u0338漢字\ufeff\ufffe\U0010ffff"
        + '"\\{}[]:,\t abcXYZ019')  # fmt: skip
ITEM_COLUMNS = ("id", "namespace", "intent", "experience", "q", "visits", "success", "created_at", "updated_at", "meta")
MISSING = object()
BAD_FIELDS = [
    ("id", ""), ("id", "x" * 65), ("id", 5), ("id", MISSING), ("namespace", 5), ("namespace", ""),
    ("namespace", "a\x00"), ("intent", "   "), ("intent", MISSING), ("intent", "\ud800"), ("experience", None),
    ("q", "0.5"), ("q", math.nan), ("q", math.inf), ("q", 10**400), ("q", True), ("visits", -5), ("visits", 2.7),
    ("visits", True), ("visits", 2**31), ("success", "no"), ("success", 1), ("created_at", math.nan),
    ("created_at", math.inf), ("created_at", "x"), ("created_at", 10**400), ("updated_at", -math.inf),
    ("meta", [1]), ("meta", "x"), ("meta", {"a": math.nan}), ("embedding", "not base64!"), ("embedding", 5),
    ("embedding", base64.b64encode(np.ones(3, dtype="<f4").tobytes()).decode()),
    ("embedding", base64.b64encode(np.full(DIM, np.nan, dtype="<f4").tobytes()).decode()),
]  # fmt: skip
BAD_LINES = [b"not json {", b"[1, 2]", b'{"id": "a", "id": "b"}', b'{"id": "caf\xe9"}']
BAD_HEADERS = [b"", b"\n \n", b'{"format": "other", "version": 1}', b'{"format": "evolve.memory", "version": 2}',
               b'{"format": "evolve.memory", "version": true}', b'{"format": "evolve.memory", "version": 1, "dim": 0}',
               b"\xff\xfe{}"]  # fmt: skip


def hostile_texts(n: int, *, seed: int = 0) -> list[str]:
    """``n`` texts: every separator alone and in context, texts shaped like lines of the file, then random
    mixes of ``POOL`` (every tenth about 100k characters long)."""
    fixed = [f"before{c}after" for c in SEPARATORS] + [
        '{"id": "fake", "intent": "looks like a record", "q": 1}',
        json.dumps({"format": "evolve.memory", "version": 1, "dim": DIM}),
        "e\u0301\u0302 combining, \u202eRTL\u202c, 🙂 emoji",
    ]
    rng = random.Random(seed)
    out = fixed[:n]
    while len(out) < n:
        size = 100_000 if len(out) % 10 == 9 else rng.randint(1, 300)
        out.append("x" + "".join(rng.choices(POOL, k=size)))
    return out


def fill(store: MemoryStore, texts: list[str]) -> None:
    for i, text in enumerate(texts):
        ns = text[:200] if i % 10 == 0 else f"tenant-{i % 3}"
        store.add(text, text[::-1], namespace=ns, id=f"{i}:{text[:50]}", success=[True, False, None][i % 3],
                  meta={text[:30]: text[:1000], "n": [i, i / 7, {"\u2028\u00e9": None}]})  # fmt: skip
        if i % 3 == 0:
            store.reinforce(store.retrieve(text, namespace=ns), 1 / 3)


def exact(value: Any) -> Any:
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return bytes(value) if isinstance(value, memoryview) else value


def stored_rows(store: MemoryStore) -> dict[str, tuple[Any, ...]]:
    """Every memory's fields and embedding, compared bit for bit, by id."""
    query = select(*(memory_items.c[k] for k in ITEM_COLUMNS), intents.c.embedding).join(
        intents, intents.c.id == memory_items.c.intent_id
    )
    with store.engine.connect() as conn:
        return {row[0]: tuple(exact(v) for v in row) for row in conn.execute(query)}


def differing(want: dict[str, tuple[Any, ...]], got: dict[str, tuple[Any, ...]]) -> int:
    """Fields that differ between two stores (a missing or extra memory counts all its fields)."""
    width = len(ITEM_COLUMNS) + 1
    out = width * len(set(want) ^ set(got))
    return out + sum(a != b for i in set(want) & set(got) for a, b in zip(want[i], got[i], strict=True))


def checksum(store: MemoryStore) -> str:
    with store.engine.connect() as conn:
        keys = [tuple(exact(v) for v in row) for row in conn.execute(select(intents).order_by(intents.c.id))]
    return hashlib.sha256(repr((sorted(stored_rows(store).items()), keys)).encode()).hexdigest()


def round_trip(source: MemoryStore, url: str, path: Path) -> tuple[int, int]:
    """Export ``source`` to ``path``, import into the empty store at ``url``: (failures, fields differing)."""
    with MemoryStore(url, embedder=HashEmbedder(dim=DIM)) as target:
        try:
            n = source.export(path)
            if target.import_(path) != n or target.import_(path) != 0:
                return 1, differing(stored_rows(source), stored_rows(target))
        except Exception:  # any exception is a failed round trip, counted
            return 1, differing(stored_rows(source), {})
        return 0, differing(stored_rows(source), stored_rows(target))


def timed(folder: Path, *, n: int) -> tuple[float, float]:
    """Seconds per 10k memories to export ``n`` plain ones (64-d, 100-character texts) and import them."""
    folder.mkdir(parents=True)
    rows = [(f"task {i} about topic {i % 97} " + "x" * 70, f"what worked for task {i}: step {i % 5}") for i in range(n)]
    with MemoryStore(f"sqlite:///{folder / 'a.db'}", embedder=HashEmbedder(dim=DIM)) as a:
        for part in range(0, n, 5000):
            a.add_many(rows[part : part + 5000], group=False)
        start = time.perf_counter()
        a.export(folder / "m.jsonl")
        exported = time.perf_counter() - start
    with MemoryStore(f"sqlite:///{folder / 'b.db'}", embedder=HashEmbedder(dim=DIM)) as b:
        start = time.perf_counter()
        b.import_(folder / "m.jsonl")
        imported = time.perf_counter() - start
    return exported / n * 10_000, imported / n * 10_000


def malformed_files(folder: Path) -> Iterator[tuple[Any, str]]:
    """(path, what the message must name) for each malformed import; the bad record is on line 4."""
    header = json.dumps({"format": "evolve.memory", "version": 1, "embedder": f"hash-{DIM}", "dim": DIM}).encode()
    vec = base64.b64encode(HashEmbedder(dim=DIM).embed(["x"])[0].astype("<f4").tobytes()).decode()

    def record(ident: str, ns: str = "alpha", **fields: Any) -> bytes:
        base = {"id": ident, "namespace": ns, "intent": f"intent {ident}", "experience": "e", "q": 0.5, "visits": 1,
                "success": True, "created_at": 1.7e9, "updated_at": 1.7e9, "meta": {}, "embedding": vec}  # fmt: skip
        return json.dumps({k: v for k, v in {**base, **fields}.items() if v is not MISSING}).encode()

    def file(name: str, *lines: bytes) -> Path:
        path = folder / name
        path.write_bytes(b"\n".join(lines) + b"\n")
        return path

    good = (header, record("g1"), record("g2", "beta"))
    for i, (field, value) in enumerate(BAD_FIELDS):
        yield file(f"field{i}.jsonl", *good, record("b1", "beta", **{field: value})), f"field{i}.jsonl:4: {field}"
    for i, line in enumerate(BAD_LINES):
        yield file(f"line{i}.jsonl", *good, line), f"line{i}.jsonl:4"
    for i, raw in enumerate(BAD_HEADERS):
        yield file(f"header{i}.jsonl", raw, record("g1")), f"header{i}.jsonl"
    yield file("dup.jsonl", *good, record("g1", "beta")), "dup.jsonl:4: id 'g1' already appears on line 2"
    yield file("cross.jsonl", *good, record("taken", "beta")), "cross.jsonl:4: id 'taken'"
    yield folder, "is a directory"
    yield folder / "missing.jsonl", "does not exist"
    yield None, "path must be a str or Path"


def refused_imports(url: str, folder: Path) -> dict[str, int]:
    """Every malformed import against a store holding memories: how each was answered."""
    out = {"tried": 0, "succeeded": 0, "changed": 0, "foreign": 0, "unnamed": 0}
    folder.mkdir(parents=True, exist_ok=True)
    with MemoryStore(url, embedder=HashEmbedder(dim=DIM)) as store:
        store.add("stored already", "in gamma", namespace="gamma", id="taken")
        store.add("another memory", "in alpha", namespace="alpha")
        for path, named in malformed_files(folder):
            before = checksum(store)
            out["tried"] += 1
            try:
                store.import_(path)
                out["succeeded"] += 1
            except ConfigError as e:
                out["unnamed"] += named not in str(e)
            except Exception:  # counted: every refusal must be a ConfigError
                out["foreign"] += 1
            out["changed"] += checksum(store) != before
    return out


@contextmanager
def patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def failing_exports(store: MemoryStore, folder: Path) -> dict[str, int]:
    """Exports to bad paths and exports that fail half way: temp files left, old files changed, wrong errors."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "a-folder").mkdir()
    (folder / "a-file").write_text("keep")
    old = folder / "old.jsonl"
    store.export(old)
    kept = old.read_bytes()
    real_line, calls = portable._line, iter(range(10**9))

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    def crash(row: Any) -> str:
        if next(calls) == 3:
            raise KeyboardInterrupt
        return str(real_line(row))

    cases: list[tuple[Callable[[], object], type[BaseException]]] = [
        (lambda: store.export(folder / "a-folder"), ConfigError),
        (lambda: store.export(folder / "a-file" / "m.jsonl"), ConfigError),
        (lambda: store.export(folder / "a-file" / "deeper" / "m.jsonl"), ConfigError),
    ]
    out = {"tried": 0, "foreign": 0}
    for call, expected in cases:
        out["tried"] += 1
        try:
            call()
        except expected:
            pass
        except BaseException:  # counted as the wrong error
            out["foreign"] += 1
    for name, fake, expected in (("fsync", disk_full, StoreError), ("_line", crash, KeyboardInterrupt)):
        out["tried"] += 1
        with patched(portable.os if name == "fsync" else portable, name, fake):
            try:
                store.export(old)
                out["foreign"] += 1  # it should have failed
            except expected:
                pass
            except BaseException:
                out["foreign"] += 1
    out["leaked"] = sum(1 for p in folder.rglob("*") if p.name.endswith(".tmp"))
    out["changed"] = int(old.read_bytes() != kept or (folder / "a-file").read_text() != "keep")
    return out


def run(quick: bool = True, *, pg_url: str | None = None) -> dict[str, Any]:
    """The export/import figures for bench/results/RELIABILITY.md (``bench/reliability.py`` collects them)."""
    n = 200 if quick else 2000
    texts = hostile_texts(n)
    with tempfile.TemporaryDirectory(prefix="evolve-portable-") as tmp:
        root = Path(tmp)
        with MemoryStore(f"sqlite:///{root / 'src.db'}", embedder=HashEmbedder(dim=DIM)) as source:
            fill(source, texts)
            trips = [round_trip(source, f"sqlite:///{root / 'copy.db'}", root / "m.jsonl")]
            if pg_url is not None:
                trips.append(round_trip(source, pg_url, root / "to-pg.jsonl"))
                with MemoryStore(pg_url, embedder=HashEmbedder(dim=DIM)) as pg:
                    trips.append(round_trip(pg, f"sqlite:///{root / 'from-pg.db'}", root / "from-pg.jsonl"))
            exports = failing_exports(source, root / "exports")
        seconds = timed(root / "speed", n=10_000 if quick else 100_000)
        bad = [refused_imports(f"sqlite:///{root / 'bad.db'}", root / "bad")]
        if pg_url is not None:
            bad.append(refused_imports(pg_url, root / "bad-pg"))
    total = {k: sum(b[k] for b in bad) for k in bad[0]}
    rows: list[list[Any]] = [
        ["hostile texts exported and re-imported", n * len(trips)],
        ["round trips (SQLite → SQLite" + (", SQLite → PostgreSQL → SQLite)" if pg_url else ")"), len(trips)],
        ["round-trip failures", sum(t[0] for t in trips)],
        ["fields differing after a round trip", sum(t[1] for t in trips)],
        ["SQLite: seconds per 10k plain memories, export", round(seconds[0], 2)],
        ["SQLite: seconds per 10k plain memories, import (check, then write)", round(seconds[1], 2)],
        ["malformed imports tried", total["tried"]],
        ["malformed imports that succeeded", total["succeeded"]],
        ["stores changed by a refused import", total["changed"]],
        ["refusals not a ConfigError (type mismatch)", total["foreign"]],
        ["refusals missing the file, line or field", total["unnamed"]],
        ["exports to bad paths or failing half way", exports["tried"]],
        ["temp files leaked by a failed export", exports["leaked"]],
        ["older export files changed by a failed export", exports["changed"]],
        ["failed exports with the wrong error (type mismatch)", exports["foreign"]],
    ]
    notes = (
        f"{n} hostile texts in every text field (ids, namespaces, intents, experiences, meta keys and values); "
        "floats compared through float.hex, embeddings byte for byte. "
        + ("" if pg_url else "PostgreSQL not measured (no server given). ")
        + "Malformed imports run against a store holding memories; the bad record sits in a later namespace "
        "than good ones, so a partial import would show."
    )
    return {"title": "Memory exports and imports", "rows": rows, "notes": notes}


if __name__ == "__main__":
    import sys

    url = sys.argv[sys.argv.index("--url") + 1] if "--url" in sys.argv else None
    print(json.dumps(run(quick="--full" not in sys.argv, pg_url=url), indent=2))
