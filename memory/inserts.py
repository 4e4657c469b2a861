"""Deprecated: ``memory.inserts`` moved to ``memory.write.inserts``, ``memory.storage.database`` and
``memory.write.batch``. Its names still import from here, with a DeprecationWarning that says where each lives
now, until 0.3.0 (``connectors.deprecation``).
"""

from connectors.deprecation import moved_module

__getattr__ = moved_module(
    __name__,
    "memory.write.inserts",
    {
        "BULK_PAUSE": "memory.storage.database",
        "NewItems": "memory.write.batch",
    },
)
