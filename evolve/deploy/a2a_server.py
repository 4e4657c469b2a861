"""Deprecated: ``evolve.deploy.a2a_server`` moved to ``evolve.serve.protocols.a2a``. Its names still import from here, with a DeprecationWarning
that says where each lives now, until 0.3.0 (``connectors.deprecation``).
"""

from connectors.deprecation import moved_module

__getattr__ = moved_module(__name__, "evolve.serve.protocols.a2a")
