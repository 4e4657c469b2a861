"""Which search backend this process has: FAISS when the ``local`` extra is installed, else NumPy.

FAISS is imported the first time an index asks for it (never when the package is imported), and its
absence is said once in the log. ``memory.mirror.index`` falls back to a NumPy search that returns the same
neighbours; the HNSW graph of ``index="adaptive"`` (``memory.mirror.graph``) needs FAISS itself.

Example:
    >>> load_faiss() is None or hasattr(load_faiss(), "IndexFlatIP")
    True
"""

from __future__ import annotations

import logging
from types import ModuleType

from connectors.errors import ConfigError
from connectors.install import extra_hint

log = logging.getLogger(__name__)
_warned_missing = False


def load_faiss() -> ModuleType | None:
    """The faiss module, or None when the ``local`` extra is not installed (imported lazily)."""
    global _warned_missing
    try:
        import faiss
    except ImportError:
        if not _warned_missing:
            log.info("faiss is not installed (%s); memory search falls back to NumPy", extra_hint("local"))
            _warned_missing = True
        return None
    return faiss


def require_faiss(what: str) -> ModuleType:
    """The faiss module, or a ``ConfigError`` saying that ``what`` needs it and which extra installs it."""
    faiss = load_faiss()
    if faiss is None:
        raise ConfigError(f"{what} needs faiss: install the 'local' extra ({extra_hint('local')})")
    return faiss
