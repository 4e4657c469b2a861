"""Every test runs isolated: its own EVOLVE_HOME and working directory, no API keys, no hub access.

The converted SmolLM2 folder is the one cache shared across tests (EVOLVE_MODEL_CACHE, or the user's
cache): it is a pure function of the installed model package, and converting it takes ~20 s.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "evolve-home"
    monkeypatch.setenv("EVOLVE_HOME", str(home))
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    return home


@pytest.fixture
def repo_root() -> Path:
    return ROOT
