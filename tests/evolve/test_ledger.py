"""The shared HEAD ledger: moves recorded with their reasons, rollback, id prefixes, concurrent writers."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import Column, Connection, Engine, Integer, MetaData, String, Table, insert
from sqlalchemy.exc import IntegrityError

from connectors import ConfigError, StoreError, make_engine
from evolve.ledger import Ledger, content_address, head_tables, id_prefix, transaction
from evolve.prompts.versions import prompt_head_moves, prompt_heads, version_id
from evolve.weights.files import content_id
from evolve.weights.registry import adapter_head_moves, adapter_heads

RUN = "évaluation nordique — 北海道の夜勤チーム, lot 2025-T3"
AGENT = "rédacteur «principal» du rapport trimestriel ✓"
KEY = {"run": RUN, "agent": AGENT}

metadata = MetaData()
note_versions = Table(
    "ledgertest_versions",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("run", String(200), nullable=False),
    Column("agent", String(200), nullable=False),
    Column("id", String(64), nullable=False),
)
note_heads, note_moves = head_tables(metadata, "ledgertest", ["run", "agent"], may_be_empty=True)
LEDGER = Ledger(note_versions, note_heads, note_moves, noun="notes", empty="blank")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    url = f"sqlite:///{tmp_path / 'ledger.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    made = make_engine(url)
    metadata.create_all(made)
    return made


def store(engine: Engine, *contents: str, key: dict[str, str] = KEY) -> list[str]:
    """Version rows for ``contents`` under ``key``; their content addresses, in order."""
    ids = [content_address({"text": c}) for c in contents]
    with engine.begin() as conn:
        for vid in ids:
            conn.execute(insert(note_versions).values(**key, id=vid))
    return ids


def moved(engine: Engine, to: str | None, reason: str, key: dict[str, str] = KEY) -> bool:
    def write(conn: Connection) -> bool:
        return LEDGER.move(conn, key, LEDGER.head(conn, key, lock=True), to, reason)

    return transaction(engine, write)


def head(engine: Engine, key: dict[str, str] = KEY) -> str | None:
    with engine.connect() as conn:
        return LEDGER.head(conn, key)


def history(engine: Engine, key: dict[str, str] = KEY, limit: int | None = None) -> list[tuple]:
    with engine.connect() as conn:
        return [(m["from"], m["to"], m["reason"]) for m in LEDGER.history(conn, key, limit)]


def test_every_move_is_recorded_with_its_reason_and_a_move_to_head_is_none(engine: Engine) -> None:
    a, b = store(engine, "Réponds en français, en une phrase.", "Reply in English; show the units.")
    assert head(engine) is None and history(engine) == []
    assert moved(engine, a, "init") and moved(engine, b, "commit: critique «trop long» ✓")
    assert not moved(engine, b, "commit")  # HEAD is there already: no row
    assert head(engine) == b
    assert history(engine) == [(a, b, "commit: critique «trop long» ✓"), (None, a, "init")]
    assert history(engine, limit=1) == [(a, b, "commit: critique «trop long» ✓")]
    with engine.connect() as conn:
        at = [m["at"] for m in LEDGER.history(conn, KEY)]
    assert at[0] >= at[1] > 0


def test_an_empty_head_is_a_move_like_any_other(engine: Engine) -> None:
    (a,) = store(engine, "adapter step 1")
    moved(engine, a, "commit")
    assert moved(engine, None, "reward dropped") and head(engine) is None
    assert moved(engine, a, "redo")
    assert history(engine) == [(None, a, "redo"), (a, None, "reward dropped"), (None, a, "commit")]


def test_rollback_moves_to_what_pick_says_and_a_refusal_moves_nothing(engine: Engine) -> None:
    a, b = store(engine, "first", "second")
    moved(engine, a, "init")
    moved(engine, b, "commit")
    parent = {b: a, a: None}

    def rollback(reason: str) -> str | None:
        def pick(current: str | None) -> str | None:
            if current is None:
                raise StoreError("nothing to undo")
            return parent[current]

        return transaction(engine, lambda conn: LEDGER.rollback(conn, KEY, pick, reason))

    assert rollback("rollback") == a and head(engine) == a
    assert rollback("annulé ✓") is None and head(engine) is None
    with pytest.raises(StoreError, match="nothing to undo"):
        rollback("again")
    assert history(engine)[:2] == [(a, None, "annulé ✓"), (b, a, "rollback")] and len(history(engine)) == 4


def test_keys_do_not_see_each_other_and_a_partial_key_is_refused(engine: Engine) -> None:
    other = {"run": RUN, "agent": "planificateur «secondaire» de l'équipe de nuit"}
    (a,) = store(engine, "shared text")
    moved(engine, a, "commit")
    assert head(engine, other) is None and history(engine, other) == []
    with engine.connect() as conn, pytest.raises(ConfigError, match=r"keyed by \['run', 'agent'\]"):
        LEDGER.head(conn, {"run": RUN})
    with engine.connect() as conn, pytest.raises(ConfigError, match="limit"):
        LEDGER.history(conn, KEY, -1)


def test_an_id_prefix_finds_versions_under_a_whole_or_partial_key(engine: Engine) -> None:
    other = {"run": RUN, "agent": "planificateur «secondaire» de l'équipe de nuit"}
    (a,) = store(engine, "same bytes")
    store(engine, "same bytes", key=other)
    with engine.connect() as conn:
        assert [r.id for r in LEDGER.matches(conn, KEY, a[:5], limit=20)] == [a]
        assert [r.agent for r in LEDGER.matches(conn, {"run": RUN}, a[:5], limit=20)] == [AGENT, other["agent"]]
        assert LEDGER.matches(conn, {"run": "another run entirely, not this one"}, a, limit=20) == []
    assert id_prefix(f"  {a[:6].upper()} ", "a version id") == a[:6]
    assert id_prefix("", "x") is None and id_prefix("not-hex", "x") is None
    with pytest.raises(ConfigError, match="a version id is a str, got int"):
        id_prefix(12, "a version id")


def test_transaction_runs_a_losing_first_write_once_more() -> None:
    engine = make_engine("sqlite://")
    calls: list[int] = []

    def lose_once(conn: Connection) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise IntegrityError("INSERT INTO ledgertest_heads", {}, Exception("duplicate key"))
        return "done"

    assert transaction(engine, lose_once) == "done" and len(calls) == 2

    def always_collide(conn: Connection) -> str:
        calls.append(1)
        raise IntegrityError("INSERT", {}, Exception("a real constraint"))

    with pytest.raises(IntegrityError):
        transaction(engine, always_collide)
    assert len(calls) == 4  # tried twice, then the error reaches the caller


def test_two_threads_moving_one_head_never_lose_a_move(engine: Engine) -> None:
    # Neither thread finds a HEAD at first, so on PostgreSQL the first moves race on the heads row too.
    per_thread, start = 40, threading.Barrier(2)
    errors: list[BaseException] = []

    def worker(tag: str) -> None:
        try:
            start.wait()
            for i in range(per_thread):
                moved(engine, content_address([tag, i]), f"{tag} — étape {i}")
        except BaseException as e:  # noqa: BLE001  (reported by the assert below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in ("équipe-nord", "équipe-sud")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and not any(t.is_alive() for t in threads)
    moves = list(reversed(history(engine)))
    assert len(moves) == 2 * per_thread
    assert sorted(r for _, _, r in moves) == sorted(
        f"{t} — étape {i}" for t in ("équipe-nord", "équipe-sud") for i in range(per_thread)
    )
    assert moves[0][0] is None
    for before, after in zip(moves, moves[1:], strict=False):
        assert after[0] == before[1]  # every move started where the previous one ended
    assert head(engine) == moves[-1][1]


# As existing databases and backups hold them: "<column> <type>[ key][ null][ index]".
SHAPES = {
    "prompt_heads": ["graph VARCHAR(200) key", "version VARCHAR(64)", "moved_at FLOAT"],
    "prompt_head_moves": [
        "seq INTEGER key",
        "graph VARCHAR(200) index",
        "from_version VARCHAR(64) null",
        "to_version VARCHAR(64)",
        "reason TEXT",
        "at FLOAT",
    ],
    "adapter_heads": ["run VARCHAR(200) key", "agent VARCHAR(200) key", "version VARCHAR(64) null", "moved_at FLOAT"],
    "adapter_head_moves": [
        "seq INTEGER key",
        "run VARCHAR(200) index",
        "agent VARCHAR(200)",
        "from_version VARCHAR(64) null",
        "to_version VARCHAR(64) null",
        "reason TEXT",
        "at FLOAT",
    ],
}


@pytest.mark.parametrize("table", [prompt_heads, prompt_head_moves, adapter_heads, adapter_head_moves], ids=str)
def test_the_tables_of_existing_databases_keep_their_shapes(table: Table) -> None:
    def spelled(c: Column) -> str:
        flags = (
            [" key"] * c.primary_key + [" null"] * bool(c.nullable and not c.primary_key) + [" index"] * bool(c.index)
        )
        return f"{c.name} {c.type}" + "".join(flags)

    assert [spelled(c) for c in table.columns] == SHAPES[table.name]


def test_content_addresses_are_those_existing_databases_hold() -> None:
    # Pinned before the ledger was shared: a changed spelling would orphan every stored version.
    assert version_id({"solver.system": "Réponds ✓"}, [("a", "b", 1.0)], ("0123456789abcdef",)) == "632ede987420113c"
    assert content_id({"adapter_config.json": "ab" * 32, "é/x.bin": "cd" * 32}) == "0885ed847e40fded"


def test_docstring_examples_run() -> None:
    import doctest

    import evolve.ledger

    result = doctest.testmod(evolve.ledger)
    assert result.attempted > 0 and result.failed == 0
