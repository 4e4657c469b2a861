"""The experience library: its numbered text format and the deterministic merge of a batch's operations."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from connectors import ConfigError
from optimizers.library import merge_operations, parse_library, render_library
from optimizers.parsing import Operation

LIBRARY = [
    "When the task gives units, keep them in the answer.",
    "When a number is negative, say so.",
    "When unsure, guess.",
]


def test_render_numbers_entries_and_an_empty_library_is_empty_text() -> None:
    assert render_library(["When a, do b.", "When c, do d."]) == "[1] When a, do b.\n[2] When c, do d."
    assert render_library([]) == ""
    assert parse_library("") == []


def test_parse_strips_numbering_and_bullets() -> None:
    text = "[1] When a, do b.\n\n- When c, do d.\n3. When e, do f.\n  When g, do h."
    assert parse_library(text) == ["When a, do b.", "When c, do d.", "When e, do f.", "When g, do h."]
    assert parse_library(render_library(LIBRARY)) == LIBRARY


def test_a_batch_of_operations_merges_into_the_golden_library(golden: Callable[[str, str], None]) -> None:
    group1 = [
        Operation(op="UPDATE", id=1, text="When the task gives units, convert them and keep them in the answer."),
        Operation(op="DELETE", id=3),
        Operation(op="ADD", text="When the answer is a fraction, simplify it."),
    ]
    group2 = [
        Operation(op="ADD", text="when the answer is a fraction,  simplify it."),  # same as group 1's
        Operation(op="UPDATE", id=1, text="When units appear, ignore them."),  # the first update wins
        Operation(op="DELETE", id=2),
        Operation(op="UPDATE", id=2, text="When a number is negative, keep its sign."),  # update beats delete
        Operation(op="UPDATE", id=9, text="When time is short, answer first."),  # unknown id: an add
        Operation(op="DELETE", id=7),  # unknown id: ignored
        Operation(op="KEEP"),
    ]
    update = merge_operations(LIBRARY, group1 + group2, max_entries=30)
    assert (update.added, update.updated, update.deleted, update.dropped) == (2, 2, 1, 1)
    assert update.changed
    golden("library.txt", update.text + "\n")


def test_adds_past_max_entries_are_dropped() -> None:
    update = merge_operations(
        LIBRARY, [Operation(op="ADD", text=f"When {i}, do {i}.") for i in range(3)], max_entries=4
    )
    assert len(update.entries) == 4
    assert (update.added, update.dropped) == (1, 2)


def test_keep_only_or_no_op_changes_nothing() -> None:
    update = merge_operations(LIBRARY, [Operation(op="KEEP"), Operation(op="UPDATE", id=2, text=LIBRARY[1])])
    assert not update.changed
    assert update.entries == tuple(LIBRARY)
    with pytest.raises(ConfigError):
        merge_operations(LIBRARY, [], max_entries=0)
