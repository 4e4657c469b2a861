"""Names that left a package's face, and modules that moved: still importable from where they were for one
release, with a warning that says where they live now.

A face keeps a map of its former names to their modules and calls ``moved`` from its module-level
``__getattr__`` (PEP 562): the name is imported from its new home only when asked for, and every use of
the old spelling warns, so a user sees the line to change. A module that moved leaves a shim behind whose
``__getattr__`` is ``moved_module(...)``: the same, for every name the module had.

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
from collections.abc import Callable, Mapping
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


def moved_module(old: str, home: str, homes: Mapping[str, str] | None = None) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` of a shim left at ``old``, the path of a module that moved to ``home``:
    each name comes from ``home`` (or from its own module in ``homes``, for names that moved elsewhere), with
    ``moved``'s warning; a name neither has, or a private one, is the usual ``AttributeError``.

    Example:
        >>> import warnings
        >>> __getattr__ = moved_module("old.place", "json", {"sqrt": "math"})
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     __getattr__("dumps")([1]), __getattr__("sqrt")(4.0)
        ('[1]', 2.0)
        >>> print(caught[1].message)
        `from old.place import sqrt` is deprecated and stops working in 0.3.0: use `from math import sqrt`
    """
    where = dict(homes or {})

    def __getattr__(name: str) -> Any:
        found = where.get(name, home)
        if name.startswith("_") or not hasattr(import_module(found), name):
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        return moved(old, name, {name: found})  # stacklevel 3: moved <- this function <- the importing line

    return __getattr__


__all__ = ["REMOVED_IN", "moved", "moved_module"]
