"""``evolve prompts log|show|diff|rollback`` and ``evolve adapters log|rollback``: a run's versioned prompts
(``evolve.prompts.graph``) and its agents' LoRA adapters (``evolve.weights.registry``), each with a HEAD
that ``rollback`` moves; nothing is ever deleted.

Both find the run as ``evolve memory`` finds its store: ``--spec SPEC`` gives the database and the run's
name; ``--db URL`` names a database without a spec, and ``--run NAME`` the run in it (``--run`` also picks
another run of the spec's database, a tenant's ``<run>@<tenant>``).

Example:
    >>> # evolve prompts log --spec facility_codes
    >>> # evolve adapters rollback --spec data/format_rules.toml --agent solver --to base
"""

from __future__ import annotations

import argparse

from apps.options import Deprecated, add_database, count, located
from connectors import EvolveError, evolve_home, make_engine
from connectors.redact import redact_url


def cmd_prompts(args: argparse.Namespace) -> None:
    from evolve.prompts.graph import PromptGraph

    url, spec_run = located(args, f"prompts {args.action}")
    graph = PromptGraph(make_engine(url), args.run or spec_run or "default")
    head = graph.head()
    if args.action == "log":
        for v in graph.log(args.limit):
            mark = "*" if v.id == head.id else " "
            score = "   -  " if v.mean_score is None else f"{v.mean_score:6.3f}"
            parents = ",".join(p[:8] for p in v.parents) or "seed"
            print(f"{mark} {v.id[:16]}  val {score}  from {parents:<17} {v.message[:70]}")
    elif args.action == "show":
        v = graph.get(args.version) if args.version else head
        print(f"version {v.id}{' (HEAD)' if v.id == head.id else ''}")
        for component, text in v.nodes.items():
            print(f"\n--- {component}\n{text}")
    elif args.action == "diff":
        if len(args.versions) not in (1, 2):
            raise EvolveError(f"evolve prompts diff takes one version (against HEAD) or two, got {len(args.versions)}")
        a, b = (args.versions[0], head.id) if len(args.versions) == 1 else args.versions
        print(graph.diff(a, b) or "no difference")
    else:
        print(f"HEAD is now {graph.rollback(args.version).id}")


def cmd_adapters(args: argparse.Namespace) -> None:
    from evolve.weights.registry import AdapterRegistry

    url, spec_run = located(args, f"adapters {args.action}")
    run = args.run or spec_run
    if run is None:
        raise EvolveError(f"evolve adapters {args.action} needs the run: --spec SPEC, or --run NAME (with --db URL)")
    registry = AdapterRegistry(make_engine(url), run, root=evolve_home() / "adapters")
    known = registry.agents()
    if args.agent is not None and args.agent not in known:
        listed = ", ".join(known) or "none"
        raise EvolveError(f"agent {args.agent!r} has no adapters in run {run!r} (agents with adapters: {listed})")
    if not known:
        raise EvolveError(f"run {run!r} has no adapters in {redact_url(url)}")
    if args.action == "rollback":
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


def action(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str, *, run_help: str
) -> argparse.ArgumentParser:
    """One subcommand: found by ``--spec SPEC | --db URL``, its run by ``--run NAME``."""
    p = actions.add_parser(name, help=help_text, description=help_text)
    add_database(p, run=" and run name")
    p.add_argument("--run", default=None, metavar="NAME", help=run_help)
    return p


def add_prompts_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``evolve prompts log|show|diff|rollback [VERSION…] [--spec SPEC | --db URL] [--run NAME]``."""
    pr = sub.add_parser("prompts", help="the run's versioned prompts: log, show, diff, rollback")
    actions = pr.add_subparsers(dest="action", required=True, metavar="ACTION", help="what to do with the prompts")
    run_help = "the run whose prompts (default: the spec's run; with --db and no --run: 'default')"
    log = action(actions, "log", "every prompt version, newest first; * marks HEAD", run_help=run_help)
    log.add_argument("--limit", type=count(1), default=None, help="at most this many versions (default all)")
    show = action(actions, "show", "one version's prompts, component by component", run_help=run_help)
    show.add_argument("version", nargs="?", default=None, help="version id or unique prefix (default HEAD)")
    diff = action(actions, "diff", "what changed between two versions", run_help=run_help)
    diff.add_argument("versions", nargs="+", metavar="VERSION", help="one version (compared with HEAD) or two")
    back = action(actions, "rollback", "move HEAD to another version; nothing is deleted", run_help=run_help)
    back.add_argument("version", nargs="?", default=None, help="version id or unique prefix (default: HEAD's parent)")
    for p in (log, show, diff, back):
        p.add_argument("--graph", dest="run", action=Deprecated, note="use --run (a prompt graph is its run's name)")
        p.set_defaults(func=cmd_prompts)


def add_adapters_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``evolve adapters log|rollback [--spec SPEC | --db URL] [--run NAME] [--agent A] …``."""
    a = sub.add_parser("adapters", help="the agents' trained LoRA adapters: log, rollback")
    actions = a.add_subparsers(dest="action", required=True, metavar="ACTION", help="what to do with the adapters")
    run_help = "the run whose adapters (default: the spec's run; needed with --db)"
    log = action(actions, "log", "every adapter version of every agent, newest first; * marks HEAD", run_help=run_help)
    log.add_argument("--agent", default=None, help="only this agent (default: every agent with adapters)")
    log.add_argument("--limit", type=count(1), default=None, help="at most this many versions per agent")
    back = action(actions, "rollback", "move an agent's HEAD; nothing is deleted", run_help=run_help)
    back.add_argument("--agent", required=True, help="the agent whose HEAD moves")
    back.add_argument("--to", default=None, metavar="ID|base",
                      help="version id or unique prefix, or 'base' (default: HEAD's parent)")  # fmt: skip
    for p in (log, back):
        p.set_defaults(func=cmd_adapters)
