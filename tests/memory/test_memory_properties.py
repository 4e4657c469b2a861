"""Property-based: generated calls on the memory API are answered or refused cleanly (``tests.reliability.hostile_input``).

Any Unicode (NUL and lone surrogates included), texts over the size limit, NaN/±inf/bool/str rewards,
unknown and malformed recall ids, wrong types everywhere, malformed import files: each call succeeds
with a consistent result, or raises an ``EvolveError`` naming the argument and leaves the store as it was.
"""

from __future__ import annotations

import pytest

from connectors.errors import ConfigError
from memory.write.checks import MAX_TEXT
from tests.reliability.hostile_input import HOSTILE, Tally, hostile_roundtrip, memory_property, seeded_store


def assert_clean(tally: Tally) -> None:
    assert tally.foreign == [], "errors that were not EvolveError"
    assert tally.changed == [], "rejected calls that changed the store"
    assert tally.unnamed == [], "errors that name no argument"
    assert tally.ok > 0 and tally.refused > 0, (tally.ok, tally.refused)


def test_generated_calls_succeed_or_fail_cleanly_on_sqlite() -> None:
    tally = Tally()
    memory_property("sqlite://", 150, tally)
    assert_clean(tally)


@pytest.mark.postgres
def test_generated_calls_succeed_or_fail_cleanly_on_postgres(pg_url: str) -> None:
    tally = Tally()
    memory_property(pg_url, 40, tally)
    assert_clean(tally)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"intent": "a\x00b"}, "intent"),
        ({"experience": "\ud800"}, "experience"),
        ({"intent": "x" * (MAX_TEXT + 1)}, "intent"),
        ({"namespace": "n\x00"}, "namespace"),
        ({"meta": {"k": "v\x00"}}, "meta"),
        ({"meta": {"k": float("nan")}}, "meta"),
        ({"q": 10**400}, "q"),
        ({"id": "i" * 65}, "id"),
        ({"success": "no"}, "success"),
    ],
)
def test_text_no_backend_can_store_is_a_config_error_naming_the_argument(kwargs: dict, named: str) -> None:
    with seeded_store("sqlite://") as store:
        before = len(store.items())
        call = {"intent": "sort a list", "experience": "use sorted", **kwargs}
        with pytest.raises(ConfigError, match=named):
            store.add(**call)
        assert len(store.items()) == before


def test_hostile_strings_round_trip_on_sqlite() -> None:
    with seeded_store("sqlite://") as store:
        outcomes = [hostile_roundtrip(store, text) for text in HOSTILE]
    assert outcomes.count("refused") == 1 and outcomes[-1] == "refused"  # only the NUL


@pytest.mark.postgres
def test_hostile_strings_round_trip_on_postgres(pg_url: str) -> None:
    with seeded_store(pg_url) as store:
        outcomes = [hostile_roundtrip(store, text) for text in HOSTILE]
    assert outcomes.count("refused") == 1 and outcomes[-1] == "refused"
