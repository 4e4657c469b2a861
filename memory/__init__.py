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

from memory.checks import MAX_FEEDBACK_ID, MAX_ID, MAX_NAMESPACE, fit_id
from memory.config import ForgetConfig, MemoryConfig, RetrievalConfig, similarity_only
from memory.learning import Reinforcement, reinforcements
from memory.records import MemoryItem, Recall, ScoredItem
from memory.scoring import (
    Selection,
    calibrate_threshold,
    credit_weights,
    phase_a,
    select,
    td_update,
    two_phase_scores,
    zscore,
)
from memory.store import MemoryStore
from memory.writer import WriteEntry, Written, compose_experience

__all__ = [
    "MAX_FEEDBACK_ID",
    "MAX_ID",
    "MAX_NAMESPACE",
    "ForgetConfig",
    "MemoryConfig",
    "MemoryItem",
    "MemoryStore",
    "Recall",
    "Reinforcement",
    "RetrievalConfig",
    "ScoredItem",
    "Selection",
    "WriteEntry",
    "Written",
    "calibrate_threshold",
    "compose_experience",
    "credit_weights",
    "fit_id",
    "phase_a",
    "reinforcements",
    "select",
    "similarity_only",
    "td_update",
    "two_phase_scores",
    "zscore",
]
