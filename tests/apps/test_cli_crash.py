"""A killed ``evolve run SPEC`` / ``evolve job SPEC --once`` resumes without applying any feedback twice.

The harness is ``tests/reliability/crash_cli.py``: the real command is SIGKILLed three times at seeded
random moments, restarted, finished, and compared with an uninterrupted run of the same spec.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.crash_cli import kill_and_resume


@pytest.mark.parametrize("command", ["run", "job"])
def test_a_command_killed_three_times_ends_where_an_uninterrupted_one_does(command: str, tmp_path: Path) -> None:
    result = kill_and_resume(command, tmp_path, kills=3, seed=0)
    assert result["kills_mid_run"] >= 1, "no kill landed while the command was running"
    assert result["memories"] >= 12
    assert result["memories_differing_from_reference"] == 0, result  # same ids, Q and visits
    assert result["visit_mismatches"] == 0 and result["integrity_failures"] == 0, result
