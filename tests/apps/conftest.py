"""The live ``evolve serve`` app the server tests share (one per test module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.serve import Served, serving, write_serve_spec


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(write_serve_spec(tmp_path_factory.mktemp("serve"))) as live:
        yield live
