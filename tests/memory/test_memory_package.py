"""The package's public face: a tested ``__all__``, imports that only point down, nothing heavy on import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import memory


def test_all_names_resolve() -> None:
    assert sorted(memory.__all__) == sorted(set(memory.__all__))
    for name in memory.__all__:
        assert getattr(memory, name) is not None


def test_importing_memory_loads_no_upper_layer_and_no_faiss() -> None:
    code = (
        "import sys, memory; assert memory.__file__, 'regular package'; import memory.store, memory.writer, memory.mirror.sync;"
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
            continue  # its examples need a PostgreSQL server (tests/memory/test_memory_postgres.py has one)
        result = doctest.testmod(importlib.import_module(info.name))
        if result.failed:
            failed[info.name] = result.failed
    assert failed == {}
