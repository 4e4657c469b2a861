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

from memory.checks import MAX_FEEDBACK_ID, MAX_ID, MAX_NAMESPACE, check_writer, fit_id, writer_name
from memory.config import ForgetConfig, MemoryConfig, RetrievalConfig, similarity_only
from memory.distrust import DistrustReport
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
from memory.trust import LOCAL_WRITER, TRUST_MODES, WRITER_KINDS, TrustPolicy
from memory.writer import WriteEntry, Written, compose_experience

__all__ = [
    "LOCAL_WRITER",
    "MAX_FEEDBACK_ID",
    "MAX_ID",
    "MAX_NAMESPACE",
    "DistrustReport",
    "ForgetConfig",
    "MemoryConfig",
    "MemoryItem",
    "MemoryStore",
    "Recall",
    "Reinforcement",
    "RetrievalConfig",
    "ScoredItem",
    "Selection",
    "TRUST_MODES",
    "TrustPolicy",
    "WRITER_KINDS",
    "WriteEntry",
    "Written",
    "calibrate_threshold",
    "check_writer",
    "compose_experience",
    "credit_weights",
    "fit_id",
    "phase_a",
    "reinforcements",
    "select",
    "similarity_only",
    "td_update",
    "two_phase_scores",
    "writer_name",
    "zscore",
]
