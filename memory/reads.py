"""Deprecated: ``memory.reads`` moved to ``memory.storage.items``, ``memory.learn.targets``, ``memory.recall.log``
and ``memory.recall.retrieving``. Its names still import from here, with a DeprecationWarning that says where each
lives now, until 0.3.0 (``connectors.deprecation``).
"""

from connectors.deprecation import moved_module

__getattr__ = moved_module(
    __name__,
    "memory.storage.items",
    {
        "FEEDBACK_SELECT": "memory.learn.targets",
        "HEAD_FIELDS": "memory.recall.log",
        "LOGGED_SELECT": "memory.learn.targets",
        "RECALL_INSERT": "memory.recall.log",
        "SELECT_ATTEMPTS": "memory.recall.retrieving",
        "explain": "memory.recall.log",
        "feedback_applied": "memory.learn.targets",
        "foreign_ids": "memory.learn.targets",
        "log_recalls": "memory.recall.log",
        "logged_recall": "memory.learn.targets",
        "recall_row": "memory.recall.log",
        "recall_targets": "memory.learn.targets",
        "revalued": "memory.recall.retrieving",
        "select_memories": "memory.recall.retrieving",
        "selected_items": "memory.recall.retrieving",
        "superseded": "memory.recall.log",
    },
)
