"""The command line's options: nonsense numbers are refused where they are parsed, and every option says
what it is in ``--help``."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from apps.cli import main, parser
from apps.options import Deprecated
from tests.apps.test_cli import write_spec


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the command line; it must exit 2 before doing anything. Its stderr."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    return captured.err


def test_run_refuses_zero_rounds_instead_of_running_the_specs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_spec(tmp_path, rounds=2)
    for rounds in ("0", "-3"):
        err = refused(["run", str(spec), "--quiet", "--rounds", rounds], capsys)
        assert f"argument --rounds: must be an integer >= 1, got '{rounds}'" in err
    assert not (tmp_path / "runs.db").exists()  # nothing ran: no round, no database


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["demo", "--rounds", "0"], "argument --rounds: must be an integer >= 1, got '0'"),
        (["demo", "--seed", "-1"], "argument --seed: must be an integer >= 0, got '-1'"),
        (["marft", "{spec}", "--steps", "0"], "argument --steps: must be an integer >= 1, got '0'"),
        (["marft", "{spec}", "--steps", "-2"], "argument --steps: must be an integer >= 1, got '-2'"),
        (["prompts", "log", "--limit", "0"], "argument --limit: must be an integer >= 1, got '0'"),
        (["memory", "show", "--limit", "-1"], "argument --limit: must be an integer >= 1, got '-1'"),
        (["adapters", "log", "--run", "team", "--limit", "-1"], "argument --limit: must be an integer >= 1"),
        (["serve", "{spec}", "--port", "70000"], "argument --port: must be an integer from 0 to 65535, got '70000'"),
        (["serve", "{spec}", "--port", "-1"], "argument --port: must be an integer from 0 to 65535"),
        (["playground", "--port", "0"], "argument --port: must be an integer from 1 to 65535, got '0'"),
        (["scheduler", "{spec}", "--every", "1m", "--max-runs", "0"], "argument --max-runs: must be an integer >= 1"),
        (["job", "{spec}", "--once", "--lease-ttl", "0"], "argument --lease-ttl: must be a positive number of seconds"),
        (["job", "{spec}", "--once", "--lease-ttl", "nan"], "argument --lease-ttl: must be a positive number"),
        (["job", "{spec}", "--once", "--lease-ttl", "inf"], "argument --lease-ttl: must be a positive number"),
        (["run", "{spec}", "--rounds", "three"], "argument --rounds: must be an integer >= 1, got 'three'"),
    ],
)
def test_nonsense_numbers_are_refused_with_what_was_expected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    spec = write_spec(tmp_path)
    err = refused([a.format(spec=spec) for a in argv], capsys)
    assert expected in err
    assert not (tmp_path / "runs.db").exists()


def test_the_smallest_sensible_numbers_are_accepted() -> None:
    p = parser()
    assert p.parse_args(["run", "spec.toml", "--rounds", "1"]).rounds == 1
    assert p.parse_args(["demo", "--seed", "0"]).seed == 0
    assert p.parse_args(["serve", "spec.toml", "--port", "0"]).port == 0  # 0: a free port
    assert p.parse_args(["job", "spec.toml", "--once", "--lease-ttl", "0.5"]).lease_ttl == 0.5
    assert p.parse_args(["run", "spec.toml"]).rounds is None  # the spec's rounds


def arguments(p: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    """Every argument of ``p`` and of its subcommands, with the command it belongs to."""
    for action in p._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        yield path, action
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from arguments(sub, f"{path} {name}")


def test_every_argument_of_every_command_has_help_text() -> None:
    found = list(arguments(parser(), "evolve"))
    commands = {path for path, _ in found}
    assert {"evolve memory", "evolve adapters log", "evolve serve", "evolve job", "evolve playground"} <= commands
    missing = [
        f"{path} {'/'.join(action.option_strings) or action.dest}"
        for path, action in found
        if (not action.help or action.help == argparse.SUPPRESS) and not isinstance(action, Deprecated)
    ]  # an old spelling is hidden on purpose (tests/apps/test_cli_grammar.py)
    assert missing == []
