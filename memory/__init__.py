"""Q-valued episodic memory (MemRL): a store of experiences whose utility is learned from reward.

Example:
    >>> from connectors import HashEmbedder
    >>> from memory import MemoryStore
    >>> store = MemoryStore("sqlite://", embedder=HashEmbedder())
    >>> _ = store.add("sort a list", "use sorted()")
    >>> [item.experience for item in store.retrieve("sort a list").items]
    ['use sorted()']
    >>> store.close()

This package imports only ``connectors`` (and numpy, sqlalchemy; faiss lazily).
"""

from typing import Any

from connectors.deprecation import moved
from memory.config import ForgetConfig, MemoryConfig, RetrievalConfig, similarity_only
from memory.defences.distrust import DistrustReport
from memory.defences.trust import TrustPolicy
from memory.learn.rewards import Reinforcement, reinforcements
from memory.recall.scoring import calibrate_threshold
from memory.storage.records import MemoryItem, Recall, ScoredItem
from memory.store import MemoryStore
from memory.write.writer import WriteEntry

__all__ = [
    "DistrustReport",
    "ForgetConfig",
    "MemoryConfig",
    "MemoryItem",
    "MemoryStore",
    "Recall",
    "Reinforcement",
    "RetrievalConfig",
    "ScoredItem",
    "TrustPolicy",
    "WriteEntry",
    "calibrate_threshold",
    "reinforcements",
    "similarity_only",
]

# Names this face exported before 0.2.0: the maths, the limits and checks, the writer's internals. Each
# still imports from here, with a DeprecationWarning naming its module, until connectors.deprecation's
# REMOVED_IN.
_MOVED = {
    "LOCAL_WRITER": "memory.defences.trust",
    "TRUST_MODES": "memory.defences.trust",
    "WRITER_KINDS": "memory.defences.trust",
    "MAX_FEEDBACK_ID": "memory.write.checks",
    "MAX_ID": "memory.write.checks",
    "MAX_NAMESPACE": "memory.write.checks",
    "check_writer": "memory.write.checks",
    "fit_id": "memory.write.checks",
    "writer_name": "memory.write.checks",
    "Selection": "memory.recall.scoring",
    "credit_weights": "memory.learn.rule",
    "phase_a": "memory.recall.scoring",
    "select": "memory.recall.scoring",
    "td_update": "memory.learn.rule",
    "two_phase_scores": "memory.recall.scoring",
    "zscore": "memory.recall.scoring",
    "Written": "memory.write.writer",
    "compose_experience": "memory.write.writer",
}


def __getattr__(name: str) -> Any:  # PEP 562: only names not defined above get here
    return moved("memory", name, _MOVED)
