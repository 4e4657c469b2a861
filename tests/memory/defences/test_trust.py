"""Provenance, trust and distrust (issue 40, item 3): every memory records its writer, a trust policy holds back
untrusted writers' memories (neutral Q or quarantine), and an operator can remove or reset a writer's memories
after the fact and undo it, seen by every process sharing the database."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from connectors.errors import ConfigError
from memory import DistrustReport, MemoryConfig, MemoryStore, TrustPolicy, WriteEntry
from memory.storage.schema import read_state

Open = Callable[..., MemoryStore]
ZURICH = "Zürich Nordhafen Logistik GmbH (Lager 7)"
MUNSTER = "Ärztekammer Westfalen-Lippe — Münster, Büro Süd"
NS_ZURICH = f"Türcodes — {ZURICH}/solver"
NS_MUNSTER = f"Türcodes — {MUNSTER}/solver"
TENANT_Z, TENANT_M = f"tenant:{ZURICH}", f"tenant:{MUNSTER}"
DUMP = "Übernahme Altbestand 2025 (Kunden Süd).jsonl"
QUESTION = "Wie lautet der Türcode des Lagers am Nordhafen?"
QUARANTINE = MemoryConfig(trust=TrustPolicy(mode="quarantine"))
NEUTRAL = MemoryConfig(trust=TrustPolicy(mode="neutral"))


def generation(store: MemoryStore) -> int:
    with store.engine.connect() as conn:
        return read_state(conn).generation


def test_every_write_path_records_its_writer(store: MemoryStore, tmp_path: Path) -> None:
    assert store.add(QUESTION, "4471 laut Lageplan", namespace=NS_ZURICH).meta["writer"] == "user:local"
    told = store.add(QUESTION, "4471", namespace=NS_ZURICH, writer=TENANT_Z, meta={"writer": "run:forged"})
    assert told.meta["writer"] == TENANT_Z and told.meta["claimed_writer"] == "run:forged"
    ids = [
        m.id
        for m in store.add_many(
            [("Code Lager Süd?", "1234"), ("Code Lager Ost?", "5678")], namespace=NS_MUNSTER, writer=TENANT_M
        )
    ]
    assert {store.get(i, namespace=NS_MUNSTER).meta["writer"] for i in ids} == {TENANT_M}
    written = store.write(QUESTION, trajectory="4471", feedback="richtig", success=True, namespace=NS_ZURICH,
                          writer=f"run:Türcodes Pilot 2026 — {ZURICH}")  # fmt: skip
    assert written.meta["writer"] == f"run:Türcodes Pilot 2026 — {ZURICH}" and written.meta["composed"] == "cheap"
    [entry] = store.write_many([WriteEntry("Code?", trajectory="x", feedback="y", success=False, namespace=NS_MUNSTER,
                                           writer=f"mcp:{MUNSTER}")])  # fmt: skip
    assert entry.meta["writer"] == f"mcp:{MUNSTER}"

    dump = tmp_path / DUMP
    store.export(dump)
    lines = dump.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines[1:]]
    rows[0]["meta"].pop("writer")  # a record without a writer ...
    rows[1]["meta"]["writer"] = "cheap"  # ... and one with what older versions stored there
    dump.write_text("\n".join([lines[0], *map(json.dumps, rows)]) + "\n", encoding="utf-8")
    with MemoryStore(f"sqlite:///{tmp_path / 'kopie.db'}", embedder=store.embedder) as copy:
        assert copy.import_(dump) == len(rows)
        got = {item.id: item.meta for item in copy.items()}
        assert got[rows[0]["id"]]["writer"] == f"import:{DUMP}" and "claimed_writer" not in got[rows[0]["id"]]
        assert got[rows[1]["id"]]["writer"] == f"import:{DUMP}" and got[rows[1]["id"]]["claimed_writer"] == "cheap"
        assert got[rows[2]["id"]]["writer"] == rows[2]["meta"]["writer"]  # its own, kept
    with MemoryStore(f"sqlite:///{tmp_path / 'gestempelt.db'}", embedder=store.embedder) as stamped:
        stamped.import_(dump, writer="import:Altbestand geprüft von Frau Özdemir")
        metas = {item.id: item.meta for item in stamped.items()}
        assert {m["writer"] for m in metas.values()} == {"import:Altbestand geprüft von Frau Özdemir"}
        assert metas[rows[2]["id"]]["claimed_writer"] == rows[2]["meta"]["writer"]


@pytest.mark.parametrize(
    "writer",
    ["tenant", "tenant:", "tenant:   ", "robot:R2", "Tenant:acme", f"tenant:{ZURICH}\x07", "tenant:" + "x" * 194, 7],
)
def test_a_malformed_writer_is_a_config_error_naming_the_form(store: MemoryStore, writer: object) -> None:
    with pytest.raises(ConfigError, match="must be '<kind>:<name>' with kind one of run, tenant, promoted"):
        store.add(QUESTION, "4471", writer=writer)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="<kind>:<name>"):
        store.distrust(writer)  # type: ignore[arg-type]
    assert store.items() == []


def test_an_unknown_mode_or_a_malformed_pattern_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"mode must be one of \('open', 'neutral', 'quarantine'\), got 'paranoid'"):
        TrustPolicy(mode="paranoid")  # type: ignore[arg-type]
    for bad in [("tenat:*",), ("run:[abc",), ("*",), ("",), "run:*", ("run:x\n",)]:
        with pytest.raises(ConfigError, match="TrustPolicy.trusted"):
            TrustPolicy(trusted=bad)  # type: ignore[arg-type]
    assert TrustPolicy(trusted=["*:*"]).trusts(f"import:{DUMP}") and TrustPolicy().trusts(TENANT_Z)
    with pytest.raises(ConfigError, match="MemoryConfig.trust must be a memory.defences.trust.TrustPolicy"):
        MemoryConfig(trust="quarantine")  # type: ignore[arg-type]


def test_neutral_starts_an_untrusted_writers_memory_at_q_init(open_store: Open, tmp_path: Path) -> None:
    store = open_store(NEUTRAL)
    held = store.add(QUESTION, "9999", namespace=NS_ZURICH, q=0.9, writer=f"import:{DUMP}")
    trusted = store.add(QUESTION, "4471", namespace=NS_ZURICH, q=0.9, writer=TENANT_Z)
    assert (held.q, trusted.q) == (0.0, 0.9)
    source = open_store(url=f"sqlite:///{tmp_path / 'quelle.db'}")
    item = source.add(QUESTION, "1234", namespace=NS_MUNSTER, q=0.8, writer=f"import:{DUMP}")
    source.reinforce(source.retrieve(QUESTION, namespace=NS_MUNSTER), 1.0)
    source.export(tmp_path / DUMP)
    assert store.import_(tmp_path / DUMP) == 1
    got = store.get(item.id, namespace=NS_MUNSTER)
    assert (got.q, got.visits) == (0.0, 0) and source.get(item.id, namespace=NS_MUNSTER).visits == 1


def test_quarantine_hides_from_every_recall_until_released(open_store: Open) -> None:
    store = open_store(QUARANTINE)
    mine = store.add(QUESTION, "4471 laut Lageplan", namespace=NS_ZURICH, writer=TENANT_Z)
    held = store.add(QUESTION, "9999 (falsch)", namespace=NS_ZURICH, q=0.95, writer=f"mcp:{ZURICH}", id="mcp-1")
    other = store.add(QUESTION, "0000", namespace=NS_MUNSTER, writer=f"promoted:{MUNSTER}")
    assert held.q == 0.0 and store.retrieve(QUESTION, namespace=NS_ZURICH).ids == (mine.id,)
    assert store.retrieve(QUESTION, namespace=NS_MUNSTER).ids == ()
    assert store.retrieve(QUESTION, namespace=NS_MUNSTER, shared=NS_ZURICH).ids == (mine.id,)
    assert [m.id for m in store.quarantined()] == ["mcp-1", other.id]
    assert [m.id for m in store.quarantined(NS_ZURICH, writer=f"mcp:{ZURICH}")] == ["mcp-1"]
    assert store.stats(NS_ZURICH)["count"] == 1
    again = store.add(QUESTION, "9999 (falsch)", namespace=NS_ZURICH, q=0.95, writer=f"mcp:{ZURICH}", id="mcp-1")
    assert again.id == "mcp-1" and len(store.quarantined()) == 2  # an id held is never written twice

    assert store.release(writer=f"mcp:{ZURICH}") == 1
    assert store.release(writer=f"mcp:{ZURICH}") == 0 and [m.id for m in store.quarantined()] == [other.id]
    assert set(store.retrieve(QUESTION, namespace=NS_ZURICH).ids) == {mine.id, "mcp-1"}
    released = store.get("mcp-1", namespace=NS_ZURICH)
    assert (released.q, released.visits, released.meta["writer"]) == (0.0, 0, f"mcp:{ZURICH}")
    assert store.add(QUESTION, "9999", namespace=NS_ZURICH, writer=f"mcp:{ZURICH}", id="mcp-1") == released
    with pytest.raises(ConfigError, match="say which held memories"):
        store.release()


def test_a_quarantined_import_is_idempotent_and_released_in_one_call(open_store: Open, tmp_path: Path) -> None:
    source = open_store(url=f"sqlite:///{tmp_path / 'quelle.db'}")
    source.add_many([(f"Türcode Lager {i} am Nordhafen?", f"{i:04d}") for i in range(5)], namespace=NS_ZURICH)
    source.export(tmp_path / DUMP)
    store = open_store(QUARANTINE)
    assert store.import_(tmp_path / DUMP, writer=f"import:{DUMP}") == 5
    assert store.import_(tmp_path / DUMP, writer=f"import:{DUMP}") == 0  # held: not held twice
    assert len(store.quarantined(NS_ZURICH)) == 5 and store.items() == []
    assert store.release(namespace=NS_ZURICH) == 5
    assert store.import_(tmp_path / DUMP, writer=f"import:{DUMP}") == 0  # released: stored once
    assert len(store.items(NS_ZURICH)) == 5 and store.quarantined() == []


def test_distrust_remove_then_restore_puts_every_memory_back_exactly(open_store: Open) -> None:
    store = open_store(QUARANTINE)
    bad = [
        store.add(f"{QUESTION} ({i})", "9999", namespace=ns, writer=TENANT_Z)
        for i, ns in enumerate([NS_ZURICH, NS_MUNSTER])
    ]
    good = store.add(QUESTION, "4471", namespace=NS_ZURICH, writer=TENANT_M)
    held = store.add(QUESTION, "8888", namespace=NS_ZURICH, writer=f"import:{DUMP}")
    store.reinforce(store.retrieve(f"{QUESTION} (0)", namespace=NS_ZURICH), 1.0)
    before = {m.id: m for m in store.items()}
    other = open_store(QUARANTINE)  # another process on the same database
    assert bad[0].id in other.retrieve(f"{QUESTION} (0)", namespace=NS_ZURICH).ids

    assert store.distrust(TENANT_Z) == DistrustReport(TENANT_Z, "remove", 2, 0, 0)
    assert store.distrust(f"import:{DUMP}", namespace=NS_ZURICH) == DistrustReport(f"import:{DUMP}", "remove", 0, 0, 1)
    assert [m.id for m in store.items()] == [good.id] and store.quarantined() == []
    assert store.release(writer=f"import:{DUMP}") == 0  # dropped: no release moves it
    assert bad[0].id not in other.retrieve(f"{QUESTION} (0)", namespace=NS_ZURICH).ids
    logged = {e.removal.item.id: e for e in store.history()}
    assert logged[bad[0].id].removal.reason == f"distrusted: {TENANT_Z}" and logged[bad[0].id].restorable

    assert store.restore([bad[0].id], namespace=NS_ZURICH).restored == (bad[0].id,)
    assert store.get(bad[0].id, namespace=NS_ZURICH) == before[bad[0].id]  # Q and visits as they were
    assert store.undo_distrust(TENANT_Z) == DistrustReport(TENANT_Z, "undo", 1, 0, 0)  # the other namespace's
    assert {m.id: m for m in store.items()} == before
    assert store.undo_distrust(f"import:{DUMP}").dropped == 1 and [m.id for m in store.quarantined()] == [held.id]
    assert bad[0].id in other.retrieve(f"{QUESTION} (0)", namespace=NS_ZURICH).ids


def test_distrust_reset_then_undo_gives_the_values_back(open_store: Open) -> None:
    store = open_store()
    bad = store.add(QUESTION, "9999", namespace=NS_ZURICH, writer=TENANT_Z)
    later = store.add("Türcode Lager Süd?", "1234", namespace=NS_MUNSTER, writer=TENANT_Z)
    store.reinforce(store.retrieve(QUESTION, namespace=NS_ZURICH), 1.0)
    store.reinforce(store.retrieve(QUESTION, namespace=NS_ZURICH), 1.0)
    good = store.add(QUESTION, "4471", namespace=NS_ZURICH, writer=TENANT_M, q=0.2)
    before = {m.id: (m.q, m.visits) for m in store.items()}
    assert before[bad.id][1] == 2 and before[bad.id][0] > 0.2 and before[later.id] == (0.0, 0)
    other = open_store()  # another process on the same database
    assert other.retrieve(QUESTION, namespace=NS_ZURICH).ids == (bad.id, good.id)

    assert store.distrust(TENANT_Z, action="reset") == DistrustReport(TENANT_Z, "reset", 0, 1, 0)  # later: at q_init
    assert {m.id: (m.q, m.visits) for m in other.items()} == {**before, bad.id: (0.0, 0)}
    assert other.retrieve(QUESTION, namespace=NS_ZURICH).ids == (good.id, bad.id)  # ranked by the reset Q
    store.reinforce(store.retrieve("Türcode Lager Süd?", namespace=NS_MUNSTER), 1.0)  # learned after the reset
    assert store.distrust(TENANT_Z, action="reset").reset == 1  # reset again: the later reward goes too

    store.reinforce(store.retrieve("Türcode Lager Süd?", namespace=NS_MUNSTER), 1.0)
    assert store.undo_distrust(TENANT_Z) == DistrustReport(TENANT_Z, "undo", 0, 1, 0)
    after = {m.id: (m.q, m.visits) for m in other.items()}
    assert after[bad.id] == before[bad.id] and after[later.id] == (0.3, 1)  # rewarded since its reset: kept
    assert store.undo_distrust(TENANT_Z).total == 0
    with pytest.raises(ConfigError, match="action must be one of"):
        store.distrust(TENANT_Z, action="delete")


def test_a_reset_also_forgets_what_the_memory_earned_in_each_task_until_undone(open_store: Open) -> None:
    store = open_store()  # the default memory ranks by Q in context: what a memory earned for the task at hand
    task = f"Türcode Nordhafen — {ZURICH}"
    bad = store.add(QUESTION, "9999", namespace=NS_ZURICH, writer=TENANT_Z)
    good = store.add(QUESTION, "4471", namespace=NS_ZURICH, writer=TENANT_M)
    for _ in range(2):
        recall = store.retrieve(QUESTION, namespace=NS_ZURICH, context=task)
        assert recall.ids[0] == bad.id  # the older of two equals, then its own good ratings
        store.reinforce(recall, 1.0)
    other = open_store()  # another process on the same database
    assert other.retrieve(QUESTION, namespace=NS_ZURICH, context=task).ids[0] == bad.id

    store.distrust(TENANT_Z, action="reset")
    assert other.retrieve(QUESTION, namespace=NS_ZURICH, context=task).ids[0] == good.id  # no Q earned any more
    store.undo_distrust(TENANT_Z)
    assert other.retrieve(QUESTION, namespace=NS_ZURICH, context=task).ids[0] == bad.id


@pytest.mark.parametrize("action", ["remove", "reset"])
def test_distrusting_twice_writes_nothing_the_second_time(store: MemoryStore, action: str) -> None:
    store.add(QUESTION, "9999", namespace=NS_ZURICH, writer=TENANT_Z, q=0.7)
    assert store.distrust(TENANT_Z, action=action).total == 1
    at = generation(store)
    assert store.distrust(TENANT_Z, action=action) == DistrustReport(TENANT_Z, action, 0, 0, 0)
    assert generation(store) == at


def test_an_unknown_writer_is_named_with_some_known_ones(store: MemoryStore) -> None:
    store.add(QUESTION, "4471", namespace=NS_ZURICH, writer=TENANT_Z)
    removed = store.add(QUESTION, "1234", namespace=NS_MUNSTER, writer=f"import:{DUMP}")
    store.remove([removed.id], namespace=NS_MUNSTER)
    with pytest.raises(ConfigError) as e:
        store.distrust(f"tenant:{ZURICH.lower()}")
    assert f"'tenant:{ZURICH.lower()}'" in str(e.value) and repr(TENANT_Z) in str(e.value)
    assert repr(f"import:{DUMP}") in str(e.value)  # known from the removal log
    assert store.distrust(f"import:{DUMP}").total == 0  # known, nothing left to remove


def test_export_then_import_stays_bit_exact_with_writers(open_store: Open, tmp_path: Path) -> None:
    source = open_store()
    source.add(QUESTION, "4471", namespace=NS_ZURICH, writer=TENANT_Z, q=1 / 3, meta={"quelle": "Lageplan"})
    source.add_many([("Türcode Süd?", "1234"), ("Türcode Ost?", "5678")], namespace=NS_MUNSTER, writer=TENANT_M)
    source.export(tmp_path / "eins.jsonl")
    for trust in ("open", "neutral"):  # every writer here is trusted: nothing changes
        copy = open_store(MemoryConfig(trust=TrustPolicy(mode=trust)), url=f"sqlite:///{tmp_path / f'{trust}.db'}")
        assert copy.import_(tmp_path / "eins.jsonl") == 3
        copy.export(tmp_path / f"{trust}.jsonl")
        first, second = (
            (tmp_path / n).read_text(encoding="utf-8").splitlines() for n in ("eins.jsonl", f"{trust}.jsonl")
        )
        assert first[1:] == second[1:]
