"""Every test runs isolated: its own EVOLVE_HOME and working directory, and no API keys.

``tests/conftest.py`` and ``bench/tests/conftest.py`` both take ``isolated`` as their autouse fixture,
so the suite's tests and bench's own tests run alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh EVOLVE_HOME under the test's temporary folder (returned), which is also the working
    directory; the OpenAI environment variables and the operator's keys unset."""
    home = tmp_path / "evolve-home"
    monkeypatch.setenv("EVOLVE_HOME", str(home))
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "EVOLVE_ADMIN_KEYS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    return home
