"""Deprecated: ``memory.scoring`` moved to ``memory.recall.scoring``, ``memory.learn.rule`` and
``memory.write.grouping``. Its names still import from here, with a DeprecationWarning that says where each lives
now, until 0.3.0 (``connectors.deprecation``).
"""

from connectors.deprecation import moved_module

__getattr__ = moved_module(
    __name__,
    "memory.recall.scoring",
    {
        "GROUP_TOLERANCE": "memory.write.grouping",
        "alpha_for": "memory.learn.rule",
        "assign_groups": "memory.write.grouping",
        "credit_weights": "memory.learn.rule",
        "nearest_keys": "memory.write.grouping",
        "td_update": "memory.learn.rule",
    },
)
