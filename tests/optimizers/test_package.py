"""The public face of ``optimizers``: everything in ``__all__`` exists, and the docstrings' examples run."""

from __future__ import annotations

import doctest
import importlib

import pytest

import optimizers

MODULES = [
    "acceptance",
    "budget",
    "critic",
    "gate",
    "library",
    "parsing",
    "prompts",
    "selection",
    "textgrad",
    "tfgrpo",
    "types",
]


def test_every_exported_name_exists() -> None:
    assert sorted(optimizers.__all__) == sorted(set(optimizers.__all__))
    missing = [name for name in optimizers.__all__ if not hasattr(optimizers, name)]
    assert missing == []


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(f"optimizers.{name}")
    result = doctest.testmod(module)
    assert result.failed == 0
