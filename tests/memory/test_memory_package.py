"""The package's public face: a tested ``__all__``, imports that only point down, nothing heavy on import."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import memory


def test_all_names_resolve() -> None:
    assert sorted(memory.__all__) == sorted(set(memory.__all__))
    for name in memory.__all__:
        assert getattr(memory, name) is not None


def test_importing_memory_loads_no_upper_layer_and_no_faiss() -> None:
    code = (
        "import sys, memory; assert memory.__file__, 'regular package'; import memory.store, memory.write.writer, memory.mirror.sync;"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'evolve', 'optimizers', 'apps', 'faiss', 'torch'});"
        "print(','.join(bad))"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == ""


def test_the_examples_in_the_docstrings_run() -> None:
    """Every ``Example:`` of the memory package is what it prints (the README points users at them)."""
    import doctest
    import importlib
    import pkgutil

    failed = {}
    for info in pkgutil.walk_packages(memory.__path__, "memory."):  # mirror/ and integrations/ too
        if info.name == "memory.mirror.pgvector":
            continue  # its examples need a PostgreSQL server (tests/memory/storage/test_memory_postgres.py has one)
        result = doctest.testmod(importlib.import_module(info.name))
        if result.failed:
            failed[info.name] = result.failed
    assert failed == {}


# One name of each module that moved into a room (issue 41), and where it lives now: the old path still gives
# it, warning with the line to change, until connectors.deprecation's REMOVED_IN.
MOVED_MODULES = [
    ("checks", "fit_id", "memory.write.checks"),
    ("consolidation", "distil", "memory.upkeep.consolidation"),
    ("context_q", "fold", "memory.recall.context_q"),
    ("credit", "traced_credit", "memory.learn.credit"),
    ("database", "Database", "memory.storage.database"),
    ("distrust", "DistrustReport", "memory.defences.distrust"),
    ("forgetting", "plan_eviction", "memory.upkeep.forgetting"),
    ("inserts", "NewItems", "memory.write.batch"),
    ("jsonl", "export_jsonl", "memory.storage.jsonl"),
    ("learning", "resolve_recall", "memory.learn.targets"),
    ("lifecycle", "stated_fact", "memory.upkeep.supersession"),
    ("provenance", "record_context", "memory.learn.provenance"),
    ("pruning", "delete_items", "memory.upkeep.removals"),
    ("quarantine", "screen", "memory.defences.quarantine"),
    ("reads", "fetch_items", "memory.storage.items"),
    ("recall_expiry", "expire", "memory.recall.expiry"),
    ("recall_log", "Candidates", "memory.recall.log"),
    ("records", "MemoryItem", "memory.storage.records"),
    ("restoring", "history", "memory.upkeep.restoring"),
    ("retrieval", "search_width", "memory.recall.planning"),
    ("schema", "create_schema", "memory.storage.schema"),
    ("scoring", "td_update", "memory.learn.rule"),
    ("statements", "execute_many", "memory.storage.statements"),
    ("strategies", "Consolidation", "memory.upkeep.strategies"),
    ("trust", "TrustPolicy", "memory.defences.trust"),
    ("writer", "new_batches", "memory.write.adding"),
]


@pytest.mark.parametrize(("old", "name", "home"), MOVED_MODULES, ids=[m[0] for m in MOVED_MODULES])
def test_a_module_that_moved_into_a_room_still_imports_for_one_release_with_a_warning(
    old: str, name: str, home: str
) -> None:
    code = f"from memory.{old} import {name} as value; from {home} import {name}; assert value is {name}"
    with pytest.warns(
        DeprecationWarning, match=rf"`from memory.{old} import {name}` is deprecated .* `from {home} import"
    ):
        exec(code, {})  # the import statement a user wrote, run as written
    with pytest.raises(ImportError, match="NoSuchThing"):
        exec(f"from memory.{old} import NoSuchThing", {})


def test_nothing_in_the_repository_imports_a_moved_module() -> None:
    """Only users' code still goes through the old paths: every import inside the repository names the room."""
    root = Path(__file__).resolve().parents[2]
    old = "|".join(m[0] for m in MOVED_MODULES)
    pattern = re.compile(
        rf"^\s*(from memory\.({old}) import|import memory\.({old})\b|from memory import .*\b({old})\b)", re.M
    )
    found = [
        f"{path.relative_to(root)}: {hit.group(0).strip()}"
        for folder in ("connectors", "memory", "optimizers", "evolve", "apps", "tests", "bench", "scripts")
        for path in sorted((root / folder).rglob("*.py"))
        for hit in pattern.finditer(path.read_text(encoding="utf-8"))
    ]
    assert found == []
