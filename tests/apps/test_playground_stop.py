"""``evolve playground`` stops with its Streamlit child on SIGTERM (issue 41, item 7): the port is free and no
child is left serving it, where the child used to outlive its parent."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from apps.playground_browser import free_port, wait_healthy
from tests.apps.test_playground import write_spec

pytest.importorskip("streamlit", reason="the playground extra (pip install -e '.[playground]') is not installed")
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads children from /proc (Linux)")


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc: no psutil needed)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # it exited while we looked
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigterm_stops_the_playground_and_its_streamlit_child(tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "apps.cli", "playground", str(write_spec(tmp_path)), "--port", str(port)]
    log = tmp_path / "playground.log"
    child = None
    with log.open("wb") as out:
        parent = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_healthy(f"http://127.0.0.1:{port}", parent, timeout=60)
            [child] = children(parent.pid)  # streamlit, in its own process group
            assert alive(child)

            parent.send_signal(signal.SIGTERM)
            assert parent.wait(timeout=30) == 128 + signal.SIGTERM, log.read_text()
            deadline = time.monotonic() + 10
            while alive(child) and time.monotonic() < deadline:  # reaped by the parent; /proc may lag a moment
                time.sleep(0.1)
            assert not alive(child), "the Streamlit child outlived evolve playground"
            with socket.socket() as s, pytest.raises(ConnectionRefusedError):
                s.connect(("127.0.0.1", port))  # nobody serves the port any more
        finally:
            for pid in (parent.pid, child):  # never leave either serving after a failure
                if pid is not None and alive(pid):
                    os.kill(pid, signal.SIGKILL)
            parent.wait()
    assert "Stopping..." in log.read_text()  # Streamlit shut down on SIGTERM, not on SIGKILL
