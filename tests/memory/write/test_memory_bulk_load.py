"""A long bulk load does not lock other processes out: it commits in chunks and frees the lock between them.

The load below holds SQLite's write lock for several times the other processes' busy timeout in all;
in one transaction every recall and reinforce meanwhile failed with "database is locked". The busy
timeout here is 1.5 s so that the check can fail (the store's own is 30 s); the chunks are fixed and
small (every chunk, not only the first: later ones were sized to take 0.8 s, and on a loaded CI machine
one outlasted the 1.5 s) so that a slowed machine does not make one commit outlast it (the sizing of the
chunks is checked on its own below).
"""

from __future__ import annotations

from pathlib import Path

from memory.write.inserts import chunk_size
from tests.reliability.bulk import contended_load

BUSY_MS = 1500
CHUNK = 5_000  # a commit every ~0.2 s here: a margin the sized chunks (0.8 s each) lack on a loaded machine


def test_other_processes_recall_and_reinforce_through_a_long_bulk_load(tmp_path: Path) -> None:
    out = contended_load(f"sqlite:///{tmp_path / 'bulk.db'}", rows=80_000, workers=2, chunk=CHUNK, busy_ms=BUSY_MS)
    assert out["load_seconds"] > BUSY_MS / 1000  # the load outlasts the busy timeout: the check can fail
    assert out["errors"] == [] and out["locked"] == 0  # no call waited as long as the busy timeout
    assert out["calls"] > 40  # they kept working all along, not once before and once after


def test_a_bulk_loads_chunks_are_sized_to_hold_the_lock_about_a_second() -> None:
    assert chunk_size(10_000, 0.4) == 20_000  # BULK_SECONDS = 0.8 at the last chunk's rate
    assert chunk_size(10_000, 8.0) == 1_000  # a slow machine: small chunks, never fewer than 1,000 rows
    assert chunk_size(10_000, 0.0) == 200_000  # never more than 200,000 rows
