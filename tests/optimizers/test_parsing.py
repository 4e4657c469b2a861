"""Parsing the critic's answers: tolerant of chatter, strict about shape, ParseError keeps the raw text."""

from __future__ import annotations

import pytest

from connectors import ParseError
from optimizers.parsing import Operation, parse_critique, parse_lessons, parse_operations, parse_rewrite, parse_summary


def test_rewrite_is_the_text_between_the_tags_despite_chatter() -> None:
    raw = "Here is my proposal.\n<new_text>\n  Always state the units.\nCheck signs.\n</new_text>\nHope it helps!"
    assert parse_rewrite(raw) == "Always state the units.\nCheck signs."


def test_rewrite_takes_the_last_block_when_the_tags_are_echoed() -> None:
    raw = "I will put it between <new_text> and </new_text> as asked.\n<NEW_TEXT>Be exact.</NEW_TEXT>"
    assert parse_rewrite(raw) == "Be exact."


@pytest.mark.parametrize(
    "raw", ["Always state the units.", "<new_text>Always state the units.", "<new_text>  </new_text>"]
)
def test_rewrite_without_a_complete_nonempty_block_is_a_parse_error(raw: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_rewrite(raw)
    assert info.value.raw == raw


def test_critique_is_free_text_and_no_change_means_none() -> None:
    assert parse_critique("  Add a rule about units.\n") == "Add a rule about units."
    assert parse_critique("NO CHANGE") is None
    assert parse_critique("no change.") is None
    with pytest.raises(ParseError, match="critique") as info:
        parse_critique("  \n")
    assert info.value.raw == "  \n"


def test_lessons_and_summaries() -> None:
    assert parse_lessons("When x, do y.") == "When x, do y."
    assert parse_lessons("NONE") is None
    assert parse_summary(" it tried twice ") == "it tried twice"
    with pytest.raises(ParseError):
        parse_summary("")


def test_operations_from_a_fenced_block() -> None:
    raw = 'Sure:\n```json\n[{"op": "ADD", "id": null, "text": "When x, do y."}, {"op": "DELETE", "id": 2}]\n```'
    assert parse_operations(raw) == [Operation(op="ADD", text="When x, do y."), Operation(op="DELETE", id=2)]


def test_operations_from_chatter_are_normalised() -> None:
    raw = 'I propose [{"op": "update", "id": "3", "text": "[3] When z, do w."}, {"op": "none"}] and nothing else.'
    assert parse_operations(raw) == [Operation(op="UPDATE", id=3, text="When z, do w."), Operation(op="KEEP")]


def test_operations_accept_a_wrapper_object_or_one_object_or_an_empty_list() -> None:
    assert parse_operations('{"operations": [{"op": "KEEP"}]}') == [Operation(op="KEEP")]
    assert parse_operations('{"op": "ADD", "text": "When a, do b."}') == [Operation(op="ADD", text="When a, do b.")]
    assert parse_operations("[]") == []


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("no json here", "no parseable JSON"),
        ('[{"op": "RENAME", "id": 1}]', "item 0.op"),
        ('[{"op": "UPDATE", "text": "When a, do b."}]', "UPDATE needs the id"),
        ('[{"op": "DELETE", "id": 0}]', "DELETE needs the id"),
        ('[{"op": "ADD", "text": "  "}]', "ADD needs a non-empty text"),
        ('"ADD"', "expected a JSON list"),
    ],
)
def test_bad_operations_are_parse_errors_keeping_the_raw_text(raw: str, message: str) -> None:
    with pytest.raises(ParseError, match=message) as info:
        parse_operations(raw)
    assert info.value.raw == raw


def test_degenerate_loops_and_cut_off_clauses_are_trimmed() -> None:
    from optimizers.parsing import trim_degenerate

    looping = "Keep it short; name the unit; the answer is right; the answer is right; the answer is"
    assert trim_degenerate(looping) == "Keep it short; name the unit; the answer is right"
    assert trim_degenerate("Use version 2.5 of the API. Be brief. Be brief.") == "Use version 2.5 of the API. Be brief."
    assert trim_degenerate("BE BRIEF. be  brief. Say more.") == "BE BRIEF."  # repeats ignore case and spacing
    assert trim_degenerate("Answer in one line\nName the unit") == "Answer in one line\nName the unit"
    assert trim_degenerate("State the units. Then") == "State the units."  # cut off by the token limit
    assert trim_degenerate("...") == "..."  # nothing to trim to: the text stays


def test_untagged_rewrite_falls_back_to_the_first_real_paragraph() -> None:
    from optimizers.parsing import parse_untagged_rewrite

    assert parse_untagged_rewrite("x <new_text>Be brief.</new_text>") == "Be brief."
    raw = (
        "Here is the new text:\n\nAnswer in at most seven words.\nAnswer in at most seven words.\n\nMore chatter here."
    )
    assert parse_untagged_rewrite(raw) == "Answer in at most seven words."
    with pytest.raises(ParseError):
        parse_untagged_rewrite("Okay.\n\nSure:")
