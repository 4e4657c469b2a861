"""A long bulk load does not lock other processes out: it commits in chunks and frees the lock between them.

In one transaction every recall and reinforce meanwhile waited for the whole load (and failed with
"database is locked" once the load outlasted their busy timeout). The check is relative, so that a loaded
machine slows both sides alike instead of failing it: no call fails, and the longest wait of any call is a
small part of the load (one chunk's commit, not the load). The chunks are fixed and small so the load
commits many times; the sizing of the chunks is checked on its own below.
"""

from __future__ import annotations

from pathlib import Path

from memory.write.inserts import chunk_size
from tests.reliability.bulk import contended_load

BUSY_MS = 10_000  # the store's own is 30 s; shorter so that one transaction fails instead of hanging
CHUNK = 5_000  # 16 commits for the 80,000 rows


def test_other_processes_recall_and_reinforce_through_a_long_bulk_load(tmp_path: Path) -> None:
    out = contended_load(f"sqlite:///{tmp_path / 'bulk.db'}", rows=80_000, workers=2, chunk=CHUNK, busy_ms=BUSY_MS)
    assert out["errors"] == [] and out["locked"] == 0  # no call waited as long as the busy timeout
    assert out["max_wait"] < out["load_seconds"] / 3  # nobody waited for the load, only for a chunk of it
    assert out["calls"] > 20  # they kept working all along, not once before and once after


def test_a_bulk_loads_chunks_are_sized_to_hold_the_lock_about_a_second() -> None:
    assert chunk_size(10_000, 0.4) == 20_000  # BULK_SECONDS = 0.8 at the last chunk's rate
    assert chunk_size(10_000, 8.0) == 1_000  # a slow machine: small chunks, never fewer than 1,000 rows
    assert chunk_size(10_000, 0.0) == 200_000  # never more than 200,000 rows
