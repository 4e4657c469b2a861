"""Property-based: generated spec files load, or fail with a ``ConfigError`` naming the file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.errors import ConfigError
from evolve.spec import load_spec
from tests.reliability.hostile_input import Tally
from tests.reliability.spec_and_server import spec_property, toml_document


def test_generated_spec_files_load_or_name_the_field() -> None:
    tally = Tally()
    spec_property(120, tally)
    assert tally.foreign == [] and tally.unnamed == []
    assert tally.ok > 0 and tally.refused > 0


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"\xff\xfe[run]\n", "not UTF-8"),
        (b"[memory]\ndelta = nan\n", "memory.delta"),
        (b"[memory]\nk1 = 0\n", "memory.k1"),
        (b"[memory]\nlam = 2.5\n", "memory.lam"),
        (b'[run]\nrounds = "five"\n', "run.rounds"),
        (b'[run]\nname = "codes@alice"\n', "run.name"),  # would be tenant alice's run of "codes"
        (b'[run]\nname = "codes/solver"\n', "run.name"),
    ],
)
def test_bad_spec_files_are_config_errors(tmp_path: Path, raw: bytes, expected: str) -> None:
    path = tmp_path / "spec.toml"
    path.write_bytes(raw)
    with pytest.raises(ConfigError, match=expected):
        load_spec(path)


def test_toml_writer_round_trips_the_base_spec(tmp_path: Path) -> None:
    from tests.reliability.spec_and_server import BASE_SPEC

    path = tmp_path / "spec.toml"
    path.write_text(toml_document(BASE_SPEC))
    assert load_spec(path).memory.k2 == 2
