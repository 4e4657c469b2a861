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
from memory.distrust import DistrustReport
from memory.learning import Reinforcement, reinforcements
from memory.records import MemoryItem, Recall, ScoredItem
from memory.scoring import calibrate_threshold
from memory.store import MemoryStore
from memory.trust import TrustPolicy
from memory.writer import WriteEntry

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
    "LOCAL_WRITER": "memory.trust",
    "TRUST_MODES": "memory.trust",
    "WRITER_KINDS": "memory.trust",
    "MAX_FEEDBACK_ID": "memory.checks",
    "MAX_ID": "memory.checks",
    "MAX_NAMESPACE": "memory.checks",
    "check_writer": "memory.checks",
    "fit_id": "memory.checks",
    "writer_name": "memory.checks",
    "Selection": "memory.scoring",
    "credit_weights": "memory.scoring",
    "phase_a": "memory.scoring",
    "select": "memory.scoring",
    "td_update": "memory.scoring",
    "two_phase_scores": "memory.scoring",
    "zscore": "memory.scoring",
    "Written": "memory.writer",
    "compose_experience": "memory.writer",
}


def __getattr__(name: str) -> Any:  # PEP 562: only names not defined above get here
    return moved("memory", name, _MOVED)
