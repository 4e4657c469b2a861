"""Deprecated paths, kept for one release: serving moved to ``evolve.serve`` (its protocols to
``evolve.serve.protocols``), jobs to ``evolve.jobs`` and backups to ``evolve.backup``. The modules left here
(``serving``, ``rating``, ``langchain``, ``mcp_memory``, ``jobs``, ``upkeep``) re-export their names with a
DeprecationWarning until 0.3.0.
"""
