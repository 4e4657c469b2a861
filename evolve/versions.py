"""Deprecated: ``evolve.versions`` moved to ``evolve.ledger`` (it is the HEAD ledger, not prompt versions:
those are ``evolve.prompts.versions``). Its names still import from here, with a DeprecationWarning, until 0.3.0.
"""

from connectors.deprecation import moved_module

__getattr__ = moved_module(__name__, "evolve.ledger")
