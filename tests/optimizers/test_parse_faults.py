"""A critic that answers junk over a real model server: the prompts stay as they were, with the reason."""

from __future__ import annotations

import pytest

from connectors import ParseError
from optimizers.parsing import parse_rewrite
from tests.reliability.faults import CriticRound, critic_gives_junk


@pytest.fixture(scope="module")
def junk(tmp_path_factory: pytest.TempPathFactory) -> CriticRound:
    return critic_gives_junk(tmp_path_factory.mktemp("junk"))


def test_an_unparseable_critique_keeps_head(junk: CriticRound) -> None:
    assert junk.head_after == junk.head_before
    assert junk.versions == 1  # nothing committed


def test_the_skip_is_recorded_with_its_reason(junk: CriticRound) -> None:
    assert junk.note == "critic answer unparseable twice: skipped"
    assert junk.critic_requests >= 2  # the critic was asked, and the rewrite retried once


def test_a_parse_error_keeps_the_raw_answer() -> None:
    with pytest.raises(ParseError) as caught:
        parse_rewrite("Sure! {{ no tags")
    assert caught.value.raw == "Sure! {{ no tags"
