"""The playground in a real browser: `streamlit run` serves it, Debian's Chromium (through Playwright)
loads the page, asks a question, sees the answer and the recalled memories, and saves a screenshot."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from apps.playground_browser import ask, chromium_page, find_chromium, open_expander, serve
from connectors import make_engine
from evolve.serve.deployment import Deployment
from evolve.serve.responses import responses
from evolve.spec import load_spec
from tests.apps.test_playground import QUESTION, write_spec

pytest.importorskip("streamlit", reason="the playground extra (pip install -e '.[playground]') is not installed")
pytest.importorskip("playwright", reason="Playwright for Python (the dev extra) is not installed")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        find_chromium() is None, reason="Debian's chromium is not installed (scripts/install_chromium.sh installs it)"
    ),
]


def test_a_real_browser_chats_with_the_playground_and_saves_a_screenshot(tmp_path: Path, repo_root: Path) -> None:
    spec = write_spec(tmp_path)
    seeded = Deployment(load_spec(spec))
    assert seeded.store is not None
    seeded.store.add(QUESTION, "The feedback said the code is 4471.", namespace="play/solver", success=True, q=0.3)
    seeded.store.add("What is the alarm code of the Summit workshop?", "9310", namespace="play/solver", q=-0.2)
    seeded.close()
    shot = repo_root / "bench" / "results" / "playground_test.png"  # every test run rewrites it: ignored by git
    shot.parent.mkdir(parents=True, exist_ok=True)

    with serve(spec, cwd=tmp_path, log_path=tmp_path / "streamlit.log") as url, chromium_page() as page:
        page.goto(url)
        assert ask(page, QUESTION) == "4471"
        assert page.title() == "Evolve playground"  # set by the script once it ran
        open_expander(page, "Why these memories")
        assert page.get_by_text("candidates, 2 above δ, 2 selected").is_visible()
        page.screenshot(path=str(shot))

    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with make_engine(f"sqlite:///{tmp_path / 'play.db'}").connect() as conn:
        rows = conn.execute(select(responses.c.answer, responses.c.query)).all()
    assert [tuple(r) for r in rows] == [
        ("4471", QUESTION)
    ]  # the answer the browser showed is the one the server recorded
