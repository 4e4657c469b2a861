"""The playground as a real server, seen through a real browser: for its browser test and screenshots.

``serve(spec)`` starts ``streamlit run apps/playground.py`` headless on a free port of 127.0.0.1 and
waits for ``/_stcore/health``; ``chromium_page()`` opens Debian's Chromium through Playwright (never
Playwright's own browser download, which needs the internet) with a fresh profile; ``ask(page, …)``
types a question into the chat and waits for the answer.

Example:
    >>> # with serve(Path("spec.toml")) as url, chromium_page() as page:
    >>> #     page.goto(url); print(ask(page, "Door code of the Harbor warehouse?"))
    >>> #     page.screenshot(path="bench/results/playground_test.png")
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from apps.playground_cli import playground_env, streamlit_argv
from connectors import ConfigError, EvolveError
from connectors.install import extra_hint

log = logging.getLogger(__name__)

# Headless Chromium as root in a container (no sandbox, no GPU), with nothing phoning home: no background
# networking, component updates or sync.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
CHAT_INPUT = '[data-testid="stChatInputTextArea"]'
CHAT_MESSAGE = '[data-testid="stChatMessage"]'
SPINNER = '[data-testid="stSpinner"]'


def find_chromium() -> str | None:
    """Debian's Chromium (``scripts/install_chromium.sh`` installs it), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes], *, timeout: float) -> None:
    """Poll Streamlit's ``/_stcore/health`` until it answers ``ok``; fail early when the server died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EvolveError(f"streamlit exited with status {proc.returncode} before it served {url}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200 and r.read().strip() == b"ok":
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    raise EvolveError(f"streamlit did not answer {url}/_stcore/health within {timeout:.0f} s")


@contextlib.contextmanager
def serve(
    spec: Path,
    *,
    port: int | None = None,
    tenant: str | None = None,
    db: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    log_path: Path | None = None,
    timeout: float = 120.0,
) -> Iterator[str]:
    """Serve the playground on 127.0.0.1 (a free port unless given); yields its URL, stops it after.

    The server's output goes to ``log_path`` (default: discarded), which is where to look when it fails.
    """
    port = port or free_port()
    argv = streamlit_argv(spec, port=port, address="127.0.0.1", tenant=tenant, db=db)
    out = open(log_path, "wb") if log_path is not None else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        argv, env=playground_env(dict(env) if env is not None else None), cwd=cwd, stdout=out, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout=timeout)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log_path is not None:
            out.close()  # type: ignore[union-attr]


@contextlib.contextmanager
def chromium_page(*, executable: str | None = None, width: int = 1440, height: int = 1200) -> Iterator[Any]:
    """A Playwright page in headless Debian Chromium with a fresh profile (deleted after)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        raise ConfigError(f"browser checks need Playwright for Python: {extra_hint('dev')}") from e
    executable = executable or find_chromium()
    if executable is None:
        raise ConfigError("no chromium on PATH: run scripts/install_chromium.sh (Debian's chromium package)")
    with tempfile.TemporaryDirectory(prefix="evolve-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=executable,
            headless=True,
            args=list(CHROMIUM_ARGS),
            viewport={"width": width, "height": height},
        )
        try:
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()


def ask(page: Any, question: str, *, timeout_s: float = 120.0) -> str:
    """Type ``question`` into the chat, wait for the agent's answer (its thumbs-up button), return its text."""
    ms = timeout_s * 1000
    page.wait_for_selector(CHAT_INPUT, timeout=ms)
    before = page.locator(CHAT_MESSAGE).count()
    page.locator(CHAT_INPUT).fill(question)
    page.locator(CHAT_INPUT).press("Enter")
    page.wait_for_function(
        "([sel, n]) => document.querySelectorAll(sel).length >= n",
        arg=[CHAT_MESSAGE, before + 2],
        timeout=ms,
    )
    answer = page.locator(CHAT_MESSAGE).nth(before + 1)
    answer.locator('[class*="st-key-up-"] button').first.wait_for(timeout=ms)
    page.wait_for_selector(SPINNER, state="detached", timeout=ms)
    return str(answer.locator('[data-testid="stMarkdownContainer"]').first.inner_text()).strip()


def open_expander(page: Any, label: str, *, nth: int = -1) -> None:
    """Open one expander (the last one with this label by default) and let its content render."""
    summaries = page.locator("summary", has_text=label)
    summary = summaries.nth(nth if nth >= 0 else summaries.count() + nth)
    summary.click()
    page.wait_for_timeout(800)  # the dataframe inside draws on a canvas after the expander opens


def open_tab(page: Any, label: str) -> None:
    page.get_by_role("tab", name=label).click()
    page.wait_for_timeout(800)


__all__ = [
    "CHROMIUM_ARGS",
    "ask",
    "chromium_page",
    "find_chromium",
    "free_port",
    "open_expander",
    "open_tab",
    "serve",
    "wait_healthy",
]
