"""Deprecated: ``evolve.figures`` moved to ``evolve.intervals`` (means over seeds with their intervals, and
paired differences). Its names still import from here, with a DeprecationWarning, until 0.3.0.
"""

from connectors.deprecation import moved_module

__getattr__ = moved_module(__name__, "evolve.intervals")
