"""Message, Usage, Completion, as_messages, the error hierarchy and the package's public names."""

from __future__ import annotations

import dataclasses

import pytest

import connectors
from connectors import (
    Completion,
    ConfigError,
    ConnectorError,
    EvolveError,
    Message,
    ParseError,
    ProviderTimeout,
    RateLimited,
    StoreError,
    Usage,
)
from connectors.types import as_messages


def test_message_validates_role_and_content() -> None:
    assert Message("user", "hi").to_dict() == {"role": "user", "content": "hi"}
    with pytest.raises(ConfigError, match="role"):
        Message("robot", "hi")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="content must be str"):
        Message("user", 42)  # type: ignore[arg-type]


def test_a_message_may_name_its_speaker() -> None:
    said = Message("assistant", "Found it.", name="researcher")
    assert said.to_dict() == {"role": "assistant", "content": "Found it.", "name": "researcher"}
    assert as_messages([said.to_dict()]) == [said] and "name='researcher'" in repr(said)
    with pytest.raises(ConfigError, match="name must be a non-empty string"):
        Message("user", "hi", name=" ")


def test_values_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Message("user", "hi").content = "changed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Completion("a", "m").text = "b"  # type: ignore[misc]


def test_usage_adds_up() -> None:
    total = Usage(1, 2, 0.5) + Usage(10, 20, 0.25)
    assert total == Usage(11, 22, 0.75) and total.total_tokens == 33
    assert Usage() == Usage(0, 0, 0.0)


def test_as_messages_accepts_strings_dicts_and_messages() -> None:
    assert as_messages("hi") == [Message("user", "hi")]
    mixed = as_messages([{"role": "system", "content": "be brief"}, Message("user", "hi")])
    assert mixed == [Message("system", "be brief"), Message("user", "hi")]


@pytest.mark.parametrize(
    ("bad", "match"), [([], "must not be empty"), ([{"role": "user"}], r"messages\[0\]"), (["hi"], r"messages\[0\]")]
)
def test_as_messages_rejects_bad_input(bad: list[object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        as_messages(bad)  # type: ignore[arg-type]


def test_errors_say_how_to_recover() -> None:
    assert all(issubclass(e, EvolveError) for e in (ConfigError, ConnectorError, ParseError, StoreError))
    assert issubclass(ConfigError, ValueError)  # callers catching ValueError still work
    assert RateLimited("slow", retry_after=2.0).retryable and RateLimited("slow").retry_after is None
    assert ProviderTimeout("late").retryable
    assert not ConnectorError("boom").retryable and ConnectorError("boom", retryable=True).retryable
    assert ParseError("not JSON", raw="{oops").raw == "{oops"


def test_public_names_exist() -> None:
    assert sorted(connectors.__all__) == connectors.__all__
    for name in connectors.__all__:
        assert hasattr(connectors, name), name
