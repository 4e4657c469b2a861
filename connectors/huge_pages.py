"""A model's memory on 2 MiB pages (Linux transparent huge pages), asked for where it pays: the query embedder.

Why: one query's embedding reads MiniLM's ~90 MB of weights. On 4 KiB pages that is some 22,000 pages, more
than the TLB holds, and after the process slept (a server between requests) their translations are gone
with the caches. One query after 50 ms asleep, MiniLM on ONNX Runtime (2 cores, processes of the code
before and after alternating, three pairs): 7.98, 8.41, 8.29 ms p50 on 4 KiB pages against 7.27, 6.98, 6.09
on huge pages; back to back 4.75, 4.69, 5.00 against 4.69, 4.22, 3.41; the same resident memory. Through
``evolve serve`` (``bench.serve_overhead``, three alternating pairs) the recall went from 9.3, 9.7, 9.2 to
9.0, 9.5, 9.2 ms: there the model's part is smaller than the other steps' cost of waking.

How: ``madvise(MADV_HUGEPAGE)`` then ``madvise(MADV_COLLAPSE)`` (Linux 6.1 and later) on the whole 2 MiB
pages of the anonymous memory and heap that appeared or grew while a model loaded (``on_huge_pages``). The
contents stay as they were. Best effort: on another system, an older kernel or with huge pages turned off
nothing changes and nothing fails; a part the kernel will not collapse stays on small pages. The embedder
has a thread do it after it loads (about 0.3 s for MiniLM, which would double the load).

Example:
    >>> with on_huge_pages() as moved:            # doctest: +SKIP
    ...     weights = load_model()
    >>> moved.bytes                                 # doctest: +SKIP
    121634816
"""

from __future__ import annotations

import ctypes
import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

HUGE = 2 << 20
"""A transparent huge page on x86-64 and arm64 (with 4 KiB base pages): 2 MiB."""
MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25
Region = tuple[int, int]


@dataclass
class Moved:
    """What ``on_huge_pages`` collapsed: ``bytes`` on huge pages now (0 where the system has none), set once
    ``done`` is."""

    bytes: int = 0
    done: threading.Event = field(default_factory=threading.Event)


def anonymous_regions() -> frozenset[Region]:
    """The process's writable anonymous mappings and its heap, as ``(start, end)``; empty off Linux."""
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return frozenset()
    regions = set()
    for line in lines:
        fields = line.split()
        if fields[1].startswith("rw") and (len(fields) == 5 or fields[5] == "[heap]"):
            start, end = (int(address, 16) for address in fields[0].split("-"))
            regions.add((start, end))
    return frozenset(regions)


def collapse(regions: frozenset[Region]) -> int:
    """Ask for huge pages on the whole 2 MiB pages inside ``regions``; the bytes the kernel collapsed."""
    if not sys.platform.startswith("linux") or not regions:
        return 0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError):
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    moved = 0
    for start, end in sorted(regions):
        low, high = -(-start // HUGE) * HUGE, end // HUGE * HUGE
        if high - low < HUGE:
            continue
        madvise(low, high - low, MADV_HUGEPAGE)  # later faults in the range too
        if madvise(low, high - low, MADV_COLLAPSE) == 0:
            moved += high - low
    return moved


@contextmanager
def on_huge_pages(*, background: bool = False) -> Iterator[Moved]:
    """Collapse onto huge pages what the block allocated: the anonymous mappings that appeared and the heap if
    it grew. With ``background`` a thread does it after the block (about 0.3 s for MiniLM's 130 MiB, which a
    loader need not wait for: the pages stay usable while they move)."""
    before = anonymous_regions()
    moved = Moved()
    yield moved
    regions = anonymous_regions() - before

    def run() -> None:
        moved.bytes = collapse(regions)
        moved.done.set()
        log.debug("%d MiB of what was loaded on huge pages", moved.bytes >> 20)

    if background:
        threading.Thread(target=run, name="evolve-huge-pages", daemon=True).start()
    else:
        run()
