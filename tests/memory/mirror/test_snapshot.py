"""Reopening from the saved mirror (``memory.mirror.snapshot``): a store maps each namespace's snapshot
instead of reading its rows from SQL, catches it up by what other processes wrote since, and reads the
namespace from SQL whenever the file cannot be trusted; a crash while the file is written costs nothing.

Every test starts from a copy of one seeded store of 3,000 memories in two namespaces (SQLite, the FAISS
flat index and the snapshots beside it), written and reinforced once for the module.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from connectors import HashEmbedder
from memory import MemoryConfig, MemoryStore, Reinforcement, RetrievalConfig, WriteEntry
from memory.mirror.files import meta_path
from memory.mirror.snapshot import load, mirror_file
from memory.mirror.sync import index_file

TEAM = "Zürich-Nordhafen-Logistik-Team-07 · Halle Süd / Rolltore"
OTHER = "Göteborg-Hamnen-Lagerlogistik-Team-12 · 物流中心"
WORDS = (
    "rolltor halle süd code depot lager kran palette zoll fracht schicht tor schlüssel alarm rampe "
    "container hafen kai liste frist lieferung prüfung etikett waage gabelstapler notaus"
).split()
GATE = "Welcher Code öffnet das Rolltor am Zürich-Nordhafen-Depot, Halle Süd?"
CONFIG = MemoryConfig(supersede=True, retrieval=RetrievalConfig(k1=12, k2=4))
NEAREST = RetrievalConfig(k1=1, k2=1, delta=-1.0, lam=0.0)  # the most similar memory, whatever its Q
ROOT = Path(__file__).resolve().parents[3]


def texts(rng: np.random.Generator, n: int, tag: str) -> list[str]:
    return [f"{' '.join(rng.choice(WORDS, 5))} {tag}-{i}" for i in range(n)]


def gate(answer: str) -> WriteEntry:
    return WriteEntry(GATE, trajectory=f"Answer given: {answer}", feedback="Correct.", success=True, namespace=TEAM,
                      task="rolltor-zürich-nordhafen-halle-süd")  # fmt: skip


def open_at(folder: Path, **kw: object) -> MemoryStore:
    return MemoryStore(f"sqlite:///{folder / 'memory.db'}", embedder=HashEmbedder(64), config=CONFIG, seed=11, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed store: 2,000 memories of TEAM (one of them a fact about the gate), 1,000 of OTHER, some
    of them recalled and rewarded; its indexes and snapshots saved beside it."""
    folder = tmp_path_factory.mktemp("snapshot-base")
    rng = np.random.default_rng(2025)
    with open_at(folder) as store:
        store.add_many([(t, f"Erfahrung {t}") for t in texts(rng, 1999, "t")], namespace=TEAM)
        store.write_many([gate("The code is 4471")])
        store.add_many([(t, f"Erfahrung {t}") for t in texts(rng, 1000, "o")], namespace=OTHER)
        for ns in (TEAM, OTHER):
            recalls = store.retrieve_many(texts(rng, 40, "q"), namespace=ns)
            store.reinforce_many([Reinforcement(r, float(rng.random()), None, ns) for r in recalls])
    return folder


@pytest.fixture
def folder(base: Path, tmp_path: Path) -> Path:
    shutil.copytree(base, tmp_path / "store")
    return tmp_path / "store"


def snapshot_of(folder: Path, ns: str) -> Path:
    return mirror_file(index_file(folder / "memory.db.faiss", ns))


def held(store: MemoryStore, ns: str) -> dict[str, np.ndarray]:
    """What the store's mirror of ``ns`` holds, row by row (its key table's order is its own business)."""
    store.mirror_status(ns)  # loads it
    m = store._mirrors.loaded(ns)  # noqa: SLF001 - the mirror is what is checked
    assert m is not None
    return {
        "seqs": m.seqs.copy(), "ids": np.array([str(i) for i in m.ids]), "q": m.q.copy(), "visits": m.visits.copy(),
        "created": m.created.copy(), "kinds": m.kinds.copy(), "vectors": m.vectors().copy(),
        "index": np.sort(m.index.ids()),  # type: ignore[attr-defined]
    }  # fmt: skip


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    for name, values in want.items():
        assert np.array_equal(got[name], values), name


def from_sql(folder: Path, ns: str, scratch: Path) -> dict[str, np.ndarray]:
    """The mirror a store reads from SQL alone (its index folder is empty)."""
    with open_at(folder, index_path=scratch) as store:
        assert store.mirror_status(ns) == "built"
        return held(store, ns)


def recalls(store: MemoryStore, ns: str, queries: list[str]) -> list[tuple[tuple[str, ...], tuple[float, ...]]]:
    return [(r.ids, tuple(r.scores)) for r in store.retrieve_many(queries, namespace=ns, record=False)]


# -- reopening ---------------------------------------------------------------------------------------
def test_reopen_maps_the_snapshots_and_recalls_exactly_what_sql_would(folder: Path, tmp_path: Path) -> None:
    queries = texts(np.random.default_rng(5), 60, "frage")
    with open_at(folder) as store:
        assert [store.mirror_status(ns) for ns in (TEAM, OTHER)] == ["loaded", "loaded"]
        assert [store.index_status(ns) for ns in (TEAM, OTHER)] == ["loaded", "loaded"]
        mapped = {ns: (held(store, ns), recalls(store, ns, queries)) for ns in (TEAM, OTHER)}
    with open_at(folder, index_path=tmp_path / "none") as store:
        for ns in (TEAM, OTHER):
            assert store.mirror_status(ns) == "built"
            assert_same(mapped[ns][0], held(store, ns))
            assert recalls(store, ns, queries) == mapped[ns][1]
    assert len(mapped[TEAM][0]["seqs"]) == 2000 and len(mapped[OTHER][0]["seqs"]) == 1000


def test_a_reopened_store_reads_saved_key_vectors_from_the_file_and_new_ones_from_memory(folder: Path) -> None:
    """A recall reads its candidates' vectors with ``pread`` (``memory.mirror.keyrows``), not through the
    map, whose pages would stay resident: the rows read are the snapshot's, and keys written since the
    reopen are read from memory."""
    with open_at(folder) as store:
        store.add_many([("ganz neue kran frist nachtschicht", "neu")], namespace=TEAM, group=False)
        m = store._mirrors.loaded(TEAM)  # noqa: SLF001 - the mirror is what is checked
        assert m is not None and m._saved_keys is not None  # noqa: SLF001
        saved = m._saved_keys.count  # noqa: SLF001
        assert 0 < saved < len(m.keys)
        codes = np.array([saved - 1, len(m.keys) - 1, 0, saved // 2])
        assert np.array_equal(m.key_rows(codes), np.asarray(m.keys)[codes])
        assert np.array_equal(m.key_rows(codes[[0, 2]]), np.asarray(m.keys)[codes[[0, 2]]])


WRITER = """
import json, sys
import numpy as np
from connectors import HashEmbedder
from memory import MemoryConfig, MemoryStore, Reinforcement, RetrievalConfig, WriteEntry
from tests.memory.mirror.test_snapshot import CONFIG, GATE, TEAM, gate
url, elsewhere = sys.argv[1:3]
with MemoryStore(url, embedder=HashEmbedder(64), config=CONFIG, index_path=elsewhere) as store:
    new = [m.id for m in store.add_many([(f"neue palette zoll fracht {i}", "gewogen") for i in range(5)], namespace=TEAM)]
    (fact,) = store.write_many([gate("The code is 9902")])
    items = store.items(TEAM)
    gone = [i.id for i in items[10:13]]
    store.remove(gone, namespace=TEAM)
    recalls = store.retrieve_many(["kran palette zoll", "tor schlüssel alarm"], namespace=TEAM)
    store.reinforce_many([Reinforcement(r, 1.0, None, TEAM) for r in recalls])
    rewarded = sorted({i for r in recalls for i in r.ids})
print(json.dumps({"new": [*new, fact.id], "gone": gone, "rewarded": rewarded}))
"""


def test_what_another_process_wrote_since_the_snapshot_is_caught_up_exactly(folder: Path, tmp_path: Path) -> None:
    with open_at(folder) as store:
        (old_fact,) = [i for i in store.items(TEAM) if i.intent == GATE]
        before = {i.id: (i.q, i.visits) for i in store.items(TEAM)}
    url = f"sqlite:///{folder / 'memory.db'}"
    done = subprocess.run(
        [sys.executable, "-c", WRITER, url, str(tmp_path / "elsewhere")], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    did = json.loads(done.stdout)
    with open_at(folder) as store:
        assert (store.mirror_status(TEAM), store.mirror_status(OTHER)) == ("caught_up", "loaded")
        assert store.index_status(TEAM) == "caught_up"
        mirror = held(store, TEAM)
        items = {i.id: i for i in store.items(TEAM, include_superseded=False)}
        got = store.retrieve(GATE, namespace=TEAM, config=NEAREST, record=False)
    ids = set(mirror["ids"].tolist())
    assert set(did["new"]) <= ids and not ids & set(did["gone"]) and old_fact.id not in ids
    assert ids == set(items) and len(ids) == 2000 + 6 - 3 - 1
    changed = {i for i in did["rewarded"] if i in before and (items[i].q, items[i].visits) != before[i]}
    assert changed and all(items[i].visits > before[i][1] for i in changed)
    assert_same(mirror, from_sql(folder, TEAM, tmp_path / "none"))
    assert got.ids[0] == did["new"][-1]  # the new fact, not the superseded one


def test_changes_after_a_reopen_land_in_private_copies_never_in_the_mapped_files(folder: Path) -> None:
    """The snapshot and the flat index are mapped from their files; a reward, an add and a removal change
    this process's copy, and the files only change when ``close`` replaces them."""
    files = [snapshot_of(folder, TEAM), index_file(folder / "memory.db.faiss", TEAM)]
    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in files]
    with open_at(folder) as store:
        assert store.index_status(TEAM) == "loaded"
        recall = store.retrieve("kran palette zoll fracht", namespace=TEAM)
        store.reinforce(recall, 1.0)
        new = store.add("neues etikett für die waage", "gedruckt", namespace=TEAM)
        store.remove([store.items(TEAM)[5].id], namespace=TEAM)
        mirror = held(store, TEAM)
        assert [hashlib.sha256(p.read_bytes()).hexdigest() for p in files] == digests
        saved = load(files[0], namespace=TEAM, dim=64)
        assert saved is not None
        row = int(np.flatnonzero(mirror["ids"] == recall.ids[0])[0])
        at = int(np.flatnonzero(saved.columns["seqs"][: saved.rows] == mirror["seqs"][row])[0])
        assert saved.columns["q"][at] != mirror["q"][row]  # rewarded here, not in the file
        assert store.retrieve(new.intent, namespace=TEAM, config=NEAREST, record=False).ids == (new.id,)
    with open_at(folder) as again:
        assert (again.mirror_status(TEAM), again.index_status(TEAM)) == ("loaded", "loaded")
        assert_same(held(again, TEAM), mirror)


def test_an_unchanged_namespace_keeps_its_file_and_only_its_sidecar_moves_on(folder: Path) -> None:
    other = snapshot_of(folder, OTHER)
    inode, digest = other.stat().st_ino, hashlib.sha256(other.read_bytes()).hexdigest()
    with open_at(folder) as store:
        store.add("kran palette zoll fracht neu", "gewogen", namespace=TEAM)
        held(store, OTHER)
        generation = store._mirrors.generation  # noqa: SLF001
    assert (other.stat().st_ino, hashlib.sha256(other.read_bytes()).hexdigest()) == (inode, digest)
    assert json.loads(meta_path(other).read_text())["generation"] == generation
    with open_at(folder) as store:
        assert (store.mirror_status(TEAM), store.mirror_status(OTHER)) == ("loaded", "loaded")


# -- files that cannot be trusted ----------------------------------------------------------------------
def _damage(folder: Path, how: str, tmp_path: Path) -> None:
    path = snapshot_of(folder, TEAM)
    data = bytearray(path.read_bytes())
    meta = json.loads(data[16 : 16 + int.from_bytes(data[8:16], "little")])
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(np.random.default_rng(1).bytes(len(data)))
    elif how == "q overwritten":
        at = meta["columns"]["q"]["offset"] + 8 * 100
        data[at : at + 8] = np.float64(0.123).tobytes()
        path.write_bytes(bytes(data))
    elif how == "ahead of the database":
        meta_path(path).write_text(json.dumps({"token": meta["token"], "generation": 10**6}))
    elif how in ("another dimension", "another database"):
        rng, other = np.random.default_rng(3), tmp_path / "other"
        other.mkdir()
        dim = 32 if how == "another dimension" else 64
        with MemoryStore(f"sqlite:///{other / 'memory.db'}", embedder=HashEmbedder(dim)) as foreign:
            foreign.add_many([(t, "anders") for t in texts(rng, 50, "x")], namespace=TEAM)
        shutil.copy(snapshot_of(other, TEAM), path)
        meta_path(path).unlink(missing_ok=True)


@pytest.mark.parametrize(
    "how",
    ["truncated", "garbage", "q overwritten", "ahead of the database", "another dimension", "another database"],
)
def test_a_snapshot_that_cannot_be_trusted_is_read_from_sql_and_recalls_do_not_change(
    folder: Path, tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    queries = texts(np.random.default_rng(8), 30, "frage")
    with open_at(folder) as store:
        expected = held(store, TEAM), recalls(store, TEAM, queries)
    _damage(folder, how, tmp_path)
    with open_at(folder) as store:
        assert store.mirror_status(TEAM) == "rebuilt"
        assert store.mirror_status(OTHER) == "loaded"  # its own file is untouched
        assert_same(held(store, TEAM), expected[0])
        assert recalls(store, TEAM, queries) == expected[1]
    assert "memory mirror" in caplog.text
    with open_at(folder) as store:  # the rebuilt mirror was saved again
        assert store.mirror_status(TEAM) == "loaded"


def test_a_database_put_back_from_a_copy_and_written_since_does_not_take_a_newer_snapshot(
    folder: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The snapshot's generation is behind the database's again, but it describes another history."""
    rng = np.random.default_rng(4)
    shutil.copy(folder / "memory.db", tmp_path / "copy.db")
    with open_at(folder) as store:
        store.add_many([(t, "vorher") for t in texts(rng, 30, "a")], namespace=TEAM)
        generation = store._mirrors.generation  # noqa: SLF001
    shutil.copy(tmp_path / "copy.db", folder / "memory.db")
    with open_at(folder, index_path=tmp_path / "elsewhere") as store:
        for part in range(3):
            store.add_many([(t, "nachher") for t in texts(rng, 10, f"b{part}")], namespace=TEAM)
        assert store._mirrors.generation > generation  # noqa: SLF001
    with open_at(folder) as store:
        assert store.mirror_status(TEAM) == "rebuilt"
        mirror = held(store, TEAM)
    assert "is not this database's" in caplog.text  # told by its newest memory, before any catching up
    assert_same(mirror, from_sql(folder, TEAM, tmp_path / "none"))
    assert len(mirror["ids"]) == 2030


# -- a kill while the file is written ----------------------------------------------------------------------
KILLED = """
import os, sys, time
from pathlib import Path
import memory.mirror.snapshot as snap
from tests.memory.mirror.test_snapshot import OTHER, TEAM, open_at
folder, marker, where = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
write, replace = snap._write, snap._replace

def stuck() -> None:
    marker.write_text("saving")
    time.sleep(120)

def half_written(f, header, columns, size):
    f.write(header)
    f.write(b"half a mirror" * 1000)
    f.flush()
    stuck()

def half_stamped(path, write):
    path.with_name(f"{path.name}.{os.getpid()}.tmp").write_text('{"tok')
    stuck()

snap._write, snap._replace = (half_written, replace) if where == "data" else (write, half_stamped)
store = open_at(folder)
store.retrieve("kran palette", namespace=OTHER, record=False)  # OTHER is loaded, and stays unchanged
store.add_many([(f"gekillt palette {i}", "gewogen") for i in range(4)], namespace=TEAM)
recall = store.retrieve("kran palette zoll", namespace=TEAM)
store.reinforce(recall, 1.0)
store.save_index() if where == "data" else store.close()  # TEAM's file, or on close OTHER's sidecar first
"""


@pytest.mark.parametrize("where", ["data", "sidecar"])
def test_sigkill_while_a_snapshot_is_written_leaves_a_store_that_opens_correctly(
    folder: Path, tmp_path: Path, where: str
) -> None:
    marker = tmp_path / "saving"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(folder), str(marker), where], cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the writer never reached the snapshot save"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    litter = list((folder / "memory.db.faiss").glob("*.mirror*.tmp"))
    assert len(litter) == 1  # the kill left its temporary file behind
    with open_at(folder) as store:
        assert (store.mirror_status(TEAM), store.mirror_status(OTHER)) == ("caught_up", "loaded")
        mirror = held(store, TEAM)
        found = store.retrieve("gekillt palette 2", namespace=TEAM, config=NEAREST, record=False)
    assert_same(mirror, from_sql(folder, TEAM, tmp_path / "none"))
    assert len(mirror["ids"]) == 2004 and found.items[0].intent == "gekillt palette 2"
    with open_at(folder) as store:
        for ns in (TEAM, OTHER):
            store.add("nach dem kill", "gewogen", namespace=ns)  # their saves sweep the litter
    assert not any(p.exists() for p in litter)
