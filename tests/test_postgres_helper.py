"""The PostgreSQL helper for trying the server backend (``scripts/postgres.py``, ``tests/support/postgres.py``):
it starts from any folder and says plainly that durability is off, unless ``--durable``."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

pytestmark = pytest.mark.postgres


@contextmanager
def helper(script: Path, data_dir: Path, cwd: Path, *extra: str) -> Iterator[list[str]]:
    """The helper running in ``cwd``; the lines it printed up to "Ctrl-C stops it" and the one after."""
    proc = subprocess.Popen(
        [sys.executable, str(script), str(data_dir), *extra],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        assert lines[0].startswith("postgresql+psycopg://"), proc.communicate(timeout=60)
        yield [line.strip() for line in lines]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)


def settings(url: str) -> dict[str, str]:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return {
                k: conn.exec_driver_sql(f"SHOW {k}").scalar_one()
                for k in ("fsync", "synchronous_commit", "full_page_writes")
            }
    finally:
        engine.dispose()


def test_the_helper_starts_from_any_folder_and_says_durability_is_off(tmp_path: Path, repo_root: Path) -> None:
    elsewhere = tmp_path / "Projets clients — essais pgvector (été)"
    elsewhere.mkdir()
    data_dir = Path(tempfile.mkdtemp(prefix="evolve-pg-")) / "data"  # not under pytest's 0700 root (see conftest)
    try:
        with helper(repo_root / "scripts" / "postgres.py", data_dir, elsewhere) as (url, running, notice):
            assert f"running from {data_dir}" in running
            assert "throwaway test server" in notice and "fsync, synchronous_commit, full_page_writes = off" in notice
            assert settings(url) == {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        with helper(repo_root / "scripts" / "postgres.py", data_dir, elsewhere, "--durable") as (url, _, notice):
            assert "throwaway" not in notice
            assert settings(url) == {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
    finally:
        shutil.rmtree(data_dir.parent, ignore_errors=True)
