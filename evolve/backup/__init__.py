"""Backups of a whole Evolve database: SQLite through its online backup API (``database``, which also picks the
backend) and PostgreSQL through ``pg_dump`` and ``pg_restore`` (``postgres``)."""
