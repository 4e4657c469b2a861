"""Facts that change: a newer memory that contradicts older ones of its task supersedes them
(``MemoryConfig.supersede``, ``memory.upkeep.supersession``). Superseded memories stay stored and auditable
(``get``, ``items``, ``explain``, ``retrieve(as_of=...)``) but no recall finds them, in this process or another."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import memory.write.inserts
from connectors import HashEmbedder, ScriptedChat
from connectors.chat import ChatClient
from connectors.errors import ConfigError, StoreError
from evolve import Agent, Evolver, MemoryView, Task, Team, paraphrase_schedule
from evolve.build import memory_config
from evolve.envs.tasks import check
from evolve.episode import Step, condense
from evolve.spec import load_spec
from memory import MemoryConfig, MemoryStore, RetrievalConfig, WriteEntry
from memory.upkeep.supersession import plan_supersession, stated_fact
from memory.write.writer import cheap_experience
from tests.memory.conftest import sqlite_only
from tests.support.copying_model import copying_reply

Open = Callable[..., MemoryStore]

TEAM = "Zürich-Nordhafen-Logistik-Team-07"
OTHER_TEAM = "Göteborg-Hamnen-Lagerlogistik-Team-12"
GATE = "Welcher Code öffnet das Rolltor am Zürich-Nordhafen-Depot, Halle Süd?"
GATE_TASK = "rolltor-zürich-nordhafen-halle-süd"
SUPERSEDE = MemoryConfig(supersede=True)


def attempt(answer: str, *, task: str = GATE_TASK, namespace: str = TEAM, **kw: object) -> WriteEntry:
    """A successful attempt at ``task`` that answered ``answer`` (what the loop writes for one agent)."""
    fields: dict = {"trajectory": f"Answer given: {answer}", "feedback": "Correct.", "success": True}
    fields.update(kw)
    return WriteEntry(GATE, namespace=namespace, task=task, **fields)


def test_a_changed_code_supersedes_the_old_one(open_store: Open) -> None:
    store = open_store(SUPERSEDE)
    (old,) = store.write_many([attempt("The code is 4471")])
    before = store.retrieve(GATE, namespace=TEAM)
    assert before.ids == (old.id,) and old.valid and old.superseded_by is None
    (new,) = store.write_many([attempt("The code is 9902")])

    stale = store.get(old.id, namespace=TEAM)
    assert (stale.superseded_by, stale.valid_to, stale.valid) == (new.id, new.valid_from, False)
    assert stale.experience == old.experience and stale.valid_at(old.valid_from) and not stale.valid_at(new.valid_from)
    assert store.retrieve(GATE, namespace=TEAM).ids == (new.id,)
    assert store.retrieve(GATE, namespace=TEAM, as_of=old.created_at).ids == (old.id,)
    assert store.retrieve(GATE, namespace=TEAM, as_of=old.created_at - 1).ids == ()
    marked = {c["id"]: c for c in store.explain(before.id, namespace=TEAM)["candidates"]}
    assert (marked[old.id]["superseded"], marked[old.id]["superseded_by"]) == (True, new.id)
    audit = store.retrieve(GATE, namespace=TEAM, as_of=old.created_at)
    assert store.explain(audit.id, namespace=TEAM)["config"]["as_of"] == old.created_at
    assert [i.id for i in store.items(TEAM)] == [old.id, new.id]
    assert [i.id for i in store.items(TEAM, include_superseded=False)] == [new.id]
    assert store.stats(TEAM)["superseded"] == 1 and store.stats(TEAM)["count"] == 2


def test_a_failure_whose_feedback_reveals_another_answer_supersedes_a_success(open_store: Open) -> None:
    store = open_store(SUPERSEDE)
    (old,) = store.write_many([attempt("751")])
    (new,) = store.write_many(
        [attempt("751", success=False, feedback="Wrong. The expected answer is: 400.", trajectory="Answer given: 751")]
    )
    assert store.get(old.id, namespace=TEAM).superseded_by == new.id
    assert store.retrieve(GATE, namespace=TEAM).ids == (new.id,)


def test_memories_that_do_not_contradict_supersede_nothing(open_store: Open) -> None:
    store = open_store(SUPERSEDE)
    written = store.write_many(
        [
            attempt("751"),
            attempt("  751. "),  # the same answer, spelled differently
            attempt("x", success=False, feedback="Wrong. The expected answer is: 751."),  # reveals the same one
            attempt("123", success=False, feedback="Wrong."),  # reveals nothing
            attempt("Entry 3 of the list", success=False, feedback="Wrong.", failure_keeps="both"),
            attempt("9902", task="rolltor-zürich-nordhafen-halle-nord"),  # another task
        ]
    )
    plain = store.add(GATE, "Answer given: 9902", namespace=TEAM, success=True)  # add() states no fact
    assert all(item.valid for item in store.items(TEAM))
    assert len(written) == 6 and plain.valid
    assert len(store.retrieve(GATE, namespace=TEAM).ids) == 5


def test_without_the_switch_nothing_is_superseded(open_store: Open) -> None:
    store = open_store()
    assert store.config.supersede is False
    store.write_many([attempt("4471")])
    store.write_many([attempt("9902")])
    assert [i.valid for i in store.items(TEAM)] == [True, True]
    assert len(store.retrieve(GATE, namespace=TEAM).ids) == 2


def test_a_batch_supersedes_as_the_same_writes_in_order_would(open_store: Open) -> None:
    store = open_store(SUPERSEDE)
    first, second, third = store.write_many([attempt("4471"), attempt("9902"), attempt("9902")])
    assert (first.superseded_by, second.superseded_by, third.superseded_by) == (second.id, None, None)
    assert store.get(first.id, namespace=TEAM).valid_to == second.valid_from
    assert set(store.retrieve(GATE, namespace=TEAM).ids) == {second.id, third.id}


def test_writing_an_attempt_again_supersedes_nothing_twice(open_store: Open) -> None:
    store = open_store(SUPERSEDE)
    (a,) = store.write_many([attempt("4471", id="run-7/episode-1")])
    (b,) = store.write_many([attempt("9902", id="run-7/episode-2")])
    (c,) = store.write_many([attempt("4471", id="run-7/episode-3")])  # the code changed back
    stamped = {i.id: (i.valid_to, i.superseded_by) for i in store.items(TEAM)}
    assert stamped[a.id][1] == b.id and stamped[b.id][1] == c.id and stamped[c.id] == (None, None)

    again = store.write_many([attempt("9902", id="run-7/episode-2")])  # a resumed run writes episode 2 again
    assert again[0].id == b.id
    assert {i.id: (i.valid_to, i.superseded_by) for i in store.items(TEAM)} == stamped
    assert store.retrieve(GATE, namespace=TEAM).ids == (c.id,)


def test_a_write_that_supersedes_is_one_transaction(open_store: Open, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(SUPERSEDE)
    (old,) = store.write_many([attempt("4471")])

    def crash(*args: object) -> None:
        raise RuntimeError("power cut between the insert and the supersession")

    monkeypatch.setattr(memory.write.inserts, "mark_superseded", crash)
    with pytest.raises(RuntimeError, match="power cut"):
        store.write_many([attempt("9902")])
    monkeypatch.undo()
    assert [(i.id, i.valid) for i in store.items(TEAM)] == [(old.id, True)]
    assert store.retrieve(GATE, namespace=TEAM).ids == (old.id,)
    (new,) = store.write_many([attempt("9902")])
    assert store.retrieve(GATE, namespace=TEAM).ids == (new.id,)


def test_another_process_stops_recalling_what_was_superseded(open_store: Open) -> None:
    writer, reader = open_store(SUPERSEDE), open_store()
    (old,) = writer.write_many([attempt("4471")])
    assert reader.retrieve(GATE, namespace=TEAM).ids == (old.id,)  # the reader's mirror holds it now
    (new,) = writer.write_many([attempt("9902")])
    assert reader.retrieve(GATE, namespace=TEAM).ids == (new.id,)
    reopened = open_store()
    assert reopened.retrieve(GATE, namespace=TEAM).ids == (new.id,)


def test_two_namespaces_never_supersede_each_other(open_store: Open) -> None:
    store = open_store(SUPERSEDE)
    dock = "Which code opens loading dock 7 — Göteborg-Hamnen / Zürich-Nordhafen shared gate?"
    store.write_many([attempt("4471"), attempt("9902", namespace=OTHER_TEAM)])  # one task name, two teams
    for team, code in ((TEAM, "1111"), (OTHER_TEAM, "2222")):  # one intent, grouped by similarity, two teams
        store.write(dock, trajectory=f"Answer given: {code}", feedback="Correct.", success=True, namespace=team)
    assert [i.valid for i in store.items()] == [True] * 4
    assert len(store.retrieve(GATE, namespace=TEAM, config=RetrievalConfig(k1=10, k2=10, delta=0.9))) == 1


def test_long_unicode_intents_and_answers_supersede(open_store: Open) -> None:
    intent = ("Quel est le code d'accès du quai n° 7 — entrepôt Zürich-Nordhafen, Halle Süd, 🚚 " * 60).strip()
    store = open_store(SUPERSEDE)

    def write(answer: str) -> str:
        return store.write(
            intent, trajectory=f"Answer given: {answer}", feedback="Correct.", success=True, namespace=TEAM
        ).id

    old, new = write("Tür 7 — Code « 4471 » 🔑"), write("Tür 7 — Code « 9902 » 🔑")
    assert len(intent) > 4000
    assert store.get(old, namespace=TEAM).superseded_by == new
    assert store.retrieve(intent, namespace=TEAM).ids == (new,)


def test_export_and_import_carry_validity(open_store: Open, tmp_path: Path) -> None:
    source = open_store(SUPERSEDE)
    (old,) = source.write_many([attempt("4471")])
    (new,) = source.write_many([attempt("9902")])
    assert source.export(tmp_path / "gate.jsonl") == 2
    target = open_store(SUPERSEDE, url=f"sqlite:///{tmp_path / 'copy.db'}")
    assert target.import_(tmp_path / "gate.jsonl") == 2
    fields = ("id", "valid_from", "valid_to", "superseded_by")
    assert [tuple(getattr(i, f) for f in fields) for i in target.items(TEAM)] == [
        tuple(getattr(i, f) for f in fields) for i in source.items(TEAM)
    ]
    assert target.retrieve(GATE, namespace=TEAM).ids == (new.id,)
    assert target.retrieve(GATE, namespace=TEAM, as_of=old.created_at).ids == (old.id,)


def test_an_export_written_before_validity_imports_as_valid(store: MemoryStore, tmp_path: Path) -> None:
    store.add(GATE, "Answer given: 4471", namespace=TEAM, success=True)
    store.export(tmp_path / "old.jsonl")
    lines = (tmp_path / "old.jsonl").read_text(encoding="utf-8").splitlines()
    for key in ('"valid_from"', '"valid_to"', '"superseded_by"'):
        assert key in lines[1]
    stripped = [lines[0]] + [_drop_keys(line, ("valid_from", "valid_to", "superseded_by")) for line in lines[1:]]
    (tmp_path / "old.jsonl").write_text("\n".join(stripped) + "\n", encoding="utf-8")
    target = MemoryStore(f"sqlite:///{tmp_path / 'copy.db'}", embedder=HashEmbedder(dim=64))
    try:
        assert target.import_(tmp_path / "old.jsonl") == 1
        (item,) = target.items(TEAM)
        assert (item.valid_from, item.valid_to, item.superseded_by) == (item.created_at, None, None)
    finally:
        target.close()


def _drop_keys(line: str, keys: tuple[str, ...]) -> str:
    record = json.loads(line)
    return json.dumps({k: v for k, v in record.items() if k not in keys}, ensure_ascii=False)


def test_a_store_made_before_validity_is_upgraded_on_open(open_store: Open) -> None:
    first = open_store()
    (old,) = first.write_many([attempt("4471")])
    with first.engine.begin() as conn:  # the layout written before supersession
        for column in ("valid_from", "valid_to", "superseded_by"):
            conn.exec_driver_sql(f"ALTER TABLE memory_items DROP COLUMN {column}")
    first.close()
    again = open_store(SUPERSEDE)
    (kept,) = again.items(TEAM)
    assert (kept.id, kept.valid_from, kept.valid_to, kept.superseded_by) == (old.id, old.created_at, None, None)
    assert again.retrieve(GATE, namespace=TEAM, as_of=old.created_at).ids == (old.id,)
    (new,) = again.write_many([attempt("9902")])
    assert again.get(old.id, namespace=TEAM).superseded_by == new.id
    assert again.retrieve(GATE, namespace=TEAM).ids == (new.id,)


@sqlite_only
def test_the_upgrade_adds_the_columns_to_a_sqlite_file(open_store: Open, tmp_path: Path) -> None:
    first = open_store()
    first.add(GATE, "Answer given: 4471", namespace=TEAM, success=True)
    first.close()
    with sqlite3.connect(tmp_path / "memory.db") as conn:
        for column in ("valid_from", "valid_to", "superseded_by"):
            conn.execute(f"ALTER TABLE memory_items DROP COLUMN {column}")
    open_store().close()
    with sqlite3.connect(tmp_path / "memory.db") as conn:
        names = {row[1] for row in conn.execute("PRAGMA table_info(memory_items)")}
    assert {"valid_from", "valid_to", "superseded_by"} <= names


@sqlite_only
def test_an_old_store_opened_read_only_says_it_needs_the_upgrade(open_store: Open, tmp_path: Path) -> None:
    first = open_store()
    first.add(GATE, "Answer given: 4471", namespace=TEAM, success=True)
    first.close()
    with sqlite3.connect(tmp_path / "memory.db") as conn:
        conn.execute("ALTER TABLE memory_items DROP COLUMN superseded_by")
    with pytest.raises(StoreError, match="older version .*superseded_by.* Open it writable once"):
        open_store(url=f"sqlite:///file:{tmp_path / 'memory.db'}?mode=ro&uri=true")


def test_superseded_memories_hold_no_place_under_capacity(open_store: Open) -> None:
    store = open_store(MemoryConfig(supersede=True, capacity=2))
    (old,) = store.write_many([attempt("4471")])
    (new,) = store.write_many([attempt("9902")])
    (other,) = store.write_many([attempt("1234", task="rolltor-zürich-nordhafen-halle-nord")])
    assert {i.id for i in store.items(TEAM)} == {old.id, new.id, other.id}  # nothing evicted: two are valid


def test_as_of_must_be_a_time(store: MemoryStore) -> None:
    with pytest.raises(ConfigError, match="as_of must be a finite Unix time"):
        store.retrieve(GATE, as_of="yesterday")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="as_of"):
        store.retrieve(GATE, as_of=float("nan"))


def test_the_rule_reads_the_texts_the_loop_writes() -> None:
    gate = Task(id="gate", prompt=GATE, answer="400")
    feedback = check(gate, "751")[1]
    failure = cheap_experience(GATE, trajectory="Answer given: 751", feedback=feedback, success=False, keeps="both")
    success = cheap_experience(
        GATE, trajectory=condense([Step("solver", (), "751")]), feedback="Correct.", success=True
    )
    assert (stated_fact(False, failure, {}), stated_fact(True, success, {})) == ("400", "751")
    assert stated_fact(False, cheap_experience(GATE, trajectory="x", feedback="Wrong.", success=False), {}) is None
    assert stated_fact(None, success, {}) is None  # add() memories state nothing
    assert stated_fact(True, success, {"fact": "Code 400"}) == "code 400"  # an explicit fact wins
    older = [("a", "751"), ("b", None), ("c", "400")]
    assert plan_supersession(older, [("d", "400"), ("e", None), ("f", "751")]) == {"a": "d", "c": "f", "d": "f"}


def test_an_explicit_fact_supersedes_whatever_the_texts_say(open_store: Open) -> None:
    store = open_store(SUPERSEDE)
    (old,) = store.write_many([attempt("see the list", fact="Gate code 4471")])
    (same,) = store.write_many([attempt("the usual one", fact="gate code 4471.")])
    (new,) = store.write_many([attempt("see the list", fact="Gate code 9902")])
    assert store.get(old.id, namespace=TEAM).meta["fact"] == "Gate code 4471"
    assert store.get(old.id, namespace=TEAM).superseded_by == new.id
    assert store.get(same.id, namespace=TEAM).superseded_by == new.id


def test_the_loop_recovers_in_the_round_after_a_change(tmp_path: Path) -> None:
    task = Task(
        id="rolltor — Zürich-Nordhafen Halle Süd",
        prompt=GATE,
        answer="4471",
        meta={"changes": [{"round": 3, "answer": "9902"}]},
    )
    recovered = {}
    for supersede in (False, True):
        config = MemoryConfig(retrieval=RetrievalConfig(k1=10, k2=1), supersede=supersede)
        url = f"sqlite:///{tmp_path / f'loop-{supersede}.db'}"
        with MemoryStore(url, embedder=HashEmbedder(), config=config) as store:
            agent = Agent("solver", ChatClient(ScriptedChat(copying_reply)), memory=MemoryView(store))
            evolver = Evolver(
                Team([agent]), [task], memory=store, run="gate", schedule=paraphrase_schedule(3), progress=False
            )
            rewards = [m.success_rate for m in evolver.run(rounds=5)]
            recovered[supersede] = rewards
            if supersede:
                assert sum(not i.valid for i in store.items()) == 2  # round 1's failure and round 2's success
    assert recovered[True] == [0.0, 1.0, 0.0, 1.0, 1.0]
    assert recovered[False][3] == 0.0  # without it, round 2's rewarded success is recalled after the change


def test_a_spec_turns_supersession_on(tmp_path: Path, repo_root: Path) -> None:
    text = (repo_root / "data" / "changing_facts.toml").read_text(encoding="utf-8")
    (tmp_path / "changing_facts.jsonl").write_text("", encoding="utf-8")
    for extra, expected in (("", False), ("supersede = true\n", True)):
        (tmp_path / "spec.toml").write_text(text.replace("alpha = 0.3\n", "alpha = 0.3\n" + extra), encoding="utf-8")
        assert memory_config(load_spec(tmp_path / "spec.toml")).supersede is expected
