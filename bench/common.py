"""What every benchmark shares: a description of the machine and the flat summary file."""

from __future__ import annotations

import json
import logging
import os
import platform
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from memory.mirror.backend import load_faiss


def machine() -> dict[str, Any]:
    faiss = load_faiss()
    import sqlalchemy

    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in _read("/proc/cpuinfo").splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    return {
        "cpu_count": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": np.__version__,
        "faiss": getattr(faiss, "__version__", None) if faiss else None,
        "sqlalchemy": sqlalchemy.__version__,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB: ``VmHWM``, which starts afresh at ``exec``.
    (``getrusage``'s ``ru_maxrss`` does not: a child started by a 12 GB parent reported 12 GB.)"""
    try:
        status = Path("/proc/self/status").read_text(encoding="utf-8")
    except OSError:  # not Linux: ru_maxrss is bytes on macOS
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def rss_parts_mb() -> dict[str, float]:
    """This process's resident memory now, by kind, in MB: ``anon`` (its own heap and arrays) and ``file``
    (pages of mapped files: page cache, shared with every process mapping them, dropped under pressure)."""
    try:
        status = Path("/proc/self/status").read_text(encoding="utf-8")
    except OSError:
        return {}
    parts = dict(line.split(":", 1) for line in status.splitlines() if line.startswith(("RssAnon", "RssFile")))
    return {"anon": int(parts["RssAnon"].split()[0]) / 1024, "file": int(parts["RssFile"].split()[0]) / 1024}


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def merge_summary(path: Path, flat: dict[str, Any]) -> None:
    summary: dict[str, Any] = {}
    if path.exists():
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            logging.getLogger(__name__).warning("%s was not valid JSON; starting it afresh", path)
    summary.update(flat)
    path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def at_once(call: Callable[[int], object], clients: int) -> list[float]:
    """Seconds each of ``clients`` threads took for ``call(i)``, all released at once by a barrier."""
    out = [0.0] * clients
    gate = threading.Barrier(clients)

    def run(i: int) -> None:
        gate.wait()
        started = time.perf_counter()
        call(i)
        out[i] = time.perf_counter() - started

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out
