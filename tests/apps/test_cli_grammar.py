"""One grammar for every ``evolve`` command (issue 41, item 6), checked over the whole parser tree, so a new
command or flag that breaks it fails here: a run is found by its spec (``SPEC``, or ``--spec SPEC`` where
``--db URL`` is the alternative), ``--host`` is the address to listen on, ``-v``/``-q`` say more or less,
groups of actions are subcommands, and everything has help. Old spellings still parse for one release,
hidden, with a warning on stderr."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from apps.cli import main, parser
from apps.options import Deprecated, located, server_log_level
from evolve.spec import load_spec

ABOUT_ONE_RUN = {"run", "marft", "serve", "mcp", "a2a", "job", "scheduler", "playground", "team diagnose"}
READS_A_DATABASE = {"report", "prompts log", "prompts show", "prompts diff", "prompts rollback", "adapters log",
                    "adapters rollback", *(f"memory {a}" for a in ("stats", "show", "export", "import", "backup",
                    "restore", "consolidate", "prune", "history", "undo", "distrust", "release", "quarantined"))}  # fmt: skip


def tree(
    p: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """``evolve`` and every command under it, by the words that name it (``("memory", "stats")``)."""
    found = [(path, p)]
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += tree(sub, (*path, name))
    return found


def groups(p: argparse.ArgumentParser) -> list[argparse._SubParsersAction]:
    return [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]


COMMANDS = tree(parser())
LEAVES = {" ".join(path): p for path, p in COMMANDS if not groups(p)}


def options(p: argparse.ArgumentParser, *, visible: bool = True) -> set[str]:
    return {s for a in p._actions for s in a.option_strings if not visible or a.help != argparse.SUPPRESS}


def positionals(p: argparse.ArgumentParser) -> set[str]:
    return {a.dest for a in p._actions if not a.option_strings and not isinstance(a, argparse._SubParsersAction)}


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=lambda path: " ".join(("evolve", *path)))
def test_every_commands_help_exits_0_and_prints_its_usage(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([*path, "--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {' '.join(('evolve', *path))} ")
    if path:  # what the command does, under its usage line
        assert out.split("\n\n")[1].strip() and not out.split("\n\n")[1].startswith(("positional", "options"))


def test_help_in_a_process_of_its_own(repo_root: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "apps.cli", "memory", "stats", "--help"], cwd=repo_root, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("usage: evolve memory stats ") and "--spec SPEC | --db URL" in done.stdout


def test_every_flag_and_subcommand_has_help() -> None:
    missing = []
    for path, p in COMMANDS:
        for action in p._actions:
            if isinstance(action, Deprecated):
                assert action.help == argparse.SUPPRESS  # hidden on purpose: see the tests below
            elif not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"evolve {' '.join(path)} {'/'.join(action.option_strings) or action.dest}")
        for group in groups(p):
            missing += [f"evolve {' '.join(path)} {c.dest}" for c in group._choices_actions if not c.help]
    assert missing == []


def test_no_command_shows_an_old_spelling() -> None:
    for path, p in COMMANDS:
        shown = options(p)
        assert not shown & {"--address", "--log-level", "--graph"}, path
        if "--port" in shown:  # listens: the address is --host, everywhere
            assert "--host" in shown, path
        for old in options(p, visible=False) - shown:
            assert old in {"--address", "--log-level", "--graph", "--embedder"}, (path, old)


def test_every_command_says_more_or_less_with_v_and_q() -> None:
    for name, p in {"": parser(), **LEAVES}.items():
        assert {"-v", "--verbose", "-q", "--quiet"} <= options(p), name


def test_a_run_is_found_by_its_spec_in_every_command_but_the_demo() -> None:
    about_one_run = {name for name, p in LEAVES.items() if "spec" in positionals(p)}
    reads_a_database = {name for name, p in LEAVES.items() if "--spec" in options(p)}
    assert about_one_run == ABOUT_ONE_RUN and reads_a_database == READS_A_DATABASE
    assert set(LEAVES) == ABOUT_ONE_RUN | READS_A_DATABASE | {"demo"}
    for name, p in LEAVES.items():
        if "--db" in options(p):  # the alternative to --spec, never given with it; playground: its spec's override
            assert name == "playground" or any(
                {a.dest for a in g._group_actions} == {"spec", "db"} for g in p._mutually_exclusive_groups
            ), name


def test_spec_and_db_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["report"], ["prompts", "log"], ["adapters", "log"], ["memory", "history"]):
        with pytest.raises(SystemExit) as stopped:
            main([*argv, "--spec", "facility_codes", "--db", "sqlite://"])
        assert stopped.value.code == 2
        assert "argument --db: not allowed with argument --spec" in capsys.readouterr().err


def test_a_bundled_spec_by_name_gives_the_database_and_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    args = parser().parse_args(["prompts", "log", "--spec", "facility_codes"])
    url, run = located(args, "prompts log")
    assert (url, run) == (load_spec("facility_codes").run.database, "facility-codes")  # as evolve run finds them
    assert capsys.readouterr().err.startswith("evolve prompts log: database sqlite:///")
    assert located(parser().parse_args(["prompts", "log", "--db", "sqlite://"]), "prompts log") == ("sqlite://", None)


@pytest.mark.parametrize(
    "argv",
    [
        *[["memory", a] for a in ("stats", "show", "consolidate", "prune", "history", "distrust", "release")],
        ["memory", "quarantined"],
        ["memory", "undo", "id1", "id2"],
        ["memory", "export", "m.jsonl"],
        ["memory", "import", "m.jsonl"],
        ["memory", "backup", "b.db"],
        ["memory", "restore", "b.db", "--force"],
        ["prompts", "log"],
        ["prompts", "show", "abc"],
        ["prompts", "diff", "abc", "def"],
        ["prompts", "rollback"],
        ["adapters", "log", "--run", "r"],
        ["adapters", "rollback", "--run", "r", "--agent", "solver", "--to", "base"],
    ],
    ids=" ".join,
)
def test_the_old_action_first_command_lines_still_parse(argv: list[str]) -> None:
    args = parser().parse_args([*argv, "--db", "sqlite://"])
    assert (args.command, args.action) == (argv[0], argv[1]) and callable(args.func)


def test_v_and_q_go_before_or_after_the_command_but_not_together(capsys: pytest.CaptureFixture[str]) -> None:
    p = parser()
    assert p.parse_args(["-v", "run", "spec.toml"]).verbose == 1
    assert p.parse_args(["run", "spec.toml", "-vv"]).verbose == 2
    assert p.parse_args(["job", "spec.toml", "--once", "--quiet"]).quiet == 1  # the crontab line of apps/jobs.py
    with pytest.raises(SystemExit) as stopped:
        main(["-v", "report", "-q"])
    assert stopped.value.code == 2 and "-v (say more) and -q (say less) together" in capsys.readouterr().err


def test_a_server_logs_one_level_louder_per_v_and_quieter_per_q() -> None:
    p = parser()
    levels = [server_log_level(p.parse_args(["serve", "s.toml", *flags]), "info") for flags in ([], ["-q"], ["-v"])]
    assert levels == ["info", "warning", "debug"]
    assert server_log_level(p.parse_args(["mcp", "s.toml", "-qqqq"]), "warning") == "critical"  # no further


@pytest.mark.parametrize(
    ("argv", "dest", "value", "instead"),
    [
        (["playground", "--address", "0.0.0.0"], "host", "0.0.0.0", "use --host"),
        (["serve", "s.toml", "--log-level", "debug"], "log_level", "debug", "use -v (louder) or -q (quieter)"),
        (["a2a", "s.toml", "--log-level", "warning"], "log_level", "warning", "use -v"),
        (["mcp", "s.toml", "--log-level", "error"], "log_level", "error", "use -v"),
        (["prompts", "show", "--graph", "cli"], "run", "cli", "use --run"),
        (["memory", "stats", "--embedder", "hash"], "embedder", "hash", "it is ignored"),
    ],
)
def test_an_old_spelling_still_parses_and_says_what_to_write_instead(
    argv: list[str], dest: str, value: str, instead: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parser().parse_args(argv)
    assert getattr(args, dest) == value
    err = capsys.readouterr().err
    old = next(word for word in argv if word in {"--address", "--log-level", "--graph", "--embedder"})
    assert f"evolve {argv[0]}" in err and f"{old} is deprecated and goes in the next release; {instead}" in err
    if dest == "log_level":
        assert server_log_level(args, "info") == value  # as it was


def test_an_old_spelling_is_quiet_until_used(capsys: pytest.CaptureFixture[str]) -> None:
    args = parser().parse_args(["playground", "--host", "0.0.0.0"])
    assert args.host == "0.0.0.0" and parser().parse_args(["playground"]).host == "127.0.0.1"
    assert parser().parse_args(["serve", "s.toml"]).log_level is None
    assert capsys.readouterr().err == ""


def test_a_flag_the_command_does_not_take_is_refused_with_its_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["memory", "stats", "--capacity", "5"])  # prune's
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert err.startswith("usage: evolve memory stats ") and "this command does not take --capacity 5" in err
