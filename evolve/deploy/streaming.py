"""Deprecated: ``evolve.deploy.streaming`` moved to ``evolve.serve.streaming``. Its names still import from here, with a DeprecationWarning
that says where each lives now, until 0.3.0 (``connectors.deprecation``).
"""

from connectors.deprecation import moved_module

__getattr__ = moved_module(__name__, "evolve.serve.streaming")
