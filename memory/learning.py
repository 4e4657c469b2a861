"""Deprecated: ``memory.learning`` moved to ``memory.learn.rewards`` and ``memory.learn.targets``. Its names still
import from here, with a DeprecationWarning that says where each lives now, until 0.3.0
(``connectors.deprecation``).
"""

from connectors.deprecation import moved_module

__getattr__ = moved_module(
    __name__,
    "memory.learn.rewards",
    {
        "LOGGED_IN": "memory.learn.targets",
        "logged_namespaces": "memory.learn.targets",
        "resolve_recall": "memory.learn.targets",
    },
)
