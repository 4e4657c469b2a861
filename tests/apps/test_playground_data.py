"""What the playground shows, as plain rows (apps.playground_data), and how `evolve playground` starts it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from apps import playground_data as data
from apps.playground_cli import (
    DEFAULT_SPEC,
    SCRIPT,
    add_playground_parser,
    cmd_playground,
    script_args,
    streamlit_argv,
)
from connectors import ConfigError, HashEmbedder
from evolve import RoundMetrics
from evolve.serve.feedback import FeedbackReceipt
from memory import MemoryItem, MemoryStore, RetrievalConfig


def item(id: str, intent: str, q: float, *, success: bool | None = None, ns: str = "run/solver") -> MemoryItem:
    return MemoryItem(id, ns, intent, f"experience of {intent}", q, 1, 0.0, {"success": success})


def test_feedback_notes_say_what_moved_or_that_it_was_a_repeat() -> None:
    assert data.feedback_note(FeedbackReceipt("r", "r:k", True, 2, 1.0)) == (
        "rated good: reinforced 2 memories (Q moved toward +1)"
    )
    assert "reinforced 1 memory " in data.feedback_note(FeedbackReceipt("r", "r:k", True, 1, -1.0))
    assert "no memories were recalled" in data.feedback_note(FeedbackReceipt("r", "r:k", True, 0, -1.0))
    assert data.feedback_note(FeedbackReceipt("r", "r:k", False, 0, 1.0)).startswith("already rated")


def test_why_rows_come_from_a_real_recall_selected_first_then_by_score() -> None:
    with MemoryStore("sqlite://", embedder=HashEmbedder()) as store:
        near = store.add("harbor warehouse door code", "4471", q=0.5)
        also = store.add("harbor warehouse alarm code", "3471")
        far = store.add("lunch menu today", "soup")
        recall = store.retrieve("harbor warehouse door code", config=RetrievalConfig(k2=1, delta=0.2))
        explanation = store.explain(recall.id)
        rows = data.why_rows(explanation, {i.id: i for i in store.items()})
    assert [r["id"] for r in rows][0] == near.id and rows[0]["verdict"] == "selected #1"
    by_id = {r["id"]: r for r in rows}
    assert by_id[far.id]["verdict"] == "filtered: similarity ≤ δ" and rows[-1]["id"] == far.id
    assert by_id[also.id]["verdict"] == "not selected"
    assert by_id[near.id]["Q"] == 0.5 and by_id[near.id]["similarity"] == pytest.approx(1.0)
    assert by_id[near.id]["memory"] == "harbor warehouse door code"
    assert "3 candidates, 2 above δ, 1 selected" in data.recall_summary(explanation)


def candidate(id: str, score: float | None, *, rank: int | None = None, filtered: bool = False) -> dict:
    return {"id": id, "sim": 0.5, "q": 0.0, "z_sim": 0.0, "z_q": 0.0, "score": score, "filtered": filtered,
            "selected": rank is not None, "rank": rank}  # fmt: skip


def test_why_rows_list_the_selection_in_its_order_even_when_exploration_picked_low_scores() -> None:
    explanation = {
        "candidates": [
            candidate("pool", 0.9),
            candidate("second", 0.1, rank=1),
            candidate("first", 0.2, rank=0),
            candidate("below-delta", None, filtered=True),
            candidate("pool-low", -0.5),
        ]
    }
    rows = data.why_rows(explanation, {"first": item("first", "harbor door", 0.4)})
    assert [r["id"] for r in rows] == ["first", "second", "pool", "pool-low", "below-delta"]
    assert (rows[0]["memory"], rows[0]["Q now"]) == ("harbor door", 0.4)
    assert (rows[1]["memory"], rows[1]["Q now"]) == ("(evicted)", None)  # gone from the store since


def test_memory_filters_combine_and_the_defaults_keep_everything() -> None:
    rows = data.memory_rows(
        [
            item("a", "Harbor door", 0.6, success=True),
            item("b", "Summit alarm", -0.4, success=False),
            item("c", "Lunch", 0.1),
            item("d", "Harbor alarm", 0.3, success=True, ns="run/critic"),
        ]
    )
    assert [r["id"] for r in rows] == ["a", "d", "c", "b"]  # highest Q first
    assert data.filter_rows(rows, data.MemoryFilter()) == rows
    assert [r["id"] for r in data.filter_rows(rows, data.MemoryFilter(text="harbor"))] == ["a", "d"]
    assert [r["id"] for r in data.filter_rows(rows, data.MemoryFilter(text="EXPERIENCE OF lunch"))] == ["c"]
    assert [r["id"] for r in data.filter_rows(rows, data.MemoryFilter(min_q=0.1))] == ["a", "d", "c"]
    assert [r["id"] for r in data.filter_rows(rows, data.MemoryFilter(outcome="failures"))] == ["b"]
    both = data.MemoryFilter(text="harbor", outcome="successes", namespace="run/critic")
    assert [r["id"] for r in data.filter_rows(rows, both)] == ["d"]
    with pytest.raises(ConfigError, match="outcome must be one of"):
        data.MemoryFilter(outcome="wins")  # type: ignore[arg-type]


def test_q_histogram_counts_every_value_once_on_fixed_edges() -> None:
    values = [-1.0, -0.95, 0.0, 0.0, 0.3, 1.0]
    bins = data.q_histogram(values, bins=4)
    assert [(b["from"], b["to"]) for b in bins] == [(-1.0, -0.5), (-0.5, 0.0), (0.0, 0.5), (0.5, 1.0)]
    assert [b["count"] for b in bins] == [2, 0, 3, 1]  # half-open bins, the last one closed
    assert sum(b["count"] for b in data.q_histogram([], bins=5)) == 0
    wide = data.q_histogram([-2.0, 2.0], bins=2)  # values outside [-1, 1] widen the edges
    assert (wide[0]["from"], wide[-1]["to"], [b["count"] for b in wide]) == (-2.0, 2.0, [1, 1])
    with pytest.raises(ConfigError):
        data.q_histogram([0.0], bins=0)


def test_curves_and_round_rows_keep_every_run_and_round() -> None:
    curves = {
        "a": [RoundMetrics(1, 4, 0.25, 0.2, 0, 10, 0.0, 1.0), RoundMetrics(2, 4, 0.5, 0.4, 0, 10, 0.0, 1.0)],
        "b": [RoundMetrics(1, 4, 0.75, 0.6, 0, 10, 0.0, 1.0)],
    }
    assert data.curve_rows(curves) == [
        {"run": "a", "round": 1, "success_rate": 0.25},
        {"run": "a", "round": 2, "success_rate": 0.5},
        {"run": "b", "round": 1, "success_rate": 0.75},
    ]
    assert data.curve_rows(curves, metric="tokens")[0]["tokens"] == 10
    with pytest.raises(ConfigError, match="unknown round metric"):
        data.curve_rows(curves, metric="accuracy")
    rows = data.round_rows(curves["a"])
    assert [r["round"] for r in rows] == [1, 2] and list(rows[0]) == list(data.ROUND_COLUMNS)
    assert data.default_runs(["a", "b"], "b") == ["b"] and data.default_runs(["a", "b"], "c") == ["a", "b"]


def test_version_rows_mark_head() -> None:
    from connectors import make_engine
    from evolve import PromptGraph

    graph = PromptGraph(make_engine("sqlite://"), "g")
    seed = graph.init({"solver.system": "one"})
    newer = graph.commit({"solver.system": "two"}, parents=[seed.id], scores={"x": 1.0, "y": 0.0}, message="two")
    graph.rollback(seed.id)
    rows = data.version_rows(graph.log(), graph.head().id)
    assert [(r["HEAD"], r["version"], r["validation"]) for r in rows] == [
        ("", newer.id[:12], 0.5),
        ("●", seed.id[:12], None),
    ]
    assert data.version_label(seed, seed.id).endswith("(HEAD) · seed")


def test_the_script_reads_argv_then_the_environment_then_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert script_args([]).spec == DEFAULT_SPEC and DEFAULT_SPEC.is_file()
    monkeypatch.setenv("EVOLVE_PLAYGROUND_SPEC", "from-env.toml")
    monkeypatch.setenv("EVOLVE_PLAYGROUND_TENANT", "acme")
    assert (script_args(["-q", "tests/x.py"]).spec, script_args([]).tenant) == (Path("from-env.toml"), "acme")
    args = script_args(["--spec", "given.toml", "--tenant", "bob", "--db", "sqlite://"])
    assert (args.spec, args.tenant, args.db) == (Path("given.toml"), "bob", "sqlite://")
    assert script_args(["--spe", "abbreviated.toml"]).spec == Path("from-env.toml")  # no prefix matching


def test_the_command_serves_the_script_headless_on_localhost() -> None:
    argv = streamlit_argv(Path("/specs/a.toml"), port=8600, tenant="acme", db="sqlite:///x.db")
    assert argv[1:5] == ["-m", "streamlit", "run", str(SCRIPT)] and SCRIPT.is_file()
    options = dict(zip(argv[5 : argv.index("--") : 2], argv[6 : argv.index("--") : 2], strict=True))
    assert options["--server.headless"] == "true" and options["--server.port"] == "8600"
    assert options["--server.address"] == "127.0.0.1" and options["--browser.gatherUsageStats"] == "false"
    assert argv[argv.index("--") + 1 :] == ["--spec", "/specs/a.toml", "--tenant", "acme", "--db", "sqlite:///x.db"]

    p = argparse.ArgumentParser()
    add_playground_parser(p.add_subparsers(dest="command"))
    args = p.parse_args(["playground", "--port", "9000"])
    assert (args.spec, args.port, args.host, args.func) == (None, 9000, "127.0.0.1", cmd_playground)


def test_the_command_refuses_a_bad_spec_or_tenant_before_starting_streamlit(tmp_path: Path) -> None:
    base = {"port": 8501, "host": "127.0.0.1", "tenant": None, "db": None}
    with pytest.raises(ConfigError, match="does not exist"):
        cmd_playground(argparse.Namespace(spec=tmp_path / "missing.toml", **base))
    with pytest.raises(ConfigError, match="tenant name"):
        cmd_playground(argparse.Namespace(spec=DEFAULT_SPEC, **{**base, "tenant": "two words"}))


def test_the_memory_table_shows_each_memorys_kind_and_whether_a_newer_one_superseded_it() -> None:
    from dataclasses import replace

    old = replace(item("old", "Harbor door", 0.5), valid_to=2.0, superseded_by="new")
    strategy = replace(item("s", "Harbor door", 0.2), kind="strategy")
    rows = {r["id"]: r for r in data.memory_rows([old, item("new", "Harbor door", 0.1), strategy])}
    assert (rows["old"]["kind"], rows["old"]["state"]) == ("episode", "superseded by new")
    assert (rows["new"]["state"], rows["s"]["kind"], rows["s"]["state"]) == ("valid", "strategy", "valid")
    explanation = {"candidates": [{"id": "old", "selected": True, "rank": 0, "filtered": False, "sim": 0.9,
                                   "q": 0.5, "z_sim": 0.0, "z_q": 0.0, "score": 0.0, "superseded": True,
                                   "superseded_by": "new"}]}  # fmt: skip
    [why] = data.why_rows(explanation, {"old": old})
    assert why["verdict"] == "selected #1 (superseded since by new)"
