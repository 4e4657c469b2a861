"""Strategies in the store: consolidation writes them with their own Q, recall draws from the kinds a view
asks for, and a consolidation killed midway leaves no half-written strategy (issue 24, items 1 and 5)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import memory.upkeep.strategies
from connectors.embedders import HashEmbedder
from connectors.errors import ConfigError
from connectors.fakes import ScriptedChat
from memory import MemoryConfig, MemoryStore, RetrievalConfig
from memory.config import DrawFrom
from memory.storage.records import MemoryItem
from memory.upkeep.strategies import source_q, sources_of

TENANT = "Zürich-Nordhafen-Logistik-Team-07/Türcodes"
OTHER = "Équipe-Marseille-Vieux-Port-Entrepôt-Sud-12/solver"
DOOR = "What is the door code of the north storage room?"
BADGE = "Which visitor badge colour does the Quartz laboratory use?"
EMBEDDER = HashEmbedder(dim=64)
REPLY = "Title: North door\nApplies when: asked for the north door code\nDo: answer 4471\nAvoid: 1234"


def attempts(store: MemoryStore, task: str, answers: list[str], right: str, namespace: str = TENANT) -> None:
    for a in answers:
        ok = a == right
        feedback = "correct" if ok else f"wrong: the answer is {right}"
        store.write(task, trajectory=f"Answer given: {a}", feedback=feedback, success=ok, namespace=namespace)


def strategies_of(store: MemoryStore, namespace: str = TENANT, *, valid: bool = True) -> list:
    return [i for i in store.items(namespace, include_superseded=not valid) if i.kind == "strategy"]


def view(store: MemoryStore, draw_from: DrawFrom, namespace: str = TENANT, query: str = DOOR) -> list[str]:
    recall = store.retrieve(query, namespace=namespace, config=RetrievalConfig(k1=10, k2=5, draw_from=draw_from))
    return [i.kind for i in recall.items]


def test_one_strategy_per_group_with_its_sources_linked_and_recalled_as_each_view_says() -> None:
    with MemoryStore("sqlite://", embedder=EMBEDDER) as store:
        attempts(store, DOOR, ["4471", "1234", "4471"], "4471")
        attempts(store, BADGE, ["blue", "green"], "green")  # 2 < min_size: no strategy
        report = store.consolidate(TENANT)
        assert (report.groups, len(report.written), report.unchanged, report.skipped) == (1, 1, 0, 0)
        [s] = strategies_of(store)
        assert s.id == report.written[0] and s.q == 0.0 and s.visits == 0 and s.success is None
        assert 'Do: answer "4471"' in s.experience  # failures keep their feedback, not the wrong answer
        episodes = [i.id for i in store.items(TENANT) if i.kind == "episode" and i.intent == DOOR]
        assert sorted(s.meta["sources"]) == sorted(episodes)
        assert sorted(store._open.read(lambda c: sources_of(c, [s.id]))[s.id]) == sorted(episodes)
        assert view(store, "both") == ["strategy", "episode", "episode", "episode", "episode"]  # 5th: a badge one
        assert view(store, "episodes") == ["episode"] * 5
        assert view(store, "strategies") == ["strategy"]
        assert view(store, "strategies", query=BADGE) == ["strategy"]  # the only one there is, however far


def test_a_strategy_learns_its_own_q_and_hands_it_over_when_its_group_changes() -> None:
    llm = ScriptedChat([REPLY, REPLY])
    with MemoryStore("sqlite://", embedder=EMBEDDER, config=MemoryConfig(alpha=0.5)) as store:
        attempts(store, DOOR, ["4471", "4471", "1234"], "4471")
        first = store.consolidate(TENANT, llm=llm).written[0]
        recall = store.retrieve(DOOR, namespace=TENANT, config=RetrievalConfig(k2=1, draw_from="strategies"))
        store.reinforce(recall, 1.0)
        assert store.get(first, namespace=TENANT).q == pytest.approx(0.5)
        again = store.consolidate(TENANT, llm=llm)
        assert again.written == [] and again.unchanged == 1 and len(llm.calls) == 1  # same episodes: no call
        attempts(store, DOOR, ["4471"], "4471")
        changed = store.consolidate(TENANT, llm=llm)
        assert len(llm.calls) == 2 and changed.replaced == {first: changed.written[0]}
        old, new = store.get(first, namespace=TENANT), store.get(changed.written[0], namespace=TENANT)
        assert not old.valid and old.superseded_by == new.id
        assert (new.q, new.visits) == (pytest.approx(0.5), 1) and new.experience.startswith("Strategy: North door")
        assert [s.id for s in strategies_of(store)] == [new.id]
        assert view(store, "strategies") == ["strategy"]  # the superseded one left recall


def rewarded_door_episodes(store: MemoryStore) -> list[MemoryItem]:
    """Three door episodes with different Q and visits: one recalled alone twice and rewarded, then all
    three recalled together and failed (Q, visits: -0.125, 3 and -0.5, 1 twice with α = 0.5)."""
    attempts(store, DOOR, ["4471", "4471", "1234"], "4471")
    alone = RetrievalConfig(k2=1, draw_from="episodes")
    for _ in range(2):
        store.reinforce(store.retrieve(DOOR, namespace=TENANT, config=alone), 1.0)
    store.reinforce(store.retrieve(DOOR, namespace=TENANT, config=RetrievalConfig(k2=3, draw_from="episodes")), -1.0)
    return [i for i in store.items(TENANT) if i.kind == "episode"]


@pytest.mark.parametrize("start", ["q_init", "sources"])
def test_a_first_strategy_starts_as_configured_and_a_refined_one_at_its_predecessors_q(start: str) -> None:
    config = MemoryConfig(alpha=0.5, strategy_start=start)  # type: ignore[arg-type]
    with MemoryStore("sqlite://", embedder=EMBEDDER, config=config) as store:
        sources = rewarded_door_episodes(store)
        assert sorted((round(i.q, 4), i.visits) for i in sources) == [(-0.5, 1), (-0.5, 1), (-0.125, 3)]
        store.consolidate(TENANT)
        [s] = strategies_of(store)
        # sources: the visit-weighted mean (-0.125·3 − 0.5 − 0.5) / 5, not the plain mean -0.375
        assert (s.q, s.visits) == ((pytest.approx(-0.275), 0) if start == "sources" else (0.0, 0))
        best = RetrievalConfig(k2=1, draw_from="strategies")
        store.reinforce(store.retrieve(DOOR, namespace=TENANT, config=best), 1.0)
        earned = store.get(s.id, namespace=TENANT).q
        attempts(store, DOOR, ["4471"], "4471")
        [new] = store.consolidate(TENANT).written
        assert (store.get(new, namespace=TENANT).q, store.get(new, namespace=TENANT).visits) == (earned, 1)


def test_source_q_weights_each_episode_by_its_visits_and_falls_back_to_the_plain_mean() -> None:
    def episode(q: float, visits: int) -> MemoryItem:
        return MemoryItem(f"m{q}-{visits}", TENANT, DOOR, "Answer given: 4471", q, visits, 0.0, {})

    rng = np.random.default_rng(7)
    for n in (1, 2, 5, 12):
        items = [episode(float(q), int(v)) for q, v in zip(rng.uniform(-1, 1, n), rng.integers(0, 6, n), strict=True)]
        total = sum(i.visits for i in items)
        loop = sum(i.q * i.visits for i in items) / total if total else sum(i.q for i in items) / n
        assert source_q(items, q_init=0.25) == pytest.approx(loop)
    assert source_q([episode(0.9, 0), episode(-0.4, 2)], q_init=0.0) == pytest.approx(-0.4)  # Q written, never used
    assert source_q([episode(0.2, 0), episode(0.6, 0)], q_init=0.0) == pytest.approx(0.4)
    assert source_q([], q_init=0.25) == 0.25


def test_on_equal_similarity_a_strategy_is_not_crowded_out_by_its_own_episodes() -> None:
    with MemoryStore("sqlite://", embedder=EMBEDDER) as store:
        attempts(store, DOOR, ["4471"] * 14, "4471")
        store.consolidate(TENANT)
        recall = store.retrieve(DOOR, namespace=TENANT, config=RetrievalConfig(k1=10, k2=3))
        assert [i.kind for i in recall.items] == ["strategy", "episode", "episode"]


def test_namespaces_are_consolidated_apart_and_a_file_store_keeps_kinds_and_links(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lager speicher.db'}"
    with MemoryStore(url, embedder=EMBEDDER) as store:
        attempts(store, DOOR, ["4471"] * 3, "4471")
        attempts(store, DOOR, ["9090"] * 4, "9090", namespace=OTHER)
        assert len(store.consolidate(TENANT).written) == 1
        assert strategies_of(store, OTHER) == []
        store.consolidate(OTHER)
        [s_other] = strategies_of(store, OTHER)
        assert "9090" in s_other.experience
        store.export(tmp_path / "export.jsonl", namespace=OTHER)
    with MemoryStore(url, embedder=EMBEDDER) as store:
        [s] = strategies_of(store)
        assert "4471" in s.experience and view(store, "strategies") == ["strategy"]
        assert store.consolidate(TENANT).unchanged == 1
    with MemoryStore("sqlite://", embedder=EMBEDDER) as fresh:
        assert fresh.import_(tmp_path / "export.jsonl") == 5
        assert [i.kind for i in strategies_of(fresh, OTHER)] == ["strategy"]


def test_bad_arguments_are_refused() -> None:
    with MemoryStore("sqlite://", embedder=EMBEDDER) as store:
        with pytest.raises(ConfigError, match="min_size"):
            store.consolidate(TENANT, min_size=0)
        with pytest.raises(ConfigError, match="draw_from"):
            RetrievalConfig(draw_from="lessons")  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=r"strategy_start must be one of \('q_init', 'sources'\), got 'mean'"):
            MemoryConfig(strategy_start="mean")  # type: ignore[arg-type]
        assert store.consolidate("nothing-here").groups == 0


KILLED = textwrap.dedent(
    """
    import os, signal, sys
    import memory.upkeep.strategies
    from connectors.embedders import HashEmbedder
    from memory import MemoryStore
    real = memory.upkeep.strategies.link_sources
    def die(conn, namespace, sources):
        real(conn, namespace, sources)  # the strategies and their links are written, not committed
        os.kill(os.getpid(), signal.SIGKILL)
    memory.upkeep.strategies.link_sources = die
    store = MemoryStore(sys.argv[1], embedder=HashEmbedder(dim=64))
    store.consolidate(sys.argv[2])
    """
)


def test_a_consolidation_killed_before_its_commit_leaves_nothing_and_a_rerun_completes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    with MemoryStore(url, embedder=EMBEDDER) as store:
        for i in range(30):  # thirty groups written in one transaction
            attempts(store, f"{DOOR} (room {i})", [str(1000 + i)] * 3, str(1000 + i))
    env = {**os.environ, "PYTHONPATH": str(Path(memory.upkeep.strategies.__file__).parents[2])}
    done = subprocess.run([sys.executable, "-c", KILLED, url, TENANT], env=env, capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    with MemoryStore(url, embedder=EMBEDDER) as store:
        assert strategies_of(store, valid=False) == []
        ids = [i.id for i in store.items(TENANT)]
        assert store._open.read(lambda c: sources_of(c, ids)) == {}
        report = store.consolidate(TENANT)
        assert report.groups >= 20 and len(report.written) == report.groups
        assert store.consolidate(TENANT).unchanged == report.groups
        assert len(strategies_of(store)) == report.groups
