"""The experience library of Training-Free GRPO: its text format and the merge of a batch's operations.

A library is one component of the candidate (e.g. ``"solver.library"``). Its text has one entry per
line, numbered so operations can refer to entries: ``[1] When …, do …``. An empty library is ``""``.

Every group of a batch proposes operations against the same parent library, so ids always refer to
the parent's numbering. The merge is deterministic:

- a ``DELETE`` removes its entry, unless some group ``UPDATE``s that entry (a refinement keeps what
  the entry knew; a later step can still delete it);
- the first ``UPDATE`` of an entry wins; later updates of the same entry are dropped;
- an ``UPDATE`` of an id the library does not have is an ``ADD`` (its lesson is still new);
  a ``DELETE`` of such an id is ignored;
- an ``ADD`` is appended unless the library already holds the same text (ignoring case and spacing);
- adds that would take the library past ``max_entries`` are dropped (the critic is told the cap and
  can make room with ``DELETE``); ``KEEP`` changes nothing.

Example:
    >>> update = merge_operations(["When adding, carry the ones."], [Operation(op="ADD", text="When done, check.")])
    >>> print(update.text)
    [1] When adding, carry the ones.
    [2] When done, check.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from connectors import ConfigError
from optimizers.parsing import Operation
from optimizers.prompts import EMPTY_LIBRARY, LIBRARY_ENTRY

_PREFIX = re.compile(r"^\s*(?:\[\d+\]|-|\*|\d+[.)])\s*")


def parse_library(text: str) -> list[str]:
    """The entries of a library text, without their numbering (``[n]``, ``n.``, ``-`` prefixes)."""
    entries = []
    for line in text.splitlines():
        entry = _PREFIX.sub("", line).strip()
        if entry:
            entries.append(entry)
    return entries


def render_library(entries: Iterable[str]) -> str:
    """Entries numbered from 1, one per line; ``""`` for no entries."""
    return "\n".join(LIBRARY_ENTRY.format(id=i, text=e) for i, e in enumerate(entries, 1))


def show_library(entries: Sequence[str]) -> str:
    """The library as the critic sees it: numbered entries, or a marker when it is empty."""
    return render_library(entries) if entries else EMPTY_LIBRARY


@dataclass(frozen=True)
class LibraryUpdate:
    """The library after a batch's operations, and what the merge did.

    Example:
        >>> LibraryUpdate(entries=("When x, do y.",), added=1).text
        '[1] When x, do y.'
    """

    entries: tuple[str, ...]
    added: int = 0
    updated: int = 0
    deleted: int = 0
    dropped: int = 0

    @property
    def text(self) -> str:
        return render_library(self.entries)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.deleted)

    def summary(self) -> str:
        """One line for logs: ``+2 added, 1 updated, 0 deleted, 1 dropped``."""
        return f"+{self.added} added, {self.updated} updated, {self.deleted} deleted, {self.dropped} dropped"


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


def merge_operations(
    entries: Sequence[str], operations: Iterable[Operation], *, max_entries: int = 30
) -> LibraryUpdate:
    """Apply a batch's operations to a library (ids refer to ``entries``, numbered from 1).

    Raises:
        ConfigError: ``max_entries`` is below 1.
    """
    if max_entries < 1:
        raise ConfigError(f"max_entries must be >= 1, got {max_entries}")
    updates: dict[int, str] = {}
    deletes: set[int] = set()
    adds: list[str] = []
    dropped = 0
    for op in operations:
        known = op.id if op.id is not None and 1 <= op.id <= len(entries) else None
        if op.op == "UPDATE" and known is not None and op.text is not None:
            if known in updates:
                dropped += 1
            else:
                updates[known] = op.text
        elif op.op == "DELETE" and known is not None:
            deletes.add(known)
        elif op.op in ("ADD", "UPDATE") and op.text is not None:
            adds.append(op.text)
    kept: list[str] = []
    updated = deleted = 0
    for i, entry in enumerate(entries, 1):
        if i in updates:
            updated += int(_key(updates[i]) != _key(entry))
            kept.append(updates[i])
        elif i in deletes:
            deleted += 1
        else:
            kept.append(entry)
    added = 0
    seen = {_key(e) for e in kept}
    for text in adds:
        if _key(text) in seen:
            continue
        if len(kept) >= max_entries:
            dropped += 1
            continue
        kept.append(text)
        seen.add(_key(text))
        added += 1
    return LibraryUpdate(tuple(kept), added=added, updated=updated, deleted=deleted, dropped=dropped)
