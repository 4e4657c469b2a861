"""Deprecated: ``connectors.env`` moved to ``connectors.environment`` (the environment seam). Its names still
import from here, with a DeprecationWarning, until 0.3.0.
"""

from connectors.deprecation import moved_module

__getattr__ = moved_module(__name__, "connectors.environment")
