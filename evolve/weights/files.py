"""The file side of versioned adapters: content addresses and all-or-nothing copies into the store.

An adapter folder's manifest is ``{relative posix path: sha256 of the bytes}``; its id is the sha256 of
the sorted manifest pairs, so the same bytes always get the same id. :func:`store_files` copies a folder
into ``<home>/<id>/`` through a temporary sibling that is renamed into place after every file and folder
was flushed, so a version folder is complete or absent. :mod:`evolve.weights.registry` keeps the rows;
this module only reads, copies and flushes files (no SQL, no torch, no peft).

Example:
    >>> import tempfile
    >>> tmp = Path(tempfile.mkdtemp())
    >>> _ = (tmp / "adapter_config.json").write_text('{"r": 8}')
    >>> _ = (tmp / "adapter_model.safetensors").write_bytes(b"weights")
    >>> files = check_adapter_folder(tmp)
    >>> sorted(files), len(content_id(files))
    (['adapter_config.json', 'adapter_model.safetensors'], 16)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from connectors.errors import ConfigError, StoreError
from evolve.ledger import content_address

CONFIG_FILE = "adapter_config.json"
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")
CHUNK = 1 << 20


def file_digest(path: Path) -> str:
    """The sha256 of one file's bytes, read in chunks (adapters can be hundreds of MB)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def manifest(folder: Path) -> dict[str, str]:
    """``{relative posix path: sha256}`` of every file under ``folder``; symlinked folders are refused."""
    out: dict[str, str] = {}
    for here, dirs, files in os.walk(folder):
        linked = [d for d in dirs if os.path.islink(os.path.join(here, d))]
        if linked:
            raise ConfigError(f"adapter folder {folder} holds symlinked folders {linked}; copy them in instead")
        for name in files:
            path = Path(here, name)
            out[path.relative_to(folder).as_posix()] = file_digest(path)
    return dict(sorted(out.items()))


def content_id(files: Mapping[str, str]) -> str:
    """The content address of an adapter: sha256 over the sorted (relative path, file sha256) pairs, cut
    like a prompt version's id (:func:`evolve.ledger.content_address`)."""
    return content_address(sorted(files.items()))


def check_adapter_folder(folder: Any) -> dict[str, str]:
    """The manifest of a folder peft could load: a config and the weights; ConfigError says what is missing."""
    path = Path(folder)
    if not path.is_dir():
        raise ConfigError(f"an adapter is a folder saved by peft's save_pretrained, got {folder!r} (not a folder)")
    files = manifest(path)
    missing = [CONFIG_FILE] if CONFIG_FILE not in files else []
    if not any(w in files for w in WEIGHT_FILES):
        missing.append(" or ".join(WEIGHT_FILES))
    if missing:
        raise ConfigError(f"adapter folder {path} lacks {missing}; it holds {sorted(files)[:10]}")
    return files


def store_files(source: Path, home: Path, vid: str, files: Mapping[str, str]) -> Path:
    """Copy ``files`` (``source``'s manifest) into ``<home>/<vid>`` via a temporary sibling renamed into place.

    A folder already there with the same manifest is reused (the same bytes committed again, perhaps
    concurrently).

    Raises:
        StoreError: ``source`` changed during the copy, or ``<home>/<vid>`` holds other files.
    """
    target = home / vid
    if target.exists():
        return reuse(target, files)
    home.mkdir(parents=True, exist_ok=True)
    tmp = home / f".tmp-{vid}-{uuid.uuid4().hex[:8]}"  # a leading '.' never names a version
    try:
        tmp.mkdir()
        for rel in files:
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / rel, dest)
        if manifest(tmp) != files:
            raise StoreError(f"adapter folder {source} changed while it was being copied; commit it again")
        _fsync_tree(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():  # not a concurrent commit of the same bytes: a real failure
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            return reuse(target, files)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(home)
    return target


def reuse(target: Path, files: Mapping[str, str]) -> Path:
    """``target`` when it holds exactly ``files``; StoreError when it was changed by hand."""
    if not target.is_dir() or manifest(target) != files:
        raise StoreError(
            f"{target} exists but does not hold the adapter being committed (changed by hand?); "
            "move it away and commit again"
        )
    return target


def _fsync_tree(folder: Path) -> None:
    """Flush the copied files and their folders, so a crash after the rename never exposes half-written bytes."""
    for here, _dirs, files in os.walk(folder):
        for name in files:
            with open(os.path.join(here, name), "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(here))


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms (Windows) cannot open a folder; the rename is still atomic there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
