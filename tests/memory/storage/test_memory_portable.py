"""Export → import gives back every memory bit for bit, and a bad file changes nothing (memory.storage.jsonl).

Hostile texts (every character ``str.splitlines`` splits on, emoji, RTL, combining marks, 100k-character
texts, texts that look like records or headers) round-trip exactly on SQLite and PostgreSQL; every
malformed record is a ``ConfigError`` naming the file, the line and the field, and the store is left
exactly as it was; an export never leaves a temporary file behind.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from sqlalchemy import select

from connectors.embedders import HashEmbedder
from connectors.errors import ConfigError, EvolveError, StoreError
from memory.storage import jsonl as portable
from memory.storage.schema import intents, memory_items
from memory.store import MemoryStore
from memory.write import adding

Open = Callable[..., MemoryStore]
SEPARATORS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""Every character ``str.splitlines`` breaks a line on."""
HOSTILE = [
    *(f"before{c}after" for c in SEPARATORS),
    "x" + SEPARATORS + "y",
    "🙂 👩‍👩‍👧‍👦 emoji, ZWJ sequences and flags 🇫🇷",
    "\u202eRTL override \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627\u202c",
    "e\u0301\u0302\u0303 combining marks \u0338\u20dd",
    "x" * 50_000 + "\u2028" + "y" * 49_999,
    '{"id": "fake", "namespace": "default", "intent": "looks like a record", "q": 1}',
    '{"format": "evolve.memory", "version": 1, "embedder": "hash-64", "dim": 64}',
    '"quoted" \\backslash\\ \t\ttabs \\u2028 escaped-looking',
    "\ufeffBOM first, \ufffe\uffff noncharacters, \U0010ffff the last code point",
]
TEXTS = st.text(
    st.one_of(st.characters(), st.sampled_from([*SEPARATORS, '"', "\\", "{", "\x00"])), min_size=1, max_size=40
)
"""Any Unicode text, the line separators, JSON's metacharacters and NUL drawn often."""
_databases = itertools.count(1)


@pytest.fixture
def fresh_url(db_url: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A second, empty database on the same backend as ``db_url``."""
    if db_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
        return
    from tests.support.postgres import create_database, drop_database

    server = request.getfixturevalue("pg_server")
    name = f"evolve_portable_{os.getpid()}_{next(_databases)}"
    yield create_database(server, name)
    drop_database(server, name)


def exact(value: Any) -> Any:
    """A value compared bit for bit: floats by ``float.hex``, JSON canonically (ints and floats differ)."""
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return bytes(value) if isinstance(value, memoryview) else value


def stored_rows(store: MemoryStore) -> list[tuple[Any, ...]]:
    """Every memory with every field and its embedding, by id."""
    cols = [memory_items.c[k] for k in ("id", "namespace", "intent", "experience", "q", "visits", "success",
                                        "created_at", "updated_at", "meta")]  # fmt: skip
    query = select(*cols, intents.c.embedding).join(intents, intents.c.id == memory_items.c.intent_id)
    with store.engine.connect() as conn:
        rows = conn.execute(query.order_by(memory_items.c.id)).all()
    return [tuple(exact(v) for v in row) for row in rows]


def checksum(store: MemoryStore) -> tuple[int, str]:
    """How many memories and intent keys the store holds, and a hash of every field of both."""
    with store.engine.connect() as conn:
        keys = conn.execute(select(intents).order_by(intents.c.id)).all()
    rows = stored_rows(store)
    digest = hashlib.sha256(repr((rows, [tuple(exact(v) for v in k) for k in keys])).encode()).hexdigest()
    return len(rows) + len(keys), digest


def header(dim: int = 64, **extra: Any) -> dict[str, Any]:
    return {"format": "evolve.memory", "version": 1, "embedder": f"hash-{dim}", "dim": dim, **extra}


def record(id: str, namespace: str = "alpha", **fields: Any) -> dict[str, Any]:
    vec = HashEmbedder(dim=64).embed([f"intent {id}"])[0]
    base = {"id": id, "namespace": namespace, "intent": f"intent {id}", "experience": f"experience {id}",
            "q": 0.25, "visits": 2, "success": True, "created_at": 1700000000.125, "updated_at": 1700000001.5,
            "meta": {"k": [1, 2.5]}, "embedding": base64.b64encode(vec.astype("<f4").tobytes()).decode()}  # fmt: skip
    return {**base, **fields}


def write(path: Path, *lines: Any) -> Path:
    """Lines given as dicts are JSON-encoded; strings and bytes are written as they are."""
    raw = [line if isinstance(line, bytes) else (line if isinstance(line, str) else json.dumps(line)).encode()
           for line in lines]  # fmt: skip
    path.write_bytes(b"\n".join(raw) + b"\n")
    return path


def fill_hostile(store: MemoryStore) -> None:
    for i, text in enumerate(HOSTILE):
        ns = text[:200]
        store.add(text, text[::-1], namespace=ns, id=f"{i}:{text[:40]}", success=[True, False, None][i % 3],
                  meta={text: text, "nested": {text[:30]: [text[:10], i / 7, {"\u00e9\u2028": None}]}})  # fmt: skip
        if i % 2:
            store.reinforce(store.retrieve(text, namespace=ns), 1 / 3)


def test_hostile_texts_survive_export_then_import_exactly(open_store: Open, fresh_url: str, tmp_path: Path) -> None:
    source = open_store()
    fill_hostile(source)
    assert source.export(tmp_path / "m.jsonl") == len(HOSTILE)
    raw = (tmp_path / "m.jsonl").read_bytes()
    text = raw.decode("utf-8")
    assert len(text.splitlines()) == len(raw.split(b"\n")) - 1 == len(HOSTILE) + 1  # separators escaped
    target = open_store(url=fresh_url)
    assert target.import_(tmp_path / "m.jsonl") == len(HOSTILE)
    assert stored_rows(target) == stored_rows(source)
    assert any(r[5] > 0 for r in stored_rows(target))  # visits were learned, so the compare covers them
    assert target.import_(tmp_path / "m.jsonl") == 0  # idempotent
    target.export(tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_bytes().split(b"\n")[1:] == raw.split(b"\n")[1:]


def test_raw_separators_written_by_other_tools_are_read_back(open_store: Open, tmp_path: Path) -> None:
    raw = "\x85\u2028\u2029"  # JSON strings may hold these raw (control characters must be escaped)
    lines = [json.dumps(header())]
    for i, c in enumerate(raw):
        rec = record(f"r{i}", intent=f"a{c}b", experience=f"{c}x", meta={f"k{c}": f"v{c}"})
        lines.append(json.dumps(rec, ensure_ascii=False))
    path = tmp_path / "raw.jsonl"
    path.write_bytes(("\ufeff" + "\r\n".join(lines)).encode("utf-8"))  # a BOM and CRLF line ends too
    assert all(c.encode() in path.read_bytes() for c in raw)
    store = open_store()
    assert store.import_(path) == len(raw)
    got = {it.id: it for it in store.items()}
    for i, c in enumerate(raw):
        item = got[f"r{i}"]
        assert (item.intent, item.experience, item.meta[f"k{c}"]) == (f"a{c}b", f"{c}x", f"v{c}")


@pytest.mark.parametrize("q", [1 / 3, 0.1 + 0.2, -0.0, 5e-324, -2.5e-300, 123456.789])
def test_import_keeps_every_number_of_the_file_bit_exact(store: MemoryStore, tmp_path: Path, q: float) -> None:
    rec = record("n1", q=q, visits=2**31 - 1, created_at=math.nextafter(1.7e9, 2e9), updated_at=-1.5e-7,
                 meta={"f": 1 / 3, "i": 10**30, "big": 1.5e300, "neg": -7})  # fmt: skip
    store.import_(write(tmp_path / "n.jsonl", header(), rec))
    (row,) = stored_rows(store)
    assert row[4:9] == ((q + 0.0).hex(), 2**31 - 1, True, rec["created_at"].hex(), (-1.5e-7).hex())  # -0.0 reads as 0.0
    assert json.loads(row[9]) == {**rec["meta"], "writer": "import:n.jsonl"}  # a record without a writer gets one
    assert row[10] == base64.b64decode(rec["embedding"])


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(texts=st.lists(TEXTS, min_size=4, max_size=4))
def test_any_text_add_accepts_survives_export_then_import(texts: list[str], tmp_path_factory: Any) -> None:
    folder = tmp_path_factory.mktemp("prop")
    with MemoryStore("sqlite://", embedder=HashEmbedder(dim=64)) as source:
        intent, experience, ns, key = texts
        try:
            source.add(intent, experience, namespace=ns[:200], id=key[:64], meta={key: [intent, {ns: experience}]})
        except ConfigError:
            reject()  # a text add() refuses (blank, NUL) is not one an export has to carry
        source.export(folder / "p.jsonl")
        with MemoryStore("sqlite://", embedder=HashEmbedder(dim=64)) as target:
            assert target.import_(folder / "p.jsonl") == 1
            assert stored_rows(target) == stored_rows(source)


@pytest.mark.postgres
@settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(texts=st.lists(TEXTS, min_size=3, max_size=3))
def test_any_text_add_accepts_survives_an_import_into_postgres(
    texts: list[str], pg_url: str, tmp_path_factory: Any
) -> None:
    folder = tmp_path_factory.mktemp("prop")
    with MemoryStore("sqlite://", embedder=HashEmbedder(dim=64)) as source:
        intent, experience, key = texts
        try:
            item = source.add(intent, experience, namespace=key[:200], meta={key: intent})
        except ConfigError:
            reject()
        source.export(folder / "p.jsonl")
        with MemoryStore(pg_url, embedder=HashEmbedder(dim=64)) as target:
            assert target.import_(folder / "p.jsonl") == 1
            assert [r for r in stored_rows(target) if r[0] == item.id] == stored_rows(source)


# -- a bad file changes nothing -----------------------------------------------------------------
MISSING = object()
NAN_VEC = base64.b64encode(np.full(64, np.nan, dtype="<f4").tobytes()).decode()
SHORT_VEC = base64.b64encode(np.ones(3, dtype="<f4").tobytes()).decode()
BAD_FIELDS = [
    ("id", ""), ("id", "x" * 65), ("id", 5), ("id", MISSING), ("id", "a\x00b"),
    ("namespace", 5), ("namespace", ""), ("namespace", "n" * 201), ("namespace", "a\x00"), ("namespace", None),
    ("intent", "   "), ("intent", 7), ("intent", MISSING), ("intent", "\ud800"), ("intent", ["a"]),
    ("experience", None), ("experience", "x" * 1_000_001),
    ("q", "0.5"), ("q", math.nan), ("q", math.inf), ("q", 10**400), ("q", True), ("q", None), ("q", MISSING),
    ("visits", -5), ("visits", 2.7), ("visits", True), ("visits", "3"), ("visits", 2**31), ("visits", 10**30),
    ("success", "no"), ("success", 1), ("success", 0), ("success", "true"),
    ("created_at", "x"), ("created_at", math.nan), ("created_at", math.inf), ("created_at", -math.inf),
    ("created_at", True), ("created_at", 10**400), ("created_at", None), ("created_at", MISSING),
    ("updated_at", math.nan), ("updated_at", "soon"),
    ("meta", [1]), ("meta", "x"), ("meta", 5), ("meta", True), ("meta", {"a": math.nan}), ("meta", {"k": "\x00"}),
    ("embedding", "not base64!"), ("embedding", SHORT_VEC), ("embedding", 5), ("embedding", NAN_VEC),
    ("embedding", ""),
]  # fmt: skip


@pytest.fixture
def seeded(store: MemoryStore) -> MemoryStore:
    store.add("stored already", "in gamma", namespace="gamma", id="taken")
    store.add("another memory", "in alpha", namespace="alpha")
    store.reinforce(store.retrieve("another memory", namespace="alpha"), 1.0)
    return store


def refused(store: MemoryStore, path: Path, *patterns: str) -> str:
    """Import ``path``; assert a ConfigError whose message matches every pattern and an unchanged store."""
    before = checksum(store)
    with pytest.raises(ConfigError) as info:
        store.import_(path)
    message = str(info.value)
    for pattern in patterns:
        assert pattern in message, (pattern, message)
    assert checksum(store) == before
    return message


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS, ids=[f"{f}={v!r:.12}" for f, v in BAD_FIELDS])
def test_a_bad_field_in_a_later_namespace_is_refused_and_nothing_is_written(
    seeded: MemoryStore, tmp_path: Path, field: str, value: Any
) -> None:
    bad = record("b1", "beta")
    if value is MISSING:
        del bad[field]
    else:
        bad[field] = value
    path = write(tmp_path / "bad.jsonl", header(), record("g1"), record("g2", "beta"), bad, record("g3"))
    message = refused(seeded, path, "bad.jsonl:4", field)
    assert any(w in message for w in ("got", "missing", "NaN")), message


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        (b"not json {", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"id": "a", "id": "b"}', "'id' twice"),
        (b'{"id": "caf\xe9"}', "not UTF-8"),
    ],
)
def test_a_line_that_is_no_record_is_refused(seeded: MemoryStore, tmp_path: Path, line: bytes, pattern: str) -> None:
    path = write(tmp_path / "bad.jsonl", header(), record("g1"), record("g2", "beta"), line)
    refused(seeded, path, "bad.jsonl:4", pattern)


def test_the_same_id_twice_in_a_file_names_both_lines(seeded: MemoryStore, tmp_path: Path) -> None:
    path = write(tmp_path / "dup.jsonl", header(), record("g1"), record("g2", "beta"), record("g1", "beta"))
    refused(seeded, path, "dup.jsonl:4", "'g1'", "line 2")


def test_an_id_stored_in_another_namespace_is_refused(seeded: MemoryStore, tmp_path: Path) -> None:
    path = write(tmp_path / "cross.jsonl", header(), record("g1"), record("taken", "beta"))
    refused(seeded, path, "cross.jsonl:3", "'taken'", "'gamma'", "'beta'")


def test_ids_stored_in_the_same_namespace_are_skipped(seeded: MemoryStore, tmp_path: Path) -> None:
    before = {r[0]: r for r in stored_rows(seeded)}
    path = write(tmp_path / "again.jsonl", header(), record("taken", "gamma", intent="changed"), record("g1"))
    assert seeded.import_(path) == 1
    after = {r[0]: r for r in stored_rows(seeded)}
    assert after["taken"] == before["taken"] and set(after) == set(before) | {"g1"}


@pytest.mark.parametrize(
    ("raw", "pattern"),
    [
        (b"", "is empty"),
        (b"\n  \n\n", "is empty"),
        (b'{"format": "other", "version": 1}\n', "not an evolve.memory v1 header"),
        (b'{"format": "evolve.memory", "version": 2}\n', "not an evolve.memory v1 header"),
        (b'{"format": "evolve.memory", "version": true}\n', "not an evolve.memory v1 header"),
        (b'[{"format": "evolve.memory", "version": 1}]\n', "JSON object"),
        (b'{"format": "evolve.memory", "version": 1, "dim": "64"}\n', "dim"),
        (b"\xff\xfe{}\n", "not UTF-8"),
    ],
)
def test_a_file_without_a_v1_header_is_refused(seeded: MemoryStore, tmp_path: Path, raw: bytes, pattern: str) -> None:
    path = tmp_path / "h.jsonl"
    path.write_bytes(raw if pattern == "is empty" else raw + json.dumps(record("g1")).encode() + b"\n")
    refused(seeded, path, "h.jsonl", pattern)


def test_an_embedding_without_a_dimension_in_the_header_is_refused(seeded: MemoryStore, tmp_path: Path) -> None:
    path = write(tmp_path / "nodim.jsonl", {"format": "evolve.memory", "version": 1}, record("g1"))
    refused(seeded, path, "nodim.jsonl:2", "embedding", "dim")


def test_importing_a_folder_or_a_missing_file_is_a_config_error(seeded: MemoryStore, tmp_path: Path) -> None:
    refused(seeded, tmp_path, str(tmp_path), "is a directory")
    refused(seeded, tmp_path / "nope.jsonl", "nope.jsonl", "does not exist")
    refused(seeded, None, "import: path must be a str or Path", "got NoneType")  # type: ignore[arg-type]


@pytest.mark.parametrize("read_twice", [False, True], ids=["small file", "large file"])
def test_an_import_that_stopped_half_way_resumes(
    open_store: Open, fresh_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_twice: bool
) -> None:
    source = open_store()
    fill_hostile(source)
    source.export(tmp_path / "m.jsonl")
    target = open_store(url=fresh_url)
    monkeypatch.setattr(portable, "IMPORT_BATCH", 2)
    monkeypatch.setattr(portable, "KEEP_BYTES", 0 if read_twice else portable.KEEP_BYTES)
    real, calls = adding.insert, itertools.count()  # the write path every import batch goes through

    def crash_on_third(*args: Any, **kwargs: Any) -> Any:
        if next(calls) == 2:
            raise KeyboardInterrupt  # the process dies here
        return real(*args, **kwargs)

    monkeypatch.setattr(adding, "insert", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        target.import_(tmp_path / "m.jsonl")
    done = len(stored_rows(target))
    assert 0 < done < len(HOSTILE)
    monkeypatch.setattr(adding, "insert", real)
    assert target.import_(tmp_path / "m.jsonl") == len(HOSTILE) - done
    assert stored_rows(target) == stored_rows(source)


def test_a_large_file_changed_after_its_check_is_refused(
    seeded: MemoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "big.jsonl", header(), record("g1"), record("g2", "beta"))
    monkeypatch.setattr(portable, "KEEP_BYTES", 0)  # too big to keep: read again to write
    real = portable.already_stored

    def then_append(conn: Any, checked: portable.Checked) -> set[str]:
        with path.open("ab") as f:
            f.write(json.dumps(record("b1", "beta", q="bad")).encode() + b"\n")
        return real(conn, checked)

    monkeypatch.setattr(portable, "already_stored", then_append)
    refused(seeded, path, "big.jsonl changed since it was checked")


# -- an export never leaves a temporary file ----------------------------------------------------
def leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


def test_exporting_to_a_folder_or_under_a_file_fails_cleanly(store: MemoryStore, tmp_path: Path) -> None:
    store.add("a memory", "to export")
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("keep me")
    with pytest.raises(ConfigError, match="is a directory"):
        store.export(tmp_path / "folder")
    with pytest.raises(ConfigError, match="is not a directory"):
        store.export(tmp_path / "file" / "m.jsonl")
    with pytest.raises(ConfigError, match="namespace"):
        store.export(tmp_path / "m.jsonl", namespace="")
    with pytest.raises(ConfigError, match="export: path must be a str or Path naming a file, got int"):
        store.export(5)  # type: ignore[arg-type]
    assert leftovers(tmp_path) == [] and not (tmp_path / "m.jsonl").exists()
    assert list((tmp_path / "folder").iterdir()) == [] and (tmp_path / "file").read_text() == "keep me"


@pytest.mark.parametrize("failure", ["disk full", "crash"])
def test_a_failure_mid_export_removes_the_temp_and_keeps_the_old_file(
    store: MemoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    for i in range(3):
        store.add(f"memory {i}", "text")
    path = tmp_path / "m.jsonl"
    store.export(path)
    old = path.read_bytes()
    store.add("memory 3", "text")
    if failure == "disk full":
        monkeypatch.setattr(portable.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left")))
        expected: type[BaseException] = StoreError
    else:
        real, calls = portable._line, itertools.count()
        monkeypatch.setattr(portable, "_line", lambda row: real(row) if next(calls) < 2 else 1 / 0)
        expected = ZeroDivisionError
    with pytest.raises(expected):
        store.export(path)
    assert path.read_bytes() == old and leftovers(tmp_path) == []
    if failure == "disk full":
        assert issubclass(StoreError, EvolveError)
