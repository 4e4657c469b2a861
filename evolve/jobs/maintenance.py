"""Memory upkeep between rounds: consolidation and forgetting for every agent of a team
(docs/design/decisions.md, "A memory that matures").

``evolve job`` runs it after the round, inside the run's lease, so two jobs never consolidate one
memory at once. Each step is idempotent (``MemoryStore.consolidate`` and ``MemoryStore.prune``): a job
killed during upkeep leaves each namespace as it was or done, and the next job finishes the work.

Example:
    >>> from connectors import HashEmbedder
    >>> from memory import MemoryStore
    >>> with MemoryStore("sqlite://", embedder=HashEmbedder()) as store:
    ...     for _ in range(3):
    ...         _ = store.write("door code?", trajectory="Answer given: 4471", feedback="right", success=True)
    ...     print(memory_upkeep(store, ["default"], consolidate=True).note())
    consolidated 1 new strategies (0 replacing older ones, 0 unchanged)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from connectors.chat import ChatModel
from memory import MemoryStore
from memory.upkeep.pruning import PruneReport
from memory.upkeep.strategies import Consolidation


@dataclass(frozen=True)
class Upkeep:
    """What one upkeep did: a consolidation and a pruning report per namespace (empty when off)."""

    consolidated: list[Consolidation] = field(default_factory=list)
    pruned: list[PruneReport] = field(default_factory=list)

    def note(self) -> str:
        """One line for the job's record (empty when upkeep is off)."""
        parts = []
        if self.consolidated:
            written = sum(len(c.written) for c in self.consolidated)
            replaced = sum(len(c.replaced) for c in self.consolidated)
            same = sum(c.unchanged for c in self.consolidated)
            parts.append(f"consolidated {written} new strategies ({replaced} replacing older ones, {same} unchanged)")
        if self.pruned:
            counts: dict[str, int] = {}
            for p in self.pruned:
                for tier, n in p.counts.items():
                    counts[tier] = counts.get(tier, 0) + n
            kept = sum(n for p in self.pruned for n in p.kept.values())
            removed = ", ".join(f"{n} {tier}" for tier, n in counts.items()) or "nothing"
            parts.append(f"pruned {removed}; {kept} memories kept")
            expired = sum(p.recalls_expired for p in self.pruned)
            if expired:
                parts.append(f"{expired} recalls past the log's retention expired")
        return "; ".join(parts)


def memory_upkeep(
    store: MemoryStore,
    namespaces: Sequence[str],
    *,
    consolidate: bool = False,
    min_size: int = 3,
    llm: ChatModel | None = None,
    prune: bool = False,
) -> Upkeep:
    """Consolidate (when asked) then prune (when the store's ``MemoryConfig.forget`` has a budget or merges)
    each namespace, one after the other."""
    consolidated = [store.consolidate(ns, llm=llm, min_size=min_size) for ns in namespaces] if consolidate else []
    pruned = [store.prune(ns) for ns in namespaces] if prune else []
    return Upkeep(consolidated, pruned)


def forgets(store: MemoryStore) -> bool:
    """Whether the store's forgetting config asks for anything (a capacity, merging, or a recall log retention)."""
    f = store.config.forget
    return f.capacity is not None or f.merge_similarity is not None or f.recall_retention is not None
