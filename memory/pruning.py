"""Deprecated: ``memory.pruning`` moved to ``memory.upkeep.pruning`` and ``memory.upkeep.removals``. Its names still
import from here, with a DeprecationWarning that says where each lives now, until 0.3.0
(``connectors.deprecation``).
"""

from connectors.deprecation import moved_module

__getattr__ = moved_module(
    __name__,
    "memory.upkeep.pruning",
    {
        "Merge": "memory.upkeep.removals",
        "REMOVAL_INSERT": "memory.upkeep.removals",
        "SET_VALUES": "memory.upkeep.removals",
        "delete_items": "memory.upkeep.removals",
        "removal_ids": "memory.upkeep.removals",
    },
)
