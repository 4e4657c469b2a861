"""Bad input and hostile SQL: the memory-API harness the property tests and the reliability figures share.

Every memory-API call the strategies draw either succeeds with a consistent result or raises an
``EvolveError`` whose message names the offending argument, and a rejected call leaves the store
exactly as it was (items, Q, visits, texts, feedback rows; the recall log too unless the call was a
recall). ``tests/memory/test_memory_properties.py`` runs these properties with a CI-sized example
count; ``bench/reliability_input.py`` runs them with more examples and counts outcomes. ``Tally``,
``snapshot`` and the hostile strings are shared with the spec-file and server-body properties
(``tests/reliability/spec_and_server.py``).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, inspect, select

from connectors.embedders import HashEmbedder
from connectors.errors import EvolveError
from memory.config import RetrievalConfig
from memory.storage.records import Recall
from memory.storage.schema import feedback, recalls
from memory.store import MemoryStore
from memory.write.checks import MAX_TEXT
from memory.write.writer import WriteEntry

HOSTILE = [
    "'", '"', "''", "'; DROP TABLE memory_items; --", "Robert'); DROP TABLE memory_feedback;--",
    "\\", "\\'", "%s", "%(name)s", "%%", ":name", ":1", "$1", "?", "` OR 1=1 --", "/* */", "x' OR '1'='1",
    "\u202e\u0301é漢字🙂", "a\t\r\nb", "a" * 5000, "\x00",
]  # fmt: skip
"""SQL metacharacters, placeholders of every driver style, odd Unicode, a long text and a NUL."""

SURROGATES = ["\ud800", "a\udfffb"]


def huge_text() -> str:
    """One character over the size limit (built on demand: a strategy holding it would repr megabytes)."""
    return "x" * (MAX_TEXT + 1)


WRONG = st.one_of(
    st.none(), st.integers(), st.floats(), st.binary(max_size=4), st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1), st.booleans(),
)  # fmt: skip
TEXTS = st.one_of(
    st.text(max_size=24), st.text(max_size=24).map(lambda s: s + "\x00"), st.sampled_from(SURROGATES),
    st.sampled_from(HOSTILE), st.sampled_from(["", "   "]), st.builds(huge_text),
)  # fmt: skip
VALID = st.one_of(st.text(min_size=1, max_size=24).filter(str.strip), st.sampled_from(HOSTILE[:-1]))
VALUES = st.one_of(VALID, VALID, VALID, TEXTS, WRONG)
REWARDS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.integers(-5, 5),
    st.sampled_from([10**400, "1.0", None, math.nan, -math.inf, [1.0]]),
)  # fmt: skip
NAMESPACES = st.one_of(st.just("default"), st.just("other"), VALUES, st.just("n" * 201))
META = st.one_of(
    st.none(), st.dictionaries(st.text(max_size=4), st.one_of(TEXTS, st.floats(), st.integers()), max_size=2), WRONG
)
IMPORTS = st.one_of(
    st.binary(max_size=40), st.sampled_from([b"", b"\xff\xfe{}", b"{}\n", b"[1]\n", b'{"format": "x"}\n']),
    st.builds(lambda line: b'{"format": "evolve.memory", "version": 1, "dim": 16}\n' + line, st.sampled_from([
        b"{}", b"[]", b'{"id": "i", "intent": "a", "experience": "b", "q": "NaN", "created_at": 0}',
        b'{"id": "i\\u0000", "intent": "a", "experience": "b", "q": 0, "created_at": 0}',
        b'{"id": "i", "intent": "a", "experience": "b", "q": 0, "created_at": "x"}',
        b'{"id": "ok-import", "intent": "a", "experience": "b", "q": 0.5, "created_at": 1.0, "meta": [1]}',
    ])),
)  # fmt: skip


@dataclass
class Tally:
    """Outcomes of the generated calls; a healthy store counts only ``ok`` and ``refused``."""

    ok: int = 0
    refused: int = 0
    foreign: list[str] = field(default_factory=list)  # errors that were not EvolveError
    unnamed: list[str] = field(default_factory=list)  # EvolveErrors whose message names no argument
    changed: list[str] = field(default_factory=list)  # rejected calls that changed the store

    @property
    def calls(self) -> int:
        return self.ok + self.refused + len(self.foreign)

    def problems(self) -> list[str]:
        return self.foreign + self.unnamed + self.changed


def snapshot(store: MemoryStore, *, recall_count: bool = True) -> dict[str, Any]:
    """Everything a rejected call must leave alone: items with Q, visits and texts, feedback rows, recalls."""
    items = sorted((i.id, i.namespace, i.intent, i.experience, i.q, i.visits, json.dumps(i.meta, sort_keys=True))
                   for i in store.items())  # fmt: skip
    with store.engine.connect() as conn:
        fb = sorted(tuple(r) for r in conn.execute(select(feedback.c.id, feedback.c.recall_id, feedback.c.reward)))
        n_recalls = conn.execute(select(func.count()).select_from(recalls)).scalar_one() if recall_count else None
    return {"items": items, "feedback": fb, "recalls": n_recalls}


@dataclass
class Pool:
    """Recalls and ids seen so far, so generated calls also hit real recall and memory ids."""

    recalls: list[Recall] = field(default_factory=list)
    ids: list[str] = field(default_factory=lambda: ["unknown-id", "0" * 32])


@dataclass(frozen=True)
class Ref:
    """A pool entry picked by position when the call is made: what Hypothesis draws never depends on
    what earlier calls added to the pool (a strategy that did would replay inconsistently)."""

    kind: str  # "recall", "recall_id" or "id"
    index: int


def resolve(value: Any, pool: Pool) -> Any:
    """``value`` with every ``Ref`` inside replaced by the pool entry it names."""
    if isinstance(value, Ref):
        entries: list[Any] = pool.ids if value.kind == "id" else pool.recalls
        chosen = entries[value.index % len(entries)]
        return chosen.id if value.kind == "recall_id" else chosen
    if isinstance(value, dict):
        return {k: resolve(v, pool) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(resolve(v, pool) for v in value)
    return value


def ref(kind: str) -> st.SearchStrategy[Ref]:
    return st.builds(Ref, st.just(kind), st.integers(0, 63))


def recall_ref() -> st.SearchStrategy[Any]:
    return st.one_of(ref("recall"), ref("recall_id"), VALUES)


def ops(folder: Path) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """A (method, kwargs) call on the public API, with valid and invalid values mixed (``Ref`` placeholders
    stand for recalls and ids made earlier)."""
    ids = st.one_of(ref("id"), VALUES)
    scope = {"namespace": NAMESPACES}
    cfg = st.builds(RetrievalConfig, k1=st.integers(3, 6), k2=st.integers(1, 3), delta=st.floats(-1, 1),
                    lam=st.floats(0, 1))  # fmt: skip
    fid = st.one_of(st.none(), VALUES)
    entry = st.builds(WriteEntry, VALUES, trajectory=VALUES, feedback=VALUES, success=st.one_of(st.booleans(), WRONG),
                      namespace=NAMESPACES, provenance=META, id=st.one_of(st.none(), VALUES))  # fmt: skip
    calls = {
        "add": st.fixed_dictionaries({"intent": VALUES, "experience": VALUES}, optional={
            "namespace": NAMESPACES, "q": REWARDS, "meta": META, "id": VALUES, "success": st.one_of(st.booleans(), WRONG)}),
        "add_many": st.fixed_dictionaries({"rows": st.one_of(st.lists(st.tuples(VALUES, VALUES), max_size=3), WRONG)},
                                          optional={"namespace": NAMESPACES, "meta": META}),
        "write_many": st.fixed_dictionaries({"entries": st.one_of(st.lists(entry, max_size=2), WRONG)}),
        "retrieve": st.fixed_dictionaries({"query": VALUES}, optional={"namespace": NAMESPACES, "config": st.one_of(cfg, WRONG)}),
        "retrieve_many": st.fixed_dictionaries({"queries": st.one_of(st.lists(VALUES, max_size=3), WRONG)}),
        "reinforce": st.fixed_dictionaries({"recall": recall_ref(), "reward": REWARDS},
                                           optional={"feedback_id": fid, **scope}),
        "reinforce_many": st.fixed_dictionaries({"items": st.one_of(
            st.lists(st.tuples(recall_ref(), REWARDS, fid), max_size=3), WRONG)}, optional=scope),
        "get": st.fixed_dictionaries({"memory_id": ids}, optional=scope),
        "remove": st.fixed_dictionaries({"memory_ids": st.one_of(st.lists(ids, max_size=2), WRONG)}, optional=scope),
        "explain": st.fixed_dictionaries({"recall_id": st.one_of(ref("recall_id"), VALUES)}, optional=scope),
        "items": st.fixed_dictionaries({"namespace": NAMESPACES}),
        "import_": st.fixed_dictionaries({"path": IMPORTS.map(lambda raw: write_file(folder, raw))}),
    }  # fmt: skip
    return st.one_of(*(st.tuples(st.just(name), kwargs) for name, kwargs in calls.items()))


def write_file(folder: Path, raw: bytes) -> str:
    path = folder / f"import-{time.monotonic_ns()}.jsonl"
    path.write_bytes(raw)
    return str(path)


def names_argument(message: str, kwargs: dict[str, Any]) -> bool:
    """Whether an error message names one of the call's arguments (``memory_id`` or ``memory id``)."""
    words = set(kwargs) | {k.replace("_", " ") for k in kwargs} | {"import", "feedback", "entries", "rows"}
    words |= {"reward", "intent", "experience", "recall", "id", "query", "namespace", "meta", "success"}
    return any(w in message for w in words)


def check_call(store: MemoryStore, pool: Pool, name: str, kwargs: dict[str, Any], tally: Tally) -> None:
    """Make one call and classify it (``tally``); a successful call's result is checked for consistency."""
    recall = name in ("retrieve", "retrieve_many")
    before = snapshot(store, recall_count=not recall)
    try:
        result = getattr(store, name)(**kwargs)
    except EvolveError as e:
        tally.refused += 1
        if not names_argument(str(e), kwargs):
            tally.unnamed.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")
        if snapshot(store, recall_count=not recall) != before:
            tally.changed.append(f"{name}({short(kwargs)}) raised {type(e).__name__} but changed the store")
        return
    except Exception as e:  # the property under test: nothing else escapes
        tally.foreign.append(f"{name}({short(kwargs)}): {type(e).__name__}: {str(e)[:200]}")
        return
    tally.ok += 1
    consistent(store, pool, name, kwargs, result)


def consistent(store: MemoryStore, pool: Pool, name: str, kwargs: dict[str, Any], result: Any) -> None:
    """A successful call's result agrees with what was asked and what is stored."""
    if name == "add":
        stored = store.get(result.id, namespace=result.namespace)
        assert (stored.intent, stored.experience) == (result.intent, result.experience)
        assert "id" in kwargs or result.intent == kwargs["intent"]
        pool.ids.append(result.id)
    elif name in ("retrieve", "retrieve_many"):
        found = [result] if name == "retrieve" else result
        pool.recalls.extend(found[:2])
        assert all(isinstance(r, Recall) and len(r.items) == len(r.scores) for r in found)
    elif name in ("reinforce", "reinforce_many", "remove"):
        assert isinstance(result, int) and result >= 0
    elif name == "get":
        assert result.id == kwargs["memory_id"]


def short(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r:.60}" for k, v in kwargs.items())


@contextmanager
def seeded_store(url: str) -> Iterator[MemoryStore]:
    """A store with a few memories in two namespaces (so calls have something to change)."""
    with MemoryStore(url, embedder=HashEmbedder(dim=16), seed=0) as store:
        store.add_many([("sort a list", "use sorted"), ("parse a date", "use fromisoformat")])
        store.add("book a flight", "search by date", namespace="other")
        yield store


def memory_property(url: str, max_examples: int, tally: Tally) -> None:
    """Run the memory-API property ``max_examples`` times on one store at ``url``; outcomes go to ``tally``."""
    with tempfile.TemporaryDirectory() as folder, seeded_store(url) as store:
        pool = Pool(recalls=store.retrieve_many(["sort numbers", "a date"]))

        @settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(data=st.data())
        def prop(data: st.DataObject) -> None:
            name, kwargs = data.draw(ops(Path(folder)))
            check_call(store, pool, name, resolve(kwargs, pool), tally)

        prop()


def hostile_roundtrip(store: MemoryStore, text: str) -> str:
    """Store ``text`` in every field the memory API takes, read it back and use it as a key.

    Returns ``"round-tripped"``, or ``"refused"`` for a text no backend may store (NUL). Raises
    ``AssertionError`` when something came back different or a table was harmed.
    """
    tables = sorted(inspect(store.engine).get_table_names())
    namespace, ident, fid = text[:200], text[:64], text[:128]
    try:
        item = store.add(text, text, namespace=namespace, meta={text: text}, id=ident)
    except EvolveError:
        assert "\x00" in text, f"refused a storable text {text!r:.60}"
        return "refused"
    got = store.get(ident, namespace=namespace)
    assert (got.id, got.namespace, got.intent, got.experience, got.meta[text]) == (ident, namespace, text, text, text)
    assert item.id == ident and any(i.id == ident for i in store.items(namespace))
    recall = store.retrieve(text, namespace=namespace, config=RetrievalConfig(delta=-1.0))
    assert [i.id for i in recall.items] == [ident]
    assert store.reinforce(recall.id, 1.0, feedback_id=fid, namespace=namespace) == 1
    assert store.reinforce(recall.id, 1.0, feedback_id=fid, namespace=namespace) == 0  # the same idempotency key
    assert store.explain(recall.id, namespace=namespace)["query"] == text
    assert store.remove([ident], namespace=namespace) == 1
    assert sorted(inspect(store.engine).get_table_names()) == tables
    return "round-tripped"
