"""What the commands share: number options that refuse nonsense where they are parsed (``--rounds 0`` is an
error, not "the spec's rounds"), the line that names a command's database, and install hints.

Each number helper returns an argparse ``type=``: a value out of range exits 2 with argparse's usage line and a
message that says what was expected, before anything is loaded.

Example:
    >>> import argparse
    >>> p = argparse.ArgumentParser(prog="evolve run")
    >>> _ = p.add_argument("--rounds", type=count(1), default=None)
    >>> p.parse_args(["--rounds", "3"]).rounds
    3
    >>> count(1)("0")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: must be an integer >= 1, got '0'
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable


def count(low: int, high: int | None = None) -> Callable[[str], int]:
    """An integer option in ``[low, high]`` (no upper bound when ``high`` is None)."""
    expected = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}")
        return value

    return parse


def seconds(text: str) -> float:
    """A positive, finite number of seconds (``--lease-ttl``)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


__all__ = ["count", "seconds"]


SERVE_INSTALL_HINT = "evolve serve needs FastAPI and uvicorn: pip install 'evolve[serve]'"


def add_admin_key(parser: argparse.ArgumentParser, *, only: str = "") -> None:
    """``--admin-key KEY`` (repeatable), as ``evolve serve`` and ``evolve mcp`` take it (``apps.keys``);
    ``only`` prefixes the help (``"http: "``)."""
    parser.add_argument(
        "--admin-key", action="append", default=[], metavar="KEY",
        help=f"{only}an operator key: opens the memory's defences (distrust, undo, release) and no tenant's "
        "routes (repeatable; also $EVOLVE_ADMIN_KEYS='k1,k2' or [admin] keys = [...] in --keys FILE)",
    )  # fmt: skip


def quiet_loading(quiet: bool) -> None:
    """``--quiet`` also hides the model loaders' progress bars (transformers, hub)."""
    if quiet:
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def say_database(command: str, url: str | None) -> None:
    """Which database a command works on (password hidden), on stderr: stdout stays the command's output.

    A spec's relative SQLite path is relative to the spec file; this line shows where that put it.
    """
    from connectors.db import default_url
    from connectors.redact import redact_url

    print(f"evolve {command}: database {redact_url(url or default_url())}", file=sys.stderr, flush=True)
