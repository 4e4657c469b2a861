"""Names that left a package's face: still importable from it for one release, with a warning that says
where they live now.

A face keeps a map of its former names to their modules and calls ``moved`` from its module-level
``__getattr__`` (PEP 562): the name is imported from its new home only when asked for, and every use of
the old spelling warns, so a user sees the line to change.

Example:
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     moved("connectors", "dumps", {"dumps": "json"})([1])
    '[1]'
    >>> print(caught[0].message)
    `from connectors import dumps` is deprecated and stops working in 0.3.0: use `from json import dumps`
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from importlib import import_module
from typing import Any

REMOVED_IN = "0.3.0"
"""The release in which the old spellings stop working (one release after they moved)."""


def moved(face: str, name: str, homes: Mapping[str, str]) -> Any:
    """``name`` from its new module (``homes[name]``), warning that ``face`` no longer exports it.

    Raises:
        AttributeError: ``name`` is not one of the moved names (the usual "has no attribute").
    """
    home = homes.get(name)
    if home is None:
        raise AttributeError(f"module {face!r} has no attribute {name!r}")
    warnings.warn(
        f"`from {face} import {name}` is deprecated and stops working in {REMOVED_IN}: use `from {home} import {name}`",
        DeprecationWarning,
        stacklevel=3,  # moved <- the face's __getattr__ <- the line that asked for the name
    )
    return getattr(import_module(home), name)


__all__ = ["REMOVED_IN", "moved"]
