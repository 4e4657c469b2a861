"""Checks for optional extras: what importing a module says when a package of its extra is missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def import_without(blocked: str, module: str) -> str:
    """Import ``module`` in a fresh interpreter where ``blocked`` cannot be imported.

    Returns ``"<ErrorType> <message>"`` for the error the import raised, or ``"imported"``.
    """
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        f"try:\n    import {module}\nexcept Exception as e:\n    print(type(e).__name__, e)\nelse:\n    print('imported')"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.strip()
