"""The versioned prompt graph: content addressing, HEAD moves, rollback, scores, rejections, diffs."""

from __future__ import annotations

import logging
import math
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from connectors import ConfigError, HashEmbedder, StoreError, Usage, make_engine
from evolve.prompts.graph import PromptGraph, PromptVersion, check_edges, prompt_versions, version_id
from evolve.serve.metrics import memory_sizes
from memory import MemoryStore
from optimizers.types import Version

SEED = {"solver.system": "You solve arithmetic.\nReply with the number only.", "solver.library": ""}
EDGES = [("planner", "solver", 1.0)]


@pytest.fixture(params=["file", "memory"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    return make_engine(f"sqlite:///{tmp_path / 'evolve.db'}" if request.param == "file" else "sqlite://")


@pytest.fixture
def graph(engine: Engine) -> PromptGraph:
    return PromptGraph(engine, "team")


def edit(version: PromptVersion, **changes: str) -> dict[str, str]:
    return {**version.nodes, **{f"solver.{part}": text for part, text in changes.items()}}


def test_head_before_init_says_to_call_init(graph: PromptGraph) -> None:
    with pytest.raises(StoreError, match=r"init\("):
        graph.head()


def test_init_stores_the_seed_as_head(graph: PromptGraph) -> None:
    seed = graph.init(SEED, EDGES)
    assert graph.head() == seed
    assert dict(seed.nodes) == SEED and seed.parents == () and seed.edges == (("planner", "solver", 1.0),)
    assert seed.message == "seed" and seed.mean_score is None
    assert graph.history() == [{"from": None, "to": seed.id, "reason": "init", "at": graph.history()[0]["at"]}]


def test_same_content_and_parents_is_the_same_version(graph: PromptGraph) -> None:
    seed = graph.init(SEED)
    a = graph.commit(edit(seed, system="Be exact."), parents=[seed.id], message="first")
    again = graph.commit(dict(reversed(list(edit(seed, system="Be exact.").items()))), parents=[seed.id])
    assert again.id == a.id and again.message == "first"
    assert len(graph.log()) == 2
    assert a.id == version_id(a.nodes, a.edges, (seed.id,))


def test_same_text_under_different_parents_is_a_different_version(graph: PromptGraph) -> None:
    seed = graph.init(SEED)
    a = graph.commit(edit(seed, system="Be exact."), parents=[seed.id])
    b = graph.commit(edit(seed, system="Be brief."), parents=[a.id])
    c = graph.commit(edit(seed, system="Be exact."), parents=[b.id])
    assert c.id != a.id and c.nodes == a.nodes
    assert [v.id for v in graph.log()] == [c.id, b.id, a.id, seed.id]


def test_edge_order_does_not_change_the_id() -> None:
    one = check_edges([("a", "b", 1.0), ("b", "c", 0.5)])
    other = check_edges([("b", "c", 0.5), ("a", "b")])
    assert one == other
    assert version_id(SEED, one, ()) == version_id(SEED, other, ())
    assert version_id(SEED, one, ()) != version_id(SEED, check_edges([("a", "b", 2.0), ("b", "c", 0.5)]), ())


def test_edges_default_to_the_first_parent_and_can_change(graph: PromptGraph) -> None:
    seed = graph.init(SEED, EDGES)
    kept = graph.commit(edit(seed, system="Be exact."), parents=[seed.id])
    rewired = graph.commit(kept.nodes, parents=[kept.id], edges=[("planner", "solver", 0.5)])
    assert kept.edges == seed.edges
    assert rewired.edges == (("planner", "solver", 0.5),) and rewired.id != kept.id


def test_merge_has_two_parents_and_rolls_back_to_the_first(graph: PromptGraph) -> None:
    seed = graph.init(SEED)
    left = graph.commit(edit(seed, system="Left."), parents=[seed.id], move_head=False)
    right = graph.commit(edit(seed, library="- when asked twice, answer once"), parents=[seed.id])
    merged = graph.commit(
        {"solver.system": "Left.", "solver.library": right.nodes["solver.library"]}, parents=[left.id, right.id]
    )
    assert merged.parents == (left.id, right.id)
    assert graph.head().id == merged.id
    assert graph.rollback().id == left.id
    swapped = graph.commit(merged.nodes, parents=[right.id, left.id], move_head=False)
    assert swapped.id != merged.id


def test_move_head_false_keeps_head(graph: PromptGraph) -> None:
    seed = graph.init(SEED)
    side = graph.commit(edit(seed, system="Side branch."), parents=[seed.id], move_head=False)
    assert graph.head().id == seed.id
    assert graph.get(side.id).nodes["solver.system"] == "Side branch."


def test_rollback_restores_the_exact_earlier_text_and_records_the_move(graph: PromptGraph) -> None:
    tricky = "Réponds en français.\r\nTabs\tand trailing spaces   \n\n  ∑ ✓ \U0001f600\n"
    seed = graph.init({"solver.system": tricky, "solver.library": "- when x, do y\n"})
    newer = graph.commit({"solver.system": "Reply in English.", "solver.library": "- keep"}, parents=[seed.id])
    back = graph.rollback()
    assert back.id == seed.id == graph.head().id
    assert graph.head().nodes["solver.system"].encode("utf-8") == tricky.encode("utf-8")
    assert graph.checkout(seed.id) == {"solver.system": tricky, "solver.library": "- when x, do y\n"}
    moves = graph.history()
    assert [(m["from"], m["to"], m["reason"]) for m in moves] == [
        (newer.id, seed.id, "rollback"),
        (seed.id, newer.id, "commit"),
        (None, seed.id, "init"),
    ]
    assert graph.get(newer.id).nodes["solver.system"] == "Reply in English."  # nothing was deleted


def test_rollback_to_any_version_and_forward_again(graph: PromptGraph) -> None:
    seed = graph.init(SEED)
    a = graph.commit(edit(seed, system="A."), parents=[seed.id])
    b = graph.commit(edit(seed, system="B."), parents=[a.id])
    assert graph.rollback(seed.id[:6]).id == seed.id
    assert graph.rollback(b.id, reason="redo").id == b.id
    assert graph.history(limit=1)[0] | {"at": 0} == {"from": seed.id, "to": b.id, "reason": "redo", "at": 0}


def test_rollback_at_the_seed_errors_and_keeps_head(graph: PromptGraph) -> None:
    seed = graph.init(SEED)
    with pytest.raises(StoreError, match="seed"):
        graph.rollback()
    assert graph.head().id == seed.id and len(graph.history()) == 1


def test_commit_with_an_unknown_parent_stores_nothing(graph: PromptGraph) -> None:
    seed = graph.init(SEED)
    with pytest.raises(StoreError, match="unknown version"):
        graph.commit(edit(seed, system="X."), parents=["0123456789abcdef"])
    with pytest.raises(StoreError, match="unknown version"):
        graph.commit(edit(seed, system="X."), parents=[seed.id, "not-an-id"])
    assert [v.id for v in graph.log()] == [seed.id] and graph.head().id == seed.id


def test_set_scores_merges_and_a_new_measurement_wins(graph: PromptGraph) -> None:
    seed = graph.init(SEED)
    v = graph.commit(edit(seed, system="X."), parents=[seed.id], scores={"t1": 1.0, "t2": 0.0})
    merged = graph.set_scores(v.id[:8], {"t2": 0.5, "t3": 1})
    assert dict(merged.scores) == {"t1": 1.0, "t2": 0.5, "t3": 1.0}
    assert merged.mean_score == pytest.approx(2.5 / 3)
    assert dict(graph.get(v.id).scores) == dict(merged.scores)
    assert graph.get(seed.id).scores == {}  # scores belong to one version
    again = graph.commit(edit(seed, system="X."), parents=[seed.id], scores={"t4": 0.0})
    assert again.id == v.id and set(again.scores) == {"t1", "t2", "t3", "t4"}


def test_usage_and_message_are_stored(graph: PromptGraph) -> None:
    seed = graph.init(SEED)
    spent = Usage(prompt_tokens=1200, completion_tokens=300, cost=0.0125)
    v = graph.commit(edit(seed, system="X."), parents=[seed.id], usage=spent, message="critique: be exact")
    assert graph.get(v.id).usage == spent and graph.get(v.id).message == "critique: be exact"


def test_rejected_is_newest_first_and_limited(graph: PromptGraph) -> None:
    seed = graph.init(SEED)
    for i in range(7):
        graph.reject(edit(seed, system=f"Try {i}."), parent=seed.id, reason=f"no gain {i}", scores={"t1": 0.0})
    got = graph.rejected()
    assert [reason for _, reason in got] == [f"no gain {i}" for i in (6, 5, 4, 3, 2)]
    assert got[0][0]["solver.system"] == "Try 6."
    assert len(graph.rejected(limit=2)) == 2 and len(graph.rejected(limit=50)) == 7
    assert len(graph.log()) == 1 and graph.head().id == seed.id  # a rejection is not a version
    graph.reject({"solver.system": ""}, parent=seed.id, reason="the rewrite came back empty")
    assert graph.rejected(limit=1) == [({"solver.system": ""}, "the rewrite came back empty")]
    with pytest.raises(StoreError):
        graph.reject(SEED, parent="abcdef12", reason="x")


def test_log_is_newest_first_and_versions_are_what_optimizers_see(graph: PromptGraph) -> None:
    seed = graph.init(SEED)
    a = graph.commit(edit(seed, system="A."), parents=[seed.id], scores={"t1": 1.0})
    b = graph.commit(edit(seed, system="B."), parents=[a.id])
    assert [v.id for v in graph.log()] == [b.id, a.id, seed.id]
    assert [v.id for v in graph.log(limit=2)] == [b.id, a.id]
    seen = graph.versions()
    assert all(isinstance(v, Version) for v in seen)
    assert [v.id for v in seen] == [seed.id, a.id, b.id]
    assert seen[1].candidate["solver.system"] == "A." and seen[1].mean == 1.0


def test_diff_names_the_component_and_the_short_ids(graph: PromptGraph) -> None:
    seed = graph.init({"solver.system": "line one\nline two\n", "solver.library": "- keep\n"}, EDGES)
    v = graph.commit({"solver.system": "line one\nline 2\n", "solver.library": "- keep\n"}, parents=[seed.id], edges=[])
    out = graph.diff(seed.id, v.id)
    assert f"--- solver.system @ {seed.id[:8]}" in out and f"+++ solver.system @ {v.id[:8]}" in out
    assert "-line two" in out and "+line 2" in out and " line one" in out
    assert "solver.library" not in out
    assert "-planner -> solver 1" in out  # the edge that went away
    assert graph.diff(v.id, v.id) == ""


def test_diff_shows_a_change_of_final_newline(graph: PromptGraph) -> None:
    seed = graph.init({"solver.system": "same"})
    v = graph.commit({"solver.system": "same\n"}, parents=[seed.id])
    assert "solver.system" in graph.diff(seed.id, v.id)


def test_init_is_idempotent_across_a_reopen(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = f"sqlite:///{tmp_path / 'evolve.db'}"
    first = PromptGraph(make_engine(url), "team")
    seed = first.init(SEED, EDGES)
    evolved = first.commit(edit(seed, system="Evolved."), parents=[seed.id])
    reopened = PromptGraph(make_engine(url), "team")
    with caplog.at_level(logging.WARNING, logger="evolve.prompts.graph"):
        assert reopened.init(SEED, EDGES).id == evolved.id
    assert not caplog.records
    assert reopened.head().nodes["solver.system"] == "Evolved."
    assert len(reopened.history()) == 2  # the second init moved nothing
    with caplog.at_level(logging.WARNING, logger="evolve.prompts.graph"):
        assert reopened.init({"solver.system": "A new seed."}).id == evolved.id
    assert "seed differs" in caplog.text


def test_graphs_in_one_database_are_independent(engine: Engine) -> None:
    a, b = PromptGraph(engine, "a"), PromptGraph(engine, "b")
    sa, sb = a.init(SEED), b.init(SEED)
    assert sa.id == sb.id  # same content, same address, two graphs
    a.commit(edit(sa, system="Only in a."), parents=[sa.id])
    assert len(a.log()) == 2 and len(b.log()) == 1 and b.head().id == sb.id
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(prompt_versions)).scalar() == 3


def test_lookup_by_prefix_unknown_and_ambiguous(graph: PromptGraph) -> None:
    seed = graph.init(SEED)
    made = [seed] + [graph.commit(edit(seed, system=f"V{i}."), parents=[seed.id]) for i in range(16)]
    assert graph.get(made[3].id[:7]).id == made[3].id
    assert graph.get(made[3].id.upper()).id == made[3].id
    firsts = [v.id[0] for v in made]
    shared = next(c for c in firsts if firsts.count(c) > 1)  # 17 ids, 16 hex digits
    with pytest.raises(StoreError, match="ambiguous"):
        graph.get(shared)
    for bad in ("ffffffffffffffff0", "xyz", "", "%"):
        with pytest.raises(StoreError, match="unknown"):
            graph.get(bad)
    with pytest.raises(ConfigError):
        graph.get(12)  # type: ignore[arg-type]


def test_stored_versions_cannot_be_mutated(graph: PromptGraph) -> None:
    seed = graph.init(SEED)
    with pytest.raises(TypeError):
        seed.nodes["solver.system"] = "changed"  # type: ignore[index]
    copy = graph.checkout(seed.id)
    copy["solver.system"] = "changed"  # type: ignore[index]
    assert graph.head().nodes["solver.system"] == SEED["solver.system"]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda g, s: g.set_scores(s.id, {"t1": math.nan}), "finite"),
        (lambda g, s: g.commit(edit(s, system="X."), parents=[s.id], scores={"t1": math.inf}), "finite"),
        (lambda g, s: g.set_scores(s.id, {"t1": "0.5"}), "finite"),
        (lambda g, s: g.set_scores(s.id, {"t1": True}), "finite"),
        (lambda g, s: g.set_scores(s.id, [("t1", 1.0)]), "map example ids"),
        (lambda g, s: g.commit(edit(s, system=""), parents=[s.id]), "empty"),
        (lambda g, s: g.commit(edit(s, system="  \n"), parents=[s.id]), "empty"),
        (lambda g, s: g.commit({**s.nodes, "solver.system": 3}, parents=[s.id]), "must hold a str"),
        (lambda g, s: g.commit({**s.nodes, "system": "X."}, parents=[s.id], allow_new=True), "<agent>.<part>"),
        (lambda g, s: g.commit({"solver.system": "X."}, parents=[s.id]), "missing"),
        (lambda g, s: g.commit({**s.nodes, "critic.system": "X."}, parents=[s.id]), "allow_new"),
        (lambda g, s: g.commit(edit(s, system="X."), parents=s.id), "parents"),
        (lambda g, s: g.commit(edit(s, system="X."), parents=[]), "parents"),
        (lambda g, s: g.commit(edit(s, system="X."), parents=[s.id, s.id]), "distinct"),
        (lambda g, s: g.commit(edit(s, system="X."), parents=[s.id], edges=[("a", "b"), ("a", "b", 2.0)]), "twice"),
        (lambda g, s: g.commit(edit(s, system="X."), parents=[s.id], edges=[("a", "b", math.nan)]), "finite"),
        (lambda g, s: g.commit(edit(s, system="X."), parents=[s.id], edges=["ab"]), "edge"),
        (lambda g, s: g.commit(edit(s, system="X."), parents=[s.id], usage=12), "Usage"),
        (lambda g, s: g.commit(["solver.system"], parents=[s.id]), "mapping"),
        (lambda g, s: g.reject(s.nodes, parent=s.id, reason=""), "reason"),
        (lambda g, s: g.rejected(limit=-1), "limit"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(graph: PromptGraph, call: object, match: str) -> None:
    seed = graph.init(SEED)
    with pytest.raises(ConfigError, match=match):
        call(graph, seed)  # type: ignore[operator]
    assert [v.id for v in graph.log()] == [seed.id] and graph.head().scores == {}
    assert graph.rejected() == []


def test_new_components_need_allow_new_and_an_empty_library_is_fine(graph: PromptGraph) -> None:
    seed = graph.init({"solver.system": "Solve."})
    grown = graph.commit({"solver.system": "Solve.", "solver.library": ""}, parents=[seed.id], allow_new=True)
    assert grown.nodes["solver.library"] == ""
    with pytest.raises(ConfigError, match="name"):
        PromptGraph(graph.engine, "")


def test_two_processes_committing_keep_head_and_its_history_consistent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    graph = PromptGraph(make_engine(url), "team")
    graph.init({"solver.system": "Start."})
    worker = textwrap.dedent(
        f"""
        import sys
        from connectors import StoreError, make_engine
        from evolve.prompts.graph import PromptGraph
        graph = PromptGraph(make_engine({url!r}), "team")
        for i in range(15):
            head = graph.head()
            graph.commit({{"solver.system": f"{{sys.argv[1]}} {{i}}"}}, parents=[head.id])
            if i % 5 == 4:
                try:
                    graph.rollback()
                except StoreError:  # the other process rolled HEAD back to the seed just now
                    pass
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", worker, name]) for name in ("p", "q")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    moves = list(reversed(graph.history()))
    assert [m["reason"] for m in moves].count("commit") == 30
    for before, after in zip(moves, moves[1:], strict=False):
        assert after["from"] == before["to"]  # every move started where the previous one ended
    assert graph.head().id == moves[-1]["to"]
    assert len(graph.log()) == 1 + 30


def test_reads_do_not_queue_behind_another_process_writing(tmp_path: Path) -> None:
    """A served request reads HEAD, a scrape counts memories, a job reads its run: none of them waits while
    another process holds SQLite's write lock (before, each read began IMMEDIATE and waited up to 30 s)."""
    path = tmp_path / "Nachtschicht – Zürich store.db"
    engine = make_engine(f"sqlite:///{path}")
    graph = PromptGraph(engine, "night shift codes for the Zürich warehouse")
    head = graph.init(SEED, EDGES)
    MemoryStore(f"sqlite:///{path}", embedder=HashEmbedder(16)).close()  # the memory tables, empty
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # as a job or another server mid-write
    read: dict[str, object] = {}
    reader = threading.Thread(
        target=lambda: read.update(
            head=graph.head_id(), log=len(graph.log()), sizes=memory_sizes(engine, tenants=False)
        )
    )
    try:
        reader.start()
        reader.join(timeout=10)
        assert not reader.is_alive() and read == {"head": head.id, "log": 1, "sizes": {}}
    finally:
        writer.execute("ROLLBACK")
        reader.join()
        writer.close()
