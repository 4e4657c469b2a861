"""Scheduled self-improvement: one idempotent round per job under a lease (``job``, ``leases``), what it learns
from served ratings first (``served``: the queue, the prompt step's traces, promotion to shared memory) and the
memory upkeep after it (``upkeep``: consolidation and forgetting)."""
