"""The ``evolve`` command line."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from apps import memory_cli
from apps.a2a_cli import add_a2a_parser
from apps.jobs import add_job_parsers
from apps.mcp_cli import add_mcp_parser
from apps.options import (
    add_database,
    add_verbosity,
    count,
    exit_on,
    located,
    log_level,
    quiet_loading,
    restore_signals,
    say_database,
)
from apps.playground_cli import add_playground_parser
from apps.serve_cli import add_serve_parser
from apps.team_cli import add_team_parser
from apps.versions_cli import add_adapters_parser, add_prompts_parser
from connectors import EvolveError, evolve_home, make_engine
from connectors.install import extra_hint
from connectors.redact import redact_url


def cmd_demo(args: argparse.Namespace) -> None:
    from apps.demo import run_demo

    result = run_demo(rounds=args.rounds, seeds=args.seeds, home=args.home, seed=args.seed)
    seeds = len(result["seeds"])
    over = f"mean of {seeds} seeds [95% interval]" if seeds > 1 else "one seed: a draw, not a measured difference"
    noisy = result["noisy"]
    for head, part in (("clean ratings", result), (f"{noisy['rho']:.0%} of ratings wrong", noisy)):
        print(f"\nfacility codes, {head} — success rate per round ({result['model']}, {result['embedder']}; {over})\n")
        print(part["table"])
        print(f"\n{part['solved']}")
        print(part["verdict"])
    if result["plot"] is not None:
        print(f"\nlearning curves: {result['plot']}, {noisy['plot']}")
    else:
        print(f"\nlearning curves: not drawn, matplotlib is missing ({extra_hint('plots')})")
    print(f"all figures:     {result['json']}")
    print(f"took {result['seconds']:.0f} s")


def cmd_run(args: argparse.Namespace) -> None:
    from apps.report import run_table
    from evolve.build import build
    from evolve.spec import load_spec

    spec = load_spec(args.spec)
    rounds = spec.run.rounds if args.rounds is None else args.rounds
    quiet_loading(args.quiet)
    evolver = build(spec, progress=not args.quiet)
    say_database("run", spec.run.database)
    try:
        metrics = evolver.run(rounds)
    finally:
        if evolver.memory is not None:
            evolver.memory.close()  # saves the vector index beside the database
    print(run_table(metrics))


def cmd_marft(args: argparse.Namespace) -> None:
    from evolve.build import build
    from evolve.spec import load_spec

    spec = load_spec(args.spec)
    quiet_loading(args.quiet)
    if args.steps is not None:
        spec = spec.model_copy(update={"marft": spec.marft.model_copy(update={"steps": args.steps})})
    evolver = build(spec, progress=not args.quiet, allow_weight_updates=True)
    try:
        team, settings = evolver.team, evolver.weights
        assert settings is not None  # allow_weight_updates=True sets it, or build raised
        print(
            f"MARFT on run {spec.run.name!r}: agents {', '.join(team.order)} on {team.agents[team.sink].model.name}, "
            f"{settings.steps} iterations x {settings.batch_size} episodes, evaluated on {settings.eval_episodes} episodes"
        )
        report = evolver.escalate()
    finally:
        if evolver.memory is not None:
            evolver.memory.close()
    print(f"evaluation success  before {report.before:.3f}  after {report.after:.3f}  ({report.seconds:.0f} s)")
    if report.accepted:
        for agent, version in report.versions.items():
            print(f"{agent}: new adapter version {version} (HEAD; `evolve adapters rollback` undoes it)")
    else:
        print(f"adapters not kept: no gain above min_gain={settings.min_gain} (the agents keep their HEAD)")


def cmd_report(args: argparse.Namespace) -> None:
    from apps.report import plot_curves, round_table
    from evolve import list_runs

    url, _ = located(args, "report")
    curves = list_runs(make_engine(url))
    if not curves:
        raise EvolveError(f"no completed rounds in {redact_url(url)}")
    print(round_table(curves))
    if args.out:
        print(f"plot: {plot_curves(curves, args.out)}")


def parser() -> argparse.ArgumentParser:
    """The ``evolve`` command's parser: every command, and every command's subcommands, in one grammar
    (``apps.options``): each takes ``-v``/``-q`` and says what it does at the top of its ``-h``."""
    p = argparse.ArgumentParser(prog="evolve", description="Agents that get better at their job while they work.")
    sub = p.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do (evolve COMMAND -h says more)"
    )

    d = sub.add_parser("demo", help="the embedded default end to end: no memory vs similarity vs Q-memory")
    d.add_argument("--rounds", type=count(1), default=8, help="rounds per condition (default 8)")
    d.add_argument(
        "--seed", type=count(0), default=0, help="the first seed (recall exploration, paraphrases; default 0)"
    )
    d.add_argument(
        "--seeds", type=count(1), default=5, help="seeds per condition, 5+ for intervals (default 5; 1 is a quick look)"
    )
    d.add_argument("--home", type=Path, default=None, help=f"where the demo folder goes (default {evolve_home()})")
    d.set_defaults(func=cmd_demo)

    r = sub.add_parser("run", help="run (or resume) the rounds a TOML spec describes")
    r.add_argument("spec", type=Path, help="the run's TOML spec (relative paths in it are relative to the spec)")
    r.add_argument("--rounds", type=count(1), default=None, help="override the spec's rounds (>= 1)")
    r.set_defaults(func=cmd_run)

    mf = sub.add_parser("marft", help="train one LoRA adapter per agent now (LoRA MARFT; local models only)")
    mf.add_argument("spec", type=Path, help="the run's TOML spec; its [marft] section sets the training")
    mf.add_argument("--steps", type=count(1), default=None, help="override [marft] steps (>= 1)")
    mf.set_defaults(func=cmd_marft)

    rep = sub.add_parser("report", help="per-round table of every run in a database (a spec's), and a PNG")
    add_database(rep)
    rep.add_argument("--out", type=Path, default=None, help="write the learning curves here (PNG)")
    rep.set_defaults(func=cmd_report)

    add_prompts_parser(sub)
    add_adapters_parser(sub)
    add_serve_parser(sub)
    add_mcp_parser(sub)
    add_a2a_parser(sub)
    add_job_parsers(sub)
    add_playground_parser(sub)
    memory_cli.add_memory_parser(sub)
    add_team_parser(sub)
    add_verbosity(p)
    for command, summary in subcommands(p):
        command.description = command.description or summary
        if not subcommands(command):  # a command that runs something, not a group of them (evolve memory)
            add_verbosity(command)
    return p


def subcommands(p: argparse.ArgumentParser) -> list[tuple[argparse.ArgumentParser, str]]:
    """Every command under ``p`` (``evolve memory``, ``evolve memory stats``), with its line in its parent's help."""
    found = []
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found += [(sub, summaries[name]), *subcommands(sub)]
    return found


def leaf(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the command ``args`` were parsed for: its usage line is the one an error shows."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction) and getattr(args, action.dest, None) in action.choices:
            return leaf(action.choices[getattr(args, action.dest)], args)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    cli = parser()
    args, extra = cli.parse_known_args(argv)
    command = leaf(cli, args)
    if extra:  # refused by the command that was given them, with its usage line: what it does take
        command.error(f"this command does not take {' '.join(extra)}")
    args.verbose, args.quiet = getattr(args, "verbose", 0), getattr(args, "quiet", 0)
    if args.verbose and args.quiet:
        command.error("-v (say more) and -q (say less) together: give one")
    logging.basicConfig(level=log_level(args), format="%(levelname)s %(name)s: %(message)s")
    previous = exit_on((signal.SIGTERM,))  # SIGTERM stops every command cleanly: exit status 143
    try:
        args.func(args)
    except EvolveError as e:
        print(f"evolve: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader (head, less) stopped reading: stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        restore_signals(previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
