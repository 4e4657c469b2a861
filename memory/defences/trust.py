"""Who wrote a memory, and whether that writer's memories count: the trust policy (issue 40, defences).

Every memory records its writer in ``meta["writer"]`` as ``"<kind>:<name>"``, ``kind`` one of
``WRITER_KINDS``: ``run`` (a training run's loop), ``tenant`` (a served tenant's rated answers),
``promoted`` (a tenant's memory moved into the shared one), ``import`` (a JSONL file), ``mcp`` (an outside
agent's ``remember``) or ``user`` (a direct API call: ``"user:local"`` unless the caller says).

``TrustPolicy`` (``MemoryConfig.trust``) says what a write by a writer that matches none of its
``trusted`` patterns becomes:

- ``"open"`` (the default): nothing changes; every writer counts as before provenance was recorded;
- ``"neutral"``: the memory starts at ``MemoryConfig.q_init`` with no visits, whatever Q it carries (an
  import's ``q``, a promotion's, ``add(q=...)``): it must earn its rank from this store's own rewards;
- ``"quarantine"``: the memory is held in ``memory_quarantine`` (``memory.defences.quarantine``), where no recall
  finds it, until ``MemoryStore.release`` moves it into the memory (at ``q_init``, no visits).

A memory without a valid writer (one written before provenance, whose ``meta["writer"]`` may still say
how it was composed, ``"cheap"`` or ``"llm"``) matches no pattern: untrusted under the two strict modes.
This module is pure; ``memory.defences.quarantine`` and ``memory.defences.distrust`` hold the SQL.

Example:
    >>> policy = TrustPolicy(mode="neutral")
    >>> policy.untrusted(["run:codes", "import:dump.jsonl", None]).tolist()
    [False, True, True]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

import numpy as np

from connectors.errors import ConfigError

TrustMode = Literal["open", "neutral", "quarantine"]
TRUST_MODES: tuple[str, ...] = ("open", "neutral", "quarantine")
WRITER_KINDS: tuple[str, ...] = ("run", "tenant", "promoted", "import", "mcp", "user")
DEFAULT_TRUSTED: tuple[str, ...] = ("run:*", "tenant:*", "user:*")
MAX_WRITER = 200
"""The most characters of a writer (and of a trusted pattern)."""
LOCAL_WRITER = "user:local"
"""The writer of a direct API call that names none."""


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control character (C0, DEL, C1) or a lone surrogate."""
    return any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or 0xD800 <= ord(c) < 0xE000 for c in text)


def is_writer(value: object) -> bool:
    """Whether ``value`` is a writer: ``"<kind>:<name>"``, a known kind, a name that is not blank, at most
    ``MAX_WRITER`` characters, no control characters (Unicode and spaces are fine)."""
    if not isinstance(value, str) or len(value) > MAX_WRITER or has_control(value):
        return False
    kind, sep, name = value.partition(":")
    return bool(sep) and kind in WRITER_KINDS and bool(name.strip())


@dataclass(frozen=True)
class TrustPolicy:
    """Which writers' memories count as written, and what becomes of the others' (the module docstring).

    Attributes:
        mode: ``"open"`` (every writer alike, the default), ``"neutral"`` (an untrusted writer's memory
            starts at ``q_init`` with no visits) or ``"quarantine"`` (held until released).
        trusted: ``fnmatch`` patterns (case-sensitive) of the writers whose memories are stored as
            written, e.g. ``"tenant:*"`` or ``"import:codes-2026-*.jsonl"``; each is ``"<kind>:<name>"``
            whose kind part matches a writer kind.

    Example:
        >>> TrustPolicy(mode="quarantine", trusted=("run:*",)).trusts("tenant:acme")
        False
    """

    mode: TrustMode = "open"
    trusted: tuple[str, ...] = DEFAULT_TRUSTED

    def __post_init__(self) -> None:
        if self.mode not in TRUST_MODES:
            raise ConfigError(f"TrustPolicy.mode must be one of {TRUST_MODES}, got {self.mode!r:.80}")
        object.__setattr__(self, "trusted", check_patterns(self.trusted))

    def trusts(self, writer: object) -> bool:
        """Whether ``writer`` matches a trusted pattern (whatever the mode)."""
        return is_writer(writer) and any(fnmatchcase(str(writer), p) for p in self.trusted)

    def untrusted(self, writers: Sequence[object]) -> np.ndarray:
        """Per writer, whether this policy holds back its memory: never under ``"open"``."""
        if self.mode == "open":
            return np.zeros(len(writers), dtype=bool)
        verdict: dict[object, bool] = {}  # a batch has few distinct writers
        return np.array([not verdict.setdefault(w, self.trusts(w)) for w in writers], dtype=bool)


def check_patterns(patterns: object) -> tuple[str, ...]:
    """``TrustPolicy.trusted`` as a tuple, each pattern checked (``ConfigError`` naming the bad one)."""
    if isinstance(patterns, str) or not isinstance(patterns, (tuple, list)):
        raise ConfigError(
            f"TrustPolicy.trusted must be a list of writer patterns such as ['run:*', 'tenant:*'], got {patterns!r:.80}"
        )
    for p in patterns:
        kind, sep, name = p.partition(":") if isinstance(p, str) else ("", "", "")
        ok = isinstance(p, str) and 0 < len(p) <= MAX_WRITER and not has_control(p) and sep and name
        if not ok or not any(fnmatchcase(k, kind) for k in WRITER_KINDS) or p.count("[") != p.count("]"):
            raise ConfigError(
                f"TrustPolicy.trusted: each pattern must be '<kind>:<name>' (fnmatch wildcards allowed, brackets "
                f"closed) whose kind matches one of {WRITER_KINDS}, at most {MAX_WRITER} characters without control "
                f"characters; got {p!r:.120}"
            )
    return tuple(patterns)
