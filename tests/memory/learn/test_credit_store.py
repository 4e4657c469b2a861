"""Credit over several steps inside the store (``MemoryConfig.credit_depth``): provenance edges recorded at
write time (``memory.learn.provenance``), a reward reaching the memories that were in context when the recalled ones
were written (``memory.learn.rewards.plan_updates``), checked by hand and against a loop-by-loop reference."""

from __future__ import annotations

import doctest
import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import create_engine, select

import memory.learn.provenance
from connectors import HashEmbedder, ScriptedChat
from connectors.chat import ChatClient
from evolve import Agent, Evolver, MemoryView, Task, Team
from memory import MemoryConfig, MemoryStore, Recall, Reinforcement, RetrievalConfig
from memory.learn.provenance import record_context
from memory.storage.schema import links
from tests.support.copying_model import copying_reply

Open = Callable[..., MemoryStore]

TEAM = "Zürich-Nordhafen-Logistik-Team-07/solver"
OTHER = "Kraków-Südhafen-Spedition-Team-12/solver"
BASE = "Nordhafen-Basiswissen-gemeinsam-für-alle-Teams"
ALPHA = 0.3
EXACT = RetrievalConfig(k1=10, k2=1, lam=0.0)  # pure similarity: the constructions below pick what they name
WORDS = "Kran Palette Zoll Liegeplatz Kühlcontainer Tor Siegel Tally Laschung Tiefgang Frachtbrief Schleuse".split()


def credit(depth: int, decay: float = 0.5, mode: str = "uniform") -> MemoryConfig:
    return MemoryConfig(alpha=ALPHA, credit_depth=depth, credit_decay=decay, credit=mode)  # type: ignore[arg-type]


def edges(url: str) -> set[tuple[str, str, str]]:
    """Every stored ``context`` edge as ``(child, parent, namespace)``, read with a separate engine."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            query = select(links.c.child_id, links.c.parent_id, links.c.namespace).where(links.c.relation == "context")
            return {(r[0], r[1], r[2]) for r in conn.execute(query)}
    finally:
        engine.dispose()


def values(store: MemoryStore, namespace: str) -> dict[str, tuple[float, int]]:
    return {m.id: (m.q, m.visits) for m in store.items(namespace)}


# -- the worked example of memory/learn/credit.py, stored -------------------------------------------------
def worked_example(store: MemoryStore) -> dict[str, str]:
    """C written with A and B in context, D with C; Q = 0.2 (D), 0.5 (C), 0.0 (A), 0.8 (B)."""
    a = store.add("Rolltor Halle Süd öffnen", "Code 4471", namespace=TEAM, q=0.0)
    b = store.add("Rolltor Halle Nord öffnen", "Code 9902", namespace=TEAM, q=0.8)
    both = store.retrieve("Rolltor Halle öffnen", namespace=TEAM, config=RetrievalConfig(k2=2, lam=0.0))
    assert set(both.ids) == {a.id, b.id}
    c = store.add("Kühlcontainer am Liegeplatz 4 anschließen", "Stecker C", namespace=TEAM, q=0.5,
                  meta={"provenance": {"recalls": [both.id]}})  # fmt: skip
    only_c = store.retrieve("Kühlcontainer am Liegeplatz 4 anschließen", namespace=TEAM, config=EXACT)
    assert only_c.ids == (c.id,)
    d = store.add("Zollsiegel am Kühlcontainer prüfen", "Siegel D", namespace=TEAM, q=0.2,
                  meta={"provenance": {"episode": "ep-2", "recalls": [only_c.id]}})  # fmt: skip
    return {"A": a.id, "B": b.id, "C": c.id, "D": d.id}


def test_the_store_reproduces_the_worked_example_after_reopening_the_file(open_store: Open, db_url: str) -> None:
    ids = worked_example(open_store(credit(2)))
    name = {v: k for k, v in ids.items()}
    assert {(name[c], name[p]) for c, p, ns in edges(db_url) if ns == TEAM} == {("C", "A"), ("C", "B"), ("D", "C")}

    store = open_store(credit(2))  # a second process on the same database: the edges are stored, not held
    recall = store.retrieve("Zollsiegel am Kühlcontainer prüfen", namespace=TEAM, config=EXACT)
    assert recall.ids == (ids["D"],)
    assert store.reinforce(recall, 1.0, feedback_id="Zürich-Nordhafen-Runde-3/ep-9") == 1  # D, the recalled one
    got = {name[i]: v for i, v in values(store, TEAM).items()}
    assert {k: round(q, 12) for k, (q, _) in got.items()} == {"D": 0.44, "C": 0.575, "A": 0.075, "B": 0.815}
    assert {k: visits for k, (_, visits) in got.items()} == {"D": 1, "C": 0, "A": 0, "B": 0}  # "times recalled"
    seen = store.retrieve("Rolltor Halle öffnen", namespace=TEAM, config=RetrievalConfig(k2=2, lam=0.0))
    assert {name[m.id]: m.q for m in seen.items} == {"A": got["A"][0], "B": got["B"][0]}  # the mirror saw them move


def test_a_replayed_feedback_changes_nothing_ancestors_included(open_store: Open) -> None:
    store = open_store(credit(2))
    ids = worked_example(store)
    recall = store.retrieve("Zollsiegel am Kühlcontainer prüfen", namespace=TEAM, config=EXACT)
    assert store.reinforce(recall, 1.0, feedback_id="Zürich-Nordhafen-Runde-3/ep-9") == 1
    after = values(store, TEAM)
    assert after[ids["A"]][0] > 0.0  # moved once
    assert store.reinforce(recall, 1.0, feedback_id="Zürich-Nordhafen-Runde-3/ep-9") == 0
    assert store.reinforce_many([Reinforcement(recall.id, -1.0, "Zürich-Nordhafen-Runde-3/ep-9", TEAM)]) == 0
    assert values(open_store(credit(2)), TEAM) == after


def test_depth_one_stops_after_one_edge_and_the_switch_off_moves_only_the_recalled(open_store: Open) -> None:
    store = open_store(credit(1))
    ids = worked_example(store)
    recall = store.retrieve("Zollsiegel am Kühlcontainer prüfen", namespace=TEAM, config=EXACT)
    store.reinforce(recall, 1.0)
    q = {k: store.get(v, namespace=TEAM).q for k, v in ids.items()}
    assert (round(q["D"], 12), round(q["C"], 12), q["A"], q["B"]) == (0.44, 0.575, 0.0, 0.8)

    off = open_store(credit(0))
    off.reinforce(off.retrieve("Zollsiegel am Kühlcontainer prüfen", namespace=TEAM, config=EXACT), 1.0)
    q2 = {k: off.get(v, namespace=TEAM).q for k, v in ids.items()}
    assert q2 == {"D": 0.44 + 0.3 * (1 - 0.44), "C": q["C"], "A": 0.0, "B": 0.8}


# -- random DAGs against a loop-by-loop reference ------------------------------------------------------
@dataclass
class History:
    """What the test saw while writing: each memory's parents (from the recalls it named) and the recalls."""

    parents: dict[str, set[str]]
    recalls: list[Recall]


def build_history(store: MemoryStore, namespace: str, seed: int, steps: int = 24) -> History:
    """Memories written through ``store.write`` after real recalls, each naming 0-2 of them as provenance."""
    rng = random.Random(seed)
    for i in range(4):
        words = " ".join(rng.sample(WORDS, 3))
        store.add(f"Nordhafen Aufgabe {i}: {words}", f"Lösung {i}", namespace=namespace, q=rng.uniform(-1, 1))
    history = History({}, [])
    for t in range(steps):
        made = []
        for _ in range(rng.randint(0, 2)):
            cfg = RetrievalConfig(k1=10, k2=rng.randint(1, 3), lam=rng.choice([0.0, 0.5]))
            query = "Nordhafen Schritt " + " ".join(rng.sample(WORDS, 2))  # mostly earlier steps: a deep graph
            made.append(store.retrieve(query, namespace=namespace, config=cfg))
        words = " ".join(rng.sample(WORDS, 4))
        item = store.write(
            f"Nordhafen Schritt {t}: {words}", trajectory=f"Versuch {t}", feedback="ok" if t % 3 else "falsch",
            success=bool(t % 3), namespace=namespace,
            provenance={"episode": f"Zürich-Nordhafen-Episode-{seed}-{t}", "recalls": [r.id for r in made]},
        )  # fmt: skip
        history.parents[item.id] = {i for r in made for i in r.ids}
        history.recalls.extend(made)
    return history


def reference(
    start: Mapping[str, tuple[float, int]],
    parents: Mapping[str, set[str]],
    feedback: Sequence[tuple[Recall, float]],
    *,
    mode: str,
    decay: float,
    depth: int,
) -> dict[str, tuple[float, int]]:
    """The documented rule, one reward after another, in plain loops: BFS from every recalled memory, an
    ancestor's weight the best ``w_s·decay^d`` over sources (max over paths), capped at 1."""
    q = {m: v[0] for m, v in start.items()}
    visits = {m: v[1] for m, v in start.items()}
    for recall, reward in feedback:
        if mode == "uniform":
            direct = {m: 1.0 for m in recall.ids}
        else:
            e = [2.718281828459045 ** (s - max(recall.scores)) for s in recall.scores]
            direct = {m: len(e) * x / sum(e) for m, x in zip(recall.ids, e, strict=True)}
        trace: dict[str, float] = {}
        for source, w in direct.items():
            distance, queue = {source: 0}, deque([source])
            while queue:
                m = queue.popleft()
                for p in sorted(parents.get(m, ())) if distance[m] < depth else ():
                    if p not in distance:
                        distance[p] = distance[m] + 1
                        queue.append(p)
            for m, d in distance.items():
                if d > 0:
                    trace[m] = max(trace.get(m, 0.0), w * decay**d)
        for m, w in direct.items():
            q[m] = q[m] + min(1.0, ALPHA * w) * (reward - q[m])
            visits[m] += 1
        for m, t in trace.items():
            if m not in direct and t > 0:
                q[m] = q[m] + min(1.0, ALPHA * min(1.0, t)) * (reward - q[m])
    return {m: (q[m], visits[m]) for m in q}


@pytest.mark.parametrize(
    ("seed", "mode", "depth", "decay"),
    [(1, "uniform", 2, 0.5), (5, "uniform", 3, 0.7), (3, "score", 2, 0.5), (2, "score", 2, 0.9)],
)
def test_random_provenance_dags_match_a_loop_by_loop_reference(
    open_store: Open, seed: int, mode: str, depth: int, decay: float
) -> None:
    store = open_store(credit(depth, decay, mode))
    history = build_history(store, TEAM, seed)
    stored = {(c, p) for c, p, ns in edges(store.url) if ns == TEAM}
    assert stored == {(c, p) for c, ps in history.parents.items() for p in ps}
    assert sum(len(ps) > 0 for ps in history.parents.values()) >= 8  # a real graph, not a forest of roots

    rng = random.Random(seed)
    feedback = [(r, rng.choice([1.0, -1.0, 0.5])) for r in history.recalls[-6:]]
    latest = store.items(TEAM)[-1]  # the newest memory, with the most provenance above it
    fresh = store.retrieve(latest.intent, namespace=TEAM, config=RetrievalConfig(k2=3, lam=0.0))
    feedback += [(fresh, 1.0), (history.recalls[-1], -1.0)]  # a recall rewarded twice, under two feedback ids
    start = values(store, TEAM)
    entries = [Reinforcement(r, reward, f"Zürich-Nordhafen-Runde-{seed}/{i}") for i, (r, reward) in enumerate(feedback)]
    assert store.reinforce_many(entries) == sum(len(r) for r, _ in feedback)  # updates of recalled memories
    expected = reference(start, history.parents, feedback, mode=mode, decay=decay, depth=depth)
    got = values(store, TEAM)
    assert got.keys() == expected.keys()
    for m, (q, visits) in expected.items():
        assert got[m][1] == visits, m
        assert got[m][0] == pytest.approx(q, abs=1e-12), m
    for other in (0, depth - 1, depth + 1):  # credit travelled, exactly as far as the depth allows
        near = reference(start, history.parents, feedback, mode=mode, decay=decay, depth=other)
        assert any(abs(got[m][0] - near[m][0]) > 1e-6 for m in got), other


@pytest.mark.parametrize("config", [credit(0), credit(3, decay=0.0), MemoryConfig(alpha=ALPHA)])
def test_the_switch_off_gives_todays_q_values_bit_for_bit(open_store: Open, config: MemoryConfig) -> None:
    store = open_store(config)
    history = build_history(store, TEAM, seed=11)
    feedback = [(r, 1.0 if i % 2 else -0.5) for i, r in enumerate(history.recalls[:8])]
    start = values(store, TEAM)
    store.reinforce_many([Reinforcement(r, reward) for r, reward in feedback])
    today = {m: list(v) for m, v in start.items()}
    for recall, reward in feedback:  # today's rule: only the recalled memories, each one visit
        for m in recall.ids:
            today[m] = [today[m][0] + ALPHA * (reward - today[m][0]), today[m][1] + 1]
    assert values(store, TEAM) == {m: (q, v) for m, (q, v) in today.items()}


# -- namespaces and shared memories --------------------------------------------------------------------
def test_edges_never_cross_namespaces_and_a_reward_moves_only_its_tenant(open_store: Open) -> None:
    store = open_store(credit(3))
    team = build_history(store, TEAM, seed=5)
    other = build_history(store, OTHER, seed=5)
    foreign = store.write("Nordhafen Schritt fremd", trajectory="t", feedback="ok", success=True, namespace=OTHER,
                          provenance={"recalls": [team.recalls[-1].id, other.recalls[-1].id]})  # fmt: skip
    owner = {m.id: m.namespace for m in store.items()}
    stored = edges(store.url)
    assert stored and all(owner[c] == owner[p] == ns for c, p, ns in stored)
    assert {p for c, p, _ in stored if c == foreign.id} == set(other.recalls[-1].ids)  # not the other team's

    before = values(store, OTHER)
    store.reinforce_many([Reinforcement(r, 1.0) for r in team.recalls])
    assert values(store, OTHER) == before
    assert store.stats(TEAM)["q"]["mean"] != pytest.approx(store.stats(OTHER)["q"]["mean"])


def test_a_memory_recalled_from_the_shared_namespace_gets_no_edge_and_no_credit(open_store: Open) -> None:
    store = open_store(credit(2))
    shared = store.add("Kran Liegeplatz 4 Sicherheitsregel", "Wind über 60 km/h: Stopp", namespace=BASE, q=0.4)
    own = store.add("Kran Liegeplatz 4 Schichtplan", "Frühschicht ab 6 Uhr", namespace=TEAM, q=0.1)
    both = store.retrieve("Kran Liegeplatz 4", namespace=TEAM, shared=BASE, config=RetrievalConfig(k2=2, lam=0.0))
    assert set(both.ids) == {shared.id, own.id}
    child = store.write("Kranfahrt Liegeplatz 4 planen", trajectory="Plan", feedback="ok", success=True,
                        namespace=TEAM, provenance={"recalls": [both.id]})  # fmt: skip
    assert {(c, p) for c, p, _ in edges(store.url)} == {(child.id, own.id)}

    later = store.retrieve("Kranfahrt Liegeplatz 4 planen", namespace=TEAM, config=EXACT)
    assert later.ids == (child.id,)
    store.reinforce(later, 1.0)
    assert store.get(shared.id, namespace=BASE).q == 0.4 and store.get(shared.id, namespace=BASE).visits == 0
    assert store.get(own.id, namespace=TEAM).q == pytest.approx(0.1 + ALPHA * 0.5 * 0.9)


# -- recording edges -----------------------------------------------------------------------------------
def test_recording_the_same_rows_again_adds_no_edge(open_store: Open) -> None:
    store = open_store(credit(2))
    ids = worked_example(store)
    before = edges(store.url)
    d = store.get(ids["D"], namespace=TEAM)
    engine = create_engine(store.url)
    try:
        with engine.begin() as conn:
            assert record_context(conn, TEAM, [d.id], [dict(d.meta)]) == 0
    finally:
        engine.dispose()
    assert edges(store.url) == before
    again = store.write("Zollsiegel prüfen", trajectory="t", feedback="ok", success=True, namespace=TEAM,
                        provenance={"recalls": ["unbekannter-Abruf-0000", 7]}, id="Zürich-Nordhafen-Schritt-fest")  # fmt: skip
    store.write("Zollsiegel prüfen", trajectory="t", feedback="ok", success=True, namespace=TEAM,
                provenance={"recalls": ["unbekannter-Abruf-0000"]}, id=again.id)  # fmt: skip
    assert edges(store.url) == before  # unknown recalls name no parent; a known id is not written twice


def test_the_module_examples_run() -> None:
    assert doctest.testmod(memory.learn.provenance).failed == 0


def test_an_ancestor_evicted_since_is_skipped(open_store: Open) -> None:
    store = open_store(credit(2))
    ids = worked_example(store)
    assert store.remove([ids["A"]], namespace=TEAM) == 1
    recall = store.retrieve("Zollsiegel am Kühlcontainer prüfen", namespace=TEAM, config=EXACT)
    assert store.reinforce(recall, 1.0) == 1
    q = {k: store.get(v, namespace=TEAM).q for k, v in ids.items() if k != "A"}
    assert np.allclose([q["D"], q["C"], q["B"]], [0.44, 0.575, 0.815])


def test_the_loop_records_what_each_episode_recalled_as_provenance(tmp_path: Path) -> None:
    task = Task(id="rolltor — Zürich-Nordhafen Halle Süd", prompt="Welcher Code öffnet das Rolltor?", answer="4471")
    url = f"sqlite:///{tmp_path / 'loop.db'}"
    with MemoryStore(url, embedder=HashEmbedder(), config=credit(2)) as store:
        agent = Agent("solver", ChatClient(ScriptedChat(copying_reply)), memory=MemoryView(store))
        Evolver(Team([agent]), [task], memory=store, run="gate", progress=False).run(rounds=4)
        expected = {
            (m.id, parent)
            for m in store.items(agent.memory.namespace)  # type: ignore[union-attr]
            for r in m.meta["provenance"]["recalls"]
            for parent in store.explain(r, namespace=m.namespace)["selected"]
        }
    assert len(expected) >= 3 and {(c, p) for c, p, _ in edges(url)} == expected
