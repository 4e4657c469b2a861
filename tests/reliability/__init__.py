"""Reliability and security scenarios the suite asserts on, and ``bench`` runs at size.

Each module is a harness: crash trials (``crash``, ``crash_cli``), concurrency and load (``load``,
``serve_load``, ``bulk``), model faults (``faults``), hostile input (``hostile_input``,
``spec_and_server``, ``sql_scan``), tenant, injection and secret probes (``security_probes``,
``tenant_probes``, ``secret_probes``) and backups (``backup``). The tests run them at CI size; the
``bench/reliability_<part>.py`` modules run them larger, time them and write bench/results/RELIABILITY.md.
Nothing here imports ``bench``.
"""
