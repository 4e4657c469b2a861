"""The recall log: one packed row per recall, committed before ``retrieve`` returns (a recall id survives
a crash), stores logged in the older one-row-per-candidate layout read as before, and the retention
that expires old recalls while keeping what they taught (``memory.recall.log``, ``memory.recall.expiry``)."""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, func, insert, select, text

from connectors.embedders import HashEmbedder
from connectors.errors import StoreError
from memory.config import ForgetConfig, MemoryConfig, RetrievalConfig
from memory.learn.provenance import selected_own
from memory.recall.context_q import context_values, overlay_values
from memory.recall.log import Candidates, pack, pack_plan, unpack
from memory.recall.planning import Nearest, plan_pool
from memory.storage.schema import recall_items, recalls
from memory.store import MemoryStore
from memory.upkeep.pruning import last_recalls

ROOT = Path(__file__).resolve().parents[3]
SHARED = "Zürich-Nordhafen-Logistik — trained/solver"
TENANT = "Zürich-Nordhafen-Logistik-Team-07@Ärztekammer-Nordrhein/solver"
OTHER = "Zürich-Nordhafen-Logistik-Team-07@北海道-logistics-department/solver"
CONTEXTS = ["Torcode Lager Nord — Aufgabe 1", "Torcode Lager Süd — Aufgabe 2"]
CFG = MemoryConfig(alpha=0.5, retrieval=RetrievalConfig(k1=8, k2=3, delta=-1.0, context_q=True))
DAY = 86_400.0


def embedder() -> HashEmbedder:
    return HashEmbedder(dim=64)


def open_at(path: Path, config: MemoryConfig = CFG) -> MemoryStore:
    return MemoryStore(f"sqlite:///{path}", embedder=embedder(), config=config)


def fill(store: MemoryStore) -> None:
    """Trained memories a tenant also recalls, and the tenant's and another tenant's own."""
    store.add_many(
        [(f"Torcode Lager {w}", f"Der Code ist {4400 + i}") for i, w in enumerate("ABCDEFGHIJ")], namespace=SHARED
    )
    store.add_many([(f"Torcode Lager {w}", f"Frag den Nachtwächter {w}") for w in "ABCDE"], namespace=TENANT)
    store.add_many([(f"Torcode Lager {w}", f"Schlüssel im Kasten {w}") for w in "FGH"], namespace=OTHER)


def recall_batch(store: MemoryStore, tag: str) -> list[Any]:
    """Recalls of every kind the log holds: with a context, over the shared memory, plain, another tenant's."""
    out = [store.retrieve(f"Torcode Lager {w} {tag}", namespace=TENANT, shared=SHARED, context=CONTEXTS[i % 2])
           for i, w in enumerate("ABCD")]  # fmt: skip
    out.append(store.retrieve(f"Torcode Lager E {tag}", namespace=TENANT))
    out.append(store.retrieve(f"Torcode Lager F {tag}", namespace=OTHER, shared=SHARED))
    return out


def readers(path: Path, ids: list[str] | None = None) -> dict[str, Any]:
    """What every reader of the log derives from it, read straight from the database; ``selected_own``
    for the recalls ``ids`` (default: every recall logged)."""
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            ids = ids if ids is not None else list(conn.execute(select(recalls.c.id).order_by(recalls.c.id)).scalars())
            return {
                "context": context_values(conn, TENANT, CONTEXTS, alpha=CFG.alpha),
                "overlay": overlay_values(conn, TENANT, SHARED, alpha=CFG.alpha),
                "overlay_other": overlay_values(conn, OTHER, SHARED, alpha=CFG.alpha),
                "last": {ns: last_recalls(conn, ns) for ns in (SHARED, TENANT, OTHER)},
                "provenance": selected_own(conn, ids, TENANT),
            }
    finally:
        engine.dispose()


# -- the layout -----------------------------------------------------------------------------------


def old_log_rows(recall_id: str, plan: Any) -> list[dict[str, Any]]:
    """The ``memory_recall_items`` rows the older layout wrote for a plan (its code, kept as the reference)."""
    sel = plan.selection
    pool_pos = np.cumsum(plan.in_pool) - 1
    rank_of = {int(p): r for r, p in enumerate(sel.order)}
    out = []
    for i, item_id in enumerate(plan.ids):
        row = {"recall_id": recall_id, "item_id": str(item_id), "position": i, "in_pool": bool(plan.in_pool[i]),
               "sim": float(plan.sims[i]), "q": float(plan.qs[i]), "rank": None, "z_sim": None, "z_q": None,
               "score": None, "shared": bool(plan.shared[i])}  # fmt: skip
        if plan.in_pool[i]:
            p = int(pool_pos[i])
            row.update(
                rank=rank_of.get(p), z_sim=float(sel.z_sim[p]), z_q=float(sel.z_q[p]), score=float(sel.scores[p])
            )
        out.append(row)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_packed_candidates_hold_bit_for_bit_what_the_row_per_candidate_layout_held(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 12))
    nearest = Nearest(
        np.array([f"01a2{i:04d}Lager-Süd-Gedächtnis-{i}" for i in range(n)], dtype=object),
        np.sort(rng.uniform(-0.2, 1.0, n))[::-1], rng.normal(size=n), rng.integers(0, 9, n), rng.random(n) < 0.4,
    )  # fmt: skip
    cfg = RetrievalConfig(k1=12, k2=int(rng.integers(1, 5)), delta=0.1, epsilon=0.3 * (seed % 2))
    plan = plan_pool(nearest, cfg, rng)
    packed = unpack(pack_plan(plan))
    expected = [{k: v for k, v in r.items() if k != "recall_id"} for r in old_log_rows("r", plan)]
    got = [{**row, "item_id": row.pop("id")} for row in packed.explain_rows()]
    assert [{k: r[k] for k in expected[0]} for r in got] == expected if n else got == []
    assert [r["filtered"] for r in got] == [not r["in_pool"] for r in expected]
    assert unpack(pack(packed)).explain_rows() == packed.explain_rows()
    assert isinstance(packed, Candidates) and packed.selection()[0] == [str(plan.ids[i]) for i in plan.selected]


def test_a_logged_recall_is_one_compact_row(tmp_path: Path) -> None:
    with open_at(tmp_path / "memory.db") as store:
        fill(store)
        for i in range(40):
            store.retrieve(f"Torcode Lager {'ABCDE'[i % 5]} Schicht {i}", namespace=TENANT, shared=SHARED)
        assert store.flush() > 0  # the rows of the last few milliseconds wait for their group commit
        with store.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(recall_items)).scalar_one() == 0
            sizes = conn.execute(select(func.length(recalls.c.candidates))).scalars().all()
    assert len(sizes) == 40 and max(sizes) < 8 * 80  # eight candidates of about 80 bytes each


def test_explain_of_a_new_recall_shows_what_it_always_showed(tmp_path: Path) -> None:
    with open_at(tmp_path / "memory.db") as store:
        fill(store)
        recall = store.retrieve("Torcode Lager B", namespace=TENANT, shared=SHARED, context=CONTEXTS[0])
        store.reinforce(recall, 1.0, feedback_id="Bewertung-Zürich-0001")
        info = store.explain(recall.id, namespace=TENANT)
    assert list(info) == ["id", "namespace", "query", "created_at", "config", "pool_size", "filtered", "explored",
                          "generation", "context", "shared", "selected", "candidates", "feedback"]  # fmt: skip
    assert (info["id"], info["namespace"], info["query"], info["context"], info["shared"]) == (
        recall.id, TENANT, "Torcode Lager B", CONTEXTS[0], SHARED,
    )  # fmt: skip
    assert info["config"] == {
        "k1": 8,
        "k2": 3,
        "delta": -1.0,
        "lam": 0.5,
        "epsilon": 0.0,
        "z_clip": 3.0,
        "context_q": True,
        "context_start": "neutral",  # logged since it is the default: a context's Q starts at q_init
    }
    assert info["selected"] == list(recall.ids) and info["pool_size"] == recall.pool_size == len(info["candidates"])
    cands = info["candidates"]
    assert list(cands[0]) == ["id", "position", "sim", "q", "z_sim", "z_q", "score", "in_pool", "filtered",
                              "selected", "rank", "source", "superseded", "superseded_by"]  # fmt: skip
    assert [c["position"] for c in cands] == list(range(len(cands)))
    by_id = {c["id"]: c for c in cands}
    for rank, d in enumerate(recall.details):  # the numbers that ranked each memory, bit for bit
        c = by_id[d.item.id]
        assert (c["rank"], c["sim"], c["z_sim"], c["z_q"], c["score"]) == (rank, d.sim, d.z_sim, d.z_q, d.score)
        assert c["source"] == d.item.namespace and c["selected"] and not c["filtered"]
    assert info["feedback"] == [{"id": "Bewertung-Zürich-0001", "reward": 1.0, "applied_at": info["feedback"][0]["applied_at"],
                                 "items": 3}]  # fmt: skip


# -- stores logged in the older layout --------------------------------------------------------------


def to_old_layout(path: Path, explained: dict[str, dict[str, Any]]) -> None:
    """Rewrite a store's log as the older layout: one memory_recall_items row per candidate (own ones with
    ``shared`` NULL, as the oldest logs), no packed column, no summary table."""
    with sqlite3.connect(path) as conn:
        for recall_id, info in explained.items():
            conn.executemany(
                "INSERT INTO memory_recall_items (recall_id, item_id, position, rank, in_pool, sim, q, z_sim, z_q,"
                " score, shared) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [(recall_id, c["id"], c["position"], c["rank"], c["in_pool"], c["sim"], c["q"], c["z_sim"], c["z_q"],
                  c["score"], True if c["source"] != info["namespace"] else None) for c in info["candidates"]],
            )  # fmt: skip
        conn.execute("ALTER TABLE memory_recalls DROP COLUMN candidates")
        conn.execute("DROP TABLE memory_recall_summary")


def test_a_store_logged_in_the_older_layout_is_explained_reinforced_and_read_as_before(tmp_path: Path) -> None:
    new, old = tmp_path / "new.db", tmp_path / "old.db"
    with open_at(new) as store:
        fill(store)
        made = recall_batch(store, "Frühschicht")
        for i, r in enumerate(made[:3]):
            store.reinforce(r, [1.0, -1.0, 0.5][i], feedback_id=f"Bewertung-{i}")
        explained = {r.id: store.explain(r.id, namespace=r.namespace) for r in made}
    shutil.copy(new, old)
    to_old_layout(old, explained)
    stores = {path: open_at(path) for path in (new, old)}
    try:
        assert {r.id: stores[old].explain(r.id, namespace=r.namespace) for r in made} == explained
        for store in stores.values():  # rewards by id, on both layouts, move the same memories the same way
            assert [store.reinforce(r.id, 1.0, namespace=r.namespace, feedback_id=f"später-{r.id}") for r in made[2:]] == [
                len(r) for r in made[2:]
            ]  # fmt: skip
        got = [sorted((m.id, m.q, m.visits) for m in s.items(ns)) for s in stores.values() for ns in (TENANT, OTHER)]
        assert got[:2] == got[2:]
        query = {"namespace": TENANT, "shared": SHARED, "context": CONTEXTS[0], "record": False}
        ranked = [s.retrieve("Torcode Lager A Spät", **query).ids for s in stores.values()]
        assert ranked[0] == ranked[1]
    finally:
        for store in stores.values():
            store.close()
    assert readers(old) == readers(new) and readers(new)["context"] and readers(new)["overlay"]


# -- retention --------------------------------------------------------------------------------------


@pytest.fixture
def history(tmp_path: Path) -> Iterator[Callable[[], dict[str, Any]]]:
    """A store with recalls made before a cutoff and after it, rewarded before it, after it, or both."""

    def make() -> dict[str, Any]:
        path = tmp_path / "memory.db"
        with open_at(path) as store:
            fill(store)
            old = recall_batch(store, "Frühschicht")
            store.reinforce(old[0], -1.0, feedback_id="früh-für-früh")  # old[0] is rewarded again after the cutoff
            for i, r in enumerate(old[1:]):
                store.reinforce(r, [1.0, -1.0, 0.5, 1.0, -0.5][i], feedback_id=f"früh-{i}")
            store.reinforce(old[2], 1.0, feedback_id="früh-zweimal")
            time.sleep(0.01)  # ordering only: the cutoff falls strictly between the two batches
            cutoff = time.time()
            time.sleep(0.01)
            new = recall_batch(store, "Spätschicht")
            store.reinforce(old[0], 1.0, feedback_id="spät-für-früh")
            for i, r in enumerate(new[:3]):
                store.reinforce(r, [-1.0, 1.0, 1.0][i], feedback_id=f"spät-{i}")
        shutil.copy(path, tmp_path / "twin.db")  # the same history, never expired
        return {"path": path, "twin": tmp_path / "twin.db", "old": old, "new": new, "cutoff": cutoff}

    yield make


def counts(path: Path) -> tuple[int, int]:
    with sqlite3.connect(path) as conn:
        return tuple(
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("memory_recalls", "memory_feedback")
        )  # type: ignore[return-value]


def test_retention_expires_exactly_the_recalls_past_it_and_rankings_stay_as_with_the_whole_log(
    history: Callable[[], dict[str, Any]],
) -> None:
    h = history()
    retention = 30 * DAY
    now = h["cutoff"] + retention
    config = ForgetConfig(recall_retention=retention)
    before = readers(h["path"])
    with open_at(h["path"]) as store:
        assert store.prune(config=config, now=now, dry_run=True).recalls_expired == 5
        assert counts(h["path"]) == (12, 11)  # a dry run changes nothing
        assert store.prune(config=config, now=now).recalls_expired == 5  # old[0] got a reward after the cutoff
        assert store.prune(config=config, now=now).recalls_expired == 0  # run again: nothing more
    with sqlite3.connect(h["path"]) as conn:
        kept = {r[0] for r in conn.execute("SELECT id FROM memory_recalls")}
    assert kept == {r.id for r in h["new"]} | {h["old"][0].id}
    assert counts(h["path"]) == (7, 5)  # the expired recalls' feedback rows went with them
    assert readers(h["path"], []) == {**before, "provenance": {}}  # context Q, overlays, last recalls: as before
    assert readers(h["path"])["provenance"] == readers(h["twin"], sorted(kept))["provenance"]

    with open_at(h["path"]) as store, open_at(h["twin"]) as twin:
        for s in (store, twin):  # learning goes on from what expired recalls taught, exactly as with the whole log
            more = recall_batch(s, "Nachtschicht")
            for i, r in enumerate(more):
                s.reinforce(r, [0.5, -1.0, 1.0, 1.0, -0.5, 1.0][i], feedback_id=f"nacht-{i}")
            s.reinforce(h["new"][4].id, -1.0, namespace=TENANT, feedback_id="nacht-spät")
        query = {"namespace": TENANT, "shared": SHARED, "context": CONTEXTS[1], "record": False}
        assert store.retrieve("Torcode Lager D", **query).ids == twin.retrieve("Torcode Lager D", **query).ids
        gone = h["old"][1]
        with pytest.raises(
            StoreError, match=r"has expired: the recall log keeps recalls made after .*recall_retention"
        ):
            store.explain(gone.id, namespace=TENANT)
        with pytest.raises(StoreError, match="has expired.*can no longer be reinforced"):
            store.reinforce(gone.id, 1.0, namespace=TENANT)
        with pytest.raises(StoreError, match="unknown recall id"):  # never logged: not called expired
            store.reinforce("01a2ffffffffLager-Nord-unbekannt", 1.0, namespace=TENANT)
    mine, twins = readers(h["path"], []), readers(h["twin"], [])
    assert [mine[k] for k in ("context", "overlay", "overlay_other")] == [
        twins[k] for k in ("context", "overlay", "overlay_other")
    ]
    assert {ns: set(v) for ns, v in mine["last"].items()} == {
        ns: set(v) for ns, v in twins["last"].items()
    }  # times differ
    with open_at(h["path"]) as store:
        plain = h["old"][4]  # expired too; a Recall object carries its selection (one over shared memories does not
        # reinforce as an object, as with record=False: its memories are not all its namespace's)
        now_q = {i: store.get(i, namespace=TENANT).q for i in plain.ids}
        assert store.reinforce(plain, 1.0, feedback_id="Recall-Objekt") == len(plain)
        assert all(store.get(i, namespace=TENANT).q > q for i, q in now_q.items())


def test_a_recall_rewarded_late_expires_once_all_its_rewards_are_past_the_cutoff(
    history: Callable[[], dict[str, Any]],
) -> None:
    h = history()
    with open_at(h["path"]) as store:
        store.prune(config=ForgetConfig(recall_retention=DAY), now=h["cutoff"] + DAY)
        assert [f["id"] for f in store.explain(h["old"][0].id, namespace=TENANT)["feedback"]] == [
            "früh-für-früh",
            "spät-für-früh",
        ]
        later = time.time() + DAY + 1
        assert store.prune(TENANT, config=ForgetConfig(recall_retention=DAY), now=later).recalls_expired == 6
        assert store.prune(config=ForgetConfig(recall_retention=DAY), now=later).recalls_expired == 1  # OTHER's
    assert counts(h["path"]) == (0, 0)
    assert readers(h["path"], []) == readers(h["twin"], [])  # everything folded, nothing lost


def test_no_retention_keeps_every_recall(history: Callable[[], dict[str, Any]]) -> None:
    h = history()
    with open_at(h["path"]) as store:
        report = store.prune(config=ForgetConfig(), now=time.time() + 400 * DAY)
    assert report.recalls_expired == 0 and counts(h["path"]) == (12, 11)


def test_a_negative_recall_retention_is_refused() -> None:
    from connectors.errors import ConfigError

    with pytest.raises(ConfigError, match="recall_retention"):
        ForgetConfig(recall_retention=-1.0)


def test_the_job_spec_sets_the_recall_retention_in_days() -> None:
    from evolve.spec import ForgetSection

    assert ForgetSection(recall_retention_days=2.0).config().recall_retention == 2 * DAY
    assert ForgetSection().config().recall_retention is None


def test_expiry_leaves_recalls_of_other_namespaces_alone(history: Callable[[], dict[str, Any]]) -> None:
    h = history()
    with open_at(h["path"]) as store:
        assert store.prune(OTHER, config=ForgetConfig(recall_retention=DAY), now=h["cutoff"] + DAY).recalls_expired == 1
        assert store.explain(h["old"][1].id, namespace=TENANT)["id"] == h["old"][1].id
    with sqlite3.connect(h["path"]) as conn:
        left = {r[0] for r in conn.execute("SELECT namespace FROM memory_recalls WHERE id = ?", (h["old"][5].id,))}
    assert left == set()


def learned(store: MemoryStore) -> tuple[Any, ...]:
    with store.engine.connect() as conn:
        return (
            context_values(conn, TENANT, CONTEXTS, alpha=CFG.alpha),
            overlay_values(conn, TENANT, SHARED, alpha=CFG.alpha),
            {ns: last_recalls(conn, ns) for ns in (SHARED, TENANT, OTHER)},
        )


def test_expiry_keeps_what_recalls_taught_on_every_backend(open_store: Callable[..., MemoryStore]) -> None:
    store = open_store(CFG)
    fill(store)
    old = recall_batch(store, "Frühschicht")
    for i, r in enumerate(old):
        store.reinforce(r, [1.0, -1.0, 0.5, 1.0, -0.5, 1.0][i], feedback_id=f"früh-{i}")
    time.sleep(0.01)  # ordering only
    cutoff = time.time()
    time.sleep(0.01)
    new = recall_batch(store, "Spätschicht")
    store.reinforce(new[0], 1.0, feedback_id="spät-0")
    before = learned(store)
    assert store.prune(config=ForgetConfig(recall_retention=DAY), now=cutoff + DAY).recalls_expired == len(old)
    assert learned(store) == before and before[0] and before[1]
    with pytest.raises(StoreError, match="has expired"):
        store.explain(old[0].id, namespace=TENANT)
    assert store.explain(new[0].id, namespace=TENANT)["selected"] == list(new[0].ids)


def test_a_store_from_before_the_packed_log_gains_the_column_on_every_backend(
    open_store: Callable[..., MemoryStore], db_url: str
) -> None:
    store = open_store(CFG)
    fill(store)
    made = recall_batch(store, "Frühschicht")
    explained = {r.id: store.explain(r.id, namespace=r.namespace) for r in made}
    store.close()
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:  # the older layout: a row per candidate, no packed column
            for recall_id, info in explained.items():
                conn.execute(insert(recall_items), [
                    {"recall_id": recall_id, "item_id": c["id"], "position": c["position"], "rank": c["rank"],
                     "in_pool": c["in_pool"], "sim": c["sim"], "q": c["q"], "z_sim": c["z_sim"], "z_q": c["z_q"],
                     "score": c["score"], "shared": c["source"] != info["namespace"]} for c in info["candidates"]
                ])  # fmt: skip
            conn.execute(text("ALTER TABLE memory_recalls DROP COLUMN candidates"))
    finally:
        engine.dispose()
    again = open_store(CFG)
    assert {r.id: again.explain(r.id, namespace=r.namespace) for r in made} == explained
    assert again.reinforce(made[4].id, 1.0, namespace=TENANT) == len(made[4])
    fresh = again.retrieve("Torcode Lager A", namespace=TENANT, shared=SHARED)
    assert again.explain(fresh.id, namespace=TENANT)["selected"] == list(fresh.ids)
