"""The ``evolve`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from apps import memory_cli
from apps.a2a_cli import add_a2a_parser
from apps.jobs import add_job_parsers
from apps.mcp_cli import add_mcp_parser
from apps.options import count, quiet_loading, say_database
from apps.playground_cli import add_playground_parser
from apps.serve_cli import add_serve_parser
from apps.team_cli import add_team_parser
from connectors import EvolveError, evolve_home, make_engine

DB_HELP = "SQLAlchemy URL (default: $EVOLVE_HOME/evolve.db)"


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
    print(f"\nlearning curves: {result['plot']}, {noisy['plot']}")
    print(f"all figures:     {Path(result['plot']).with_name('demo.json')}")
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

    curves = list_runs(make_engine(args.db))
    if not curves:
        raise EvolveError(f"no completed rounds in {args.db or 'the default database'}")
    print(round_table(curves))
    if args.out:
        print(f"plot: {plot_curves(curves, args.out)}")


def cmd_memory(args: argparse.Namespace) -> None:
    from connectors import load_embedder
    from memory import MemoryStore

    memory_cli.refuse_unused(args)
    if args.action in ("backup", "restore"):
        return memory_backup(args)
    if args.action in memory_cli.ACTIONS:
        from connectors import load_chat

        llm = load_chat(args.model) if args.action == "consolidate" and args.model else None
        return memory_cli.cmd_lifecycle(args, llm)
    if args.action in ("stats", "show"):
        return memory_read(args)
    with MemoryStore(args.db, embedder=load_embedder(args.embedder)) as store:  # export/import embed or check vectors
        if args.action == "export":
            print(f"exported {store.export(args.path, namespace=args.namespace)} items to {args.path}")
        elif args.action == "import":
            print(f"imported {store.import_(args.path, writer=args.writer)} items from {args.path}")


def memory_read(args: argparse.Namespace) -> None:
    """``evolve memory stats|show``: SQL reads of an existing store. No embedder is loaded (MiniLM takes
    15-23 s) and no vector index is opened; a database that does not exist is not created."""
    from sqlalchemy import inspect

    from connectors.db import default_url, sqlite_path
    from connectors.redact import redact_url
    from memory import reads
    from memory.schema import memory_items

    url = args.db or default_url()
    path = sqlite_path(url) if url.startswith("sqlite") else None
    if path is not None and not path.is_file():
        raise EvolveError(f"no database at {path} (evolve memory {args.action} reads an existing store; check --db)")
    engine = make_engine(url)
    try:
        if not inspect(engine).has_table(memory_items.name):
            raise EvolveError(f"{redact_url(url)} holds no memory store (no {memory_items.name} table); check --db")
        with engine.connect() as conn:
            if args.action == "stats":
                print(json.dumps(reads.stats(conn, args.namespace), indent=2, default=str))
                return
            items = sorted(reads.all_items(conn, args.namespace), key=lambda it: -it.q)[: args.limit]
    finally:
        engine.dispose()
    for it in items:
        print(f"{it.id}  q={it.q:+.3f}  visits={it.visits}  [{it.namespace}]  {it.intent[:70]}")


def memory_backup(args: argparse.Namespace) -> None:
    """``evolve memory backup|restore FILE``: the whole database (memories, prompts, runs, jobs), no embedder needed."""
    from connectors.db import default_url
    from connectors.redact import redact_url as redact
    from evolve.deploy.backup import backup, restore

    url = args.db or default_url()
    if args.action == "backup":
        info = backup(url, args.path, pg_bin=args.pg_bin)
        print(f"backed up {redact(url)} to {info.path} in {info.seconds:.2f} s: {info.summary()}")
    else:
        info = restore(args.path, url, force=args.force, pg_bin=args.pg_bin)
        print(f"restored {info.path} into {redact(url)} in {info.seconds:.2f} s: {info.summary()}")


def cmd_prompts(args: argparse.Namespace) -> None:
    from evolve.prompts.graph import PromptGraph

    graph = PromptGraph(make_engine(args.db), args.graph)
    head = graph.head()
    if args.action == "log":
        for v in graph.log(args.limit):
            mark = "*" if v.id == head.id else " "
            score = "   -  " if v.mean_score is None else f"{v.mean_score:6.3f}"
            parents = ",".join(p[:8] for p in v.parents) or "seed"
            print(f"{mark} {v.id[:16]}  val {score}  from {parents:<17} {v.message[:70]}")
    elif args.action == "show":
        v = graph.get(args.versions[0]) if args.versions else head
        print(f"version {v.id}{' (HEAD)' if v.id == head.id else ''}")
        for component, text in v.nodes.items():
            print(f"\n--- {component}\n{text}")
    elif args.action == "diff":
        if len(args.versions) not in (1, 2):
            raise EvolveError("evolve prompts diff takes one version (against HEAD) or two")
        a, b = (args.versions[0], head.id) if len(args.versions) == 1 else args.versions
        print(graph.diff(a, b) or "no difference")
    elif args.action == "rollback":
        target = args.versions[0] if args.versions else None
        v = graph.rollback(target)
        print(f"HEAD is now {v.id}")


# ---- evolve adapters: the agents' trained LoRA adapters (evolve.weights.registry) ----------------------


def cmd_adapters(args: argparse.Namespace) -> None:
    from evolve.weights.registry import AdapterRegistry

    registry = AdapterRegistry(make_engine(args.db), args.run, root=evolve_home() / "adapters")
    known = registry.agents()
    if args.agent is not None and args.agent not in known:
        listed = ", ".join(known) or "none"
        raise EvolveError(f"agent {args.agent!r} has no adapters in run {args.run!r} (agents with adapters: {listed})")
    if not known:
        raise EvolveError(f"run {args.run!r} has no adapters in {args.db or 'the default database'}")
    if args.adapters_action == "rollback":
        before = registry.head(args.agent)
        after = registry.rollback(args.agent, args.to)
        frm, to = (v.id if v else "base (no adapter)" for v in (before, after))
        moved = f"HEAD {frm} -> {to}" if frm != to else f"HEAD stays at {to}"
        print(f"{args.agent}: {moved}" + (f"  {after.path}" if after else ""))
        return
    lines = []  # printed once all are read, so an error never leaves half a log
    for agent in [args.agent] if args.agent else known:
        head = registry.head(agent)
        lines.append(f"{agent}: HEAD {f'{head.id}  {head.path}' if head else 'base (no adapter)'}")
        for v in registry.log(agent, args.limit):
            mark = "*" if head is not None and v.id == head.id else " "
            metrics = " ".join(f"{k}={x:.3f}" for k, x in sorted(v.metrics.items())) or "-"
            lines.append(f"{mark} {v.id}  from {(v.parent or 'base')[:8]:<8}  {metrics}  {v.message[:70]}")
    print("\n".join(lines))


def add_adapters_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    a = sub.add_parser("adapters", help="the agents' trained LoRA adapters: log, rollback")
    actions = a.add_subparsers(dest="adapters_action", required=True, help="what to do with the adapters")
    for name, help_text in (("log", "every adapter version, newest first"), ("rollback", "move an agent's HEAD")):
        act = actions.add_parser(name, help=help_text)
        act.add_argument("--db", default=None, help=DB_HELP)
        act.add_argument("--run", required=True, help="the run's name")
        act.add_argument("--agent", required=name == "rollback", default=None, help="the agent (log: default all)")
        act.set_defaults(func=cmd_adapters)
    log_p, rollback_p = actions.choices["log"], actions.choices["rollback"]
    log_p.add_argument("--limit", type=count(1), default=None, help="at most this many versions per agent")
    rollback_p.add_argument(
        "--to", default=None, help="version id or unique prefix, or 'base' (default: HEAD's parent)"
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="evolve", description="Agents that get better at their job while they work.")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="command", required=True, help="what to do (evolve COMMAND -h says more)")

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
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=cmd_run)

    mf = sub.add_parser("marft", help="train one LoRA adapter per agent now (LoRA MARFT; local models only)")
    mf.add_argument("spec", type=Path, help="the run's TOML spec; its [marft] section sets the training")
    mf.add_argument("--steps", type=count(1), default=None, help="override [marft] steps (>= 1)")
    mf.add_argument("--quiet", action="store_true", help="no progress bar")
    mf.set_defaults(func=cmd_marft)

    rep = sub.add_parser("report", help="per-round table of every run in a database, and a PNG")
    rep.add_argument("--db", default=None, help=DB_HELP)
    rep.add_argument("--out", type=Path, default=None, help="write the learning curves here (PNG)")
    rep.set_defaults(func=cmd_report)

    pr = sub.add_parser("prompts", help="the versioned prompts: log, show, diff, rollback")
    pr.add_argument("action", choices=["log", "show", "diff", "rollback"], help="what to do with the prompt graph")
    pr.add_argument("versions", nargs="*", help="version ids (a unique prefix is enough)")
    pr.add_argument("--db", default=None, help=DB_HELP)
    pr.add_argument("--graph", default="default", help="the prompt graph: the run's name")
    pr.add_argument("--limit", type=count(1), default=None, help="log: at most this many versions (default all)")
    pr.set_defaults(func=cmd_prompts)
    add_adapters_parser(sub)
    add_serve_parser(sub)
    add_mcp_parser(sub)
    add_a2a_parser(sub)
    add_job_parsers(sub)
    add_playground_parser(sub)
    add_memory_parser(sub)
    add_team_parser(sub)
    return p


def add_memory_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = sub.add_parser("memory", help="inspect, export and import memories; back up and restore the database")
    m.add_argument(
        "action",
        choices=["stats", "show", "export", "import", "backup", "restore", *memory_cli.ACTIONS],
        help="stats, show: read the memories; export, import: JSONL; backup, restore: the whole database; "
        "consolidate: distil strategies; prune: forget under a budget; history: the removal log; undo: put back; "
        "distrust: remove (or --reset) a --writer's memories; quarantined: what the trust policy held back; "
        "release: let a --writer's held memories in",
    )
    m.add_argument(
        "targets",
        nargs="*",
        metavar="PATH_OR_ID",
        help="export/import: the JSONL file; backup/restore: the backup file; undo: removal or memory ids",
    )
    m.add_argument("--db", default=None, help=DB_HELP)
    m.add_argument("--namespace", default=None, help="only this namespace, e.g. <run>/<agent> (default: all)")
    m.add_argument(
        "--embedder", default="minilm", help="export/import: the embedder the store was built with (default minilm)"
    )
    m.add_argument("--limit", type=count(1), default=20, help="show: at most this many memories, highest Q first")
    m.add_argument("--force", action="store_true", help="restore: replace a database that is not empty")
    m.add_argument("--pg-bin", default=None, help="backup/restore: folder of pg_dump/pg_restore (default: PATH)")
    memory_cli.add_arguments(m)
    m.set_defaults(func=cmd_memory)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if args.command == "memory":
        paths = args.action in ("export", "import", "backup", "restore")
        if paths and len(args.targets) != 1 or not paths and args.action != "undo" and args.targets:
            kind = "a JSONL" if args.action in ("export", "import") else "a backup file"
            need = f"{kind} path is required (exactly one)" if paths else "takes no path or id"
            print(f"evolve memory {args.action}: {need}, got {len(args.targets)}", file=sys.stderr)
            return 2
        args.path = Path(args.targets[0]) if paths else None
    try:
        args.func(args)
    except EvolveError as e:
        print(f"evolve: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader (head, less) stopped reading: stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
