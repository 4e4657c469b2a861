"""The vLLM server launcher of the benchmark and the vllm tests (tests/support/vllm_serve.py), on stand-in
servers (no vLLM needed)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from connectors import ConnectorError
from tests.support.vllm_serve import HOST, Server, free_port, server_command, stop, wait_healthy

HEALTHY_AFTER_A_MOMENT = textwrap.dedent(
    """
    import sys, time
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Health(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    time.sleep(1.0)  # not listening yet: the first polls are refused
    HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
    """
)


def launch(tmp_path: Path, code: str, *args: str) -> Server:
    log_path = tmp_path / "server.log"
    port = free_port()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", code, str(port), *args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Server(process, port, log_path)


def test_the_command_is_the_documented_one() -> None:
    cmd = server_command("/models/smollm2", 8011, served_name="smollm2", max_model_len=1024, dtype="bfloat16")
    assert cmd[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(cmd[3::2], cmd[4::2], strict=False))
    assert flags["--model"] == "/models/smollm2" and flags["--host"] == HOST == "127.0.0.1"
    assert (flags["--port"], flags["--served-model-name"], flags["--max-model-len"]) == ("8011", "smollm2", "1024")


def test_waits_for_health_then_stops_the_whole_group(tmp_path: Path) -> None:
    server = launch(tmp_path, HEALTHY_AFTER_A_MOMENT)
    try:
        wait_healthy(server, timeout=60)
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
    finally:
        stop(server.process, grace=10)
    assert server.process.poll() is not None


def test_a_server_that_dies_is_reported_with_the_end_of_its_log(tmp_path: Path) -> None:
    server = launch(tmp_path, "print('ValueError: no config.json in /models/nothing'); raise SystemExit(3)")
    with pytest.raises(ConnectorError, match=r"exited with code 3[\s\S]*no config.json"):
        wait_healthy(server, timeout=60)


def test_a_server_that_never_gets_healthy_times_out(tmp_path: Path) -> None:
    server = launch(tmp_path, "import time; print('loading...', flush=True); time.sleep(60)")
    try:
        with pytest.raises(ConnectorError, match=r"not healthy after 1 s[\s\S]*loading"):
            wait_healthy(server, timeout=1)
    finally:
        stop(server.process, grace=10)
    assert server.process.poll() is not None
