"""The files of a saved vector index: where they live, how each is written atomically, what a failed write
tells the caller, and the temporary files a killed writer leaves behind.

An index is written as one or more files, each to a temporary name carrying its writer's pid and then renamed
over the old one, so a reader sees either the old file or the new one, never a torn one. The JSON sidecar
(``meta_path``) is written last: it names the generation the files reflect.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

FILE_FAULTS = {  # errno -> what a failed index write tells the caller
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk full",
    errno.EROFS: "read-only",
    errno.EACCES: "read-only",
    errno.EPERM: "read-only",
    errno.EIO: "I/O error",
}

# Held while an index is written: without it two stores of one process saving the same namespace at
# once shared one temporary file, and one rename failed (FileNotFoundError) or published a torn file.
SAVING = threading.Lock()


def file_fault(error: BaseException) -> str:
    """What a failed file write reports: ``"disk full"``, ``"read-only"``, ``"I/O error"`` or ``"write
    error"``; from an ``OSError``'s errno, or the system's text that faiss quotes in its ``RuntimeError``."""
    if isinstance(error, OSError) and error.errno in FILE_FAULTS:
        return FILE_FAULTS[error.errno]
    text = str(error)
    return next((cause for code, cause in FILE_FAULTS.items() if os.strerror(code) in text), "write error")


def remove_stale_temps(path: Path) -> int:
    """Delete the temporary files of ``path`` (and its sidecar) left by processes killed mid-save.

    A temporary file carries its writer's pid; one whose process is gone is litter (a live writer's
    is left alone). Returns how many were removed.
    """
    removed = 0
    for name in (path.name, meta_path(path).name):
        for tmp in path.parent.glob(f"{glob.escape(name)}.*.tmp"):
            pid = tmp.name[len(name) + 1 : -len(".tmp")]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                tmp.unlink(missing_ok=True)
                removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def graph_path(path: Path) -> Path:
    """Where the graph of the index saved at ``path`` lives."""
    return path.with_name(path.name + ".graph")


def twins_path(path: Path) -> Path:
    """Where the twins of the graph of the index saved at ``path`` live (``memory.mirror.twins``)."""
    return path.with_name(path.name + ".twins")


def write_array(array: np.ndarray, tmp: Path) -> None:
    with tmp.open("wb") as f:  # a file object: np.save would add ".npy" to a name
        np.save(f, array)


def write_raw(raw: Any, tmp: Path) -> None:
    import faiss

    faiss.write_index(raw, str(tmp))


def atomic(path: Path, write: Any) -> None:
    """``write(tmp)`` then rename over ``path``; the temporary file is removed when the write fails."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
