"""Fixtures for the optimizer tests: golden-file comparison (regenerate with EVOLVE_UPDATE_GOLDEN=1)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture
def golden() -> Callable[[str, str], None]:
    """``golden(name, text)`` asserts ``text`` equals ``golden/<name>``; EVOLVE_UPDATE_GOLDEN=1 rewrites it."""

    def check(name: str, text: str) -> None:
        path = GOLDEN / name
        if os.environ.get("EVOLVE_UPDATE_GOLDEN") == "1":
            path.write_text(text, encoding="utf-8")
        assert path.exists(), f"{path} is missing; create it with EVOLVE_UPDATE_GOLDEN=1"
        assert text == path.read_text(encoding="utf-8")

    return check
