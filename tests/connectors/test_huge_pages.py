"""The query embedder's memory on huge pages: what is collapsed is what the block allocated, its contents
unchanged, and a system without huge pages is left as it was."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from connectors import huge_pages
from connectors.huge_pages import HUGE, anonymous_regions, collapse, on_huge_pages

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def anon_huge_bytes() -> int:
    return 1024 * int(re.search(r"AnonHugePages:\s+(\d+)", Path("/proc/self/smaps_rollup").read_text())[1])  # type: ignore[index]


def system_has_huge_pages() -> bool:
    """Transparent huge pages that a process may ask for, and a kernel with MADV_COLLAPSE (6.1)."""
    if not sys.platform.startswith("linux") or not THP.exists() or "[never]" in THP.read_text():
        return False
    major, minor = (int(part) for part in re.findall(r"\d+", Path("/proc/sys/kernel/osrelease").read_text())[:2])
    return (major, minor) >= (6, 1)


@pytest.mark.parametrize("background", [False, True])
def test_what_the_block_allocated_is_collapsed_with_its_contents_unchanged(background: bool) -> None:
    huge_before = anon_huge_bytes()
    with on_huge_pages(background=background) as moved:
        weights = bytearray(os.urandom(16 * HUGE))  # 32 MiB through malloc, as a runtime's weights (numpy's
        expected = bytes(weights)  # own large arrays ask for huge pages themselves)
    assert moved.done.wait(timeout=60)
    assert weights == expected
    if system_has_huge_pages():
        assert moved.bytes >= 14 * HUGE  # all but the unaligned ends, at least
        assert anon_huge_bytes() - huge_before >= 14 * HUGE  # and the kernel counts them as huge
    else:
        assert moved.bytes == 0


def test_regions_that_were_there_before_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[frozenset[tuple[int, int]]] = []

    def collapse_noted(regions: frozenset[tuple[int, int]]) -> int:
        asked.append(regions)
        return 0

    monkeypatch.setattr(huge_pages, "collapse", collapse_noted)
    kept = np.ones(8 * HUGE // 8)
    before = anonymous_regions()
    with on_huge_pages():
        pass
    assert len(asked) == 1 and not asked[0] & before  # only what appeared or grew in the block
    assert kept.sum() == 8 * HUGE // 8


def test_a_system_without_huge_pages_or_regions_is_left_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    assert collapse(frozenset()) == 0
    assert collapse(frozenset({(HUGE + 4096, 2 * HUGE + 4096)})) == 0  # no whole 2 MiB page inside
    monkeypatch.setattr(sys, "platform", "darwin")
    assert collapse(frozenset({(0, 64 * HUGE)})) == 0  # not Linux: no madvise asked for
