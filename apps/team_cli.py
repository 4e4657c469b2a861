"""``evolve team diagnose SPEC``: run a spec's parallel team, or its whole pool of agents, on sample tasks
and report each member's accuracy, K* per task and overall, how alike the members' answers are, and the
vote's accuracy (``evolve.teams.diagnose``), with a heat map PNG and the figures as JSON. A chain that learns
its order (``[team] order = "learned"``) shows the order it learned per task group instead.

Example:
    >>> # evolve team diagnose data/facility_codes.toml --pool --tasks 20
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from apps.options import count, quiet_loading, say_database
from connectors import ChatClient, ConfigError, evolve_home

if TYPE_CHECKING:
    from evolve.spec import RunSpec
    from evolve.teams.diagnose import Diagnosis
    from memory import MemoryStore


def add_team_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = sub.add_parser(
        "team", help="teams: diagnose a parallel team or the spec's pool of agents, or show a learned order"
    )
    actions = t.add_subparsers(dest="team_action", required=True, metavar="ACTION", help="what to do with the team")
    d = actions.add_parser(
        "diagnose",
        help="run the team (--pool: every agent) on sample tasks: accuracy, K*, similarity, a heat map; "
        "a chain that learns its order: that order per task group",
    )
    d.add_argument("spec", type=Path, help="the run's TOML spec")
    d.add_argument("--tasks", type=count(1), default=None, help="how many of the spec's tasks to sample (default 20)")
    d.add_argument("--pool", action="store_true", help="every agent of the spec (but a judge), not only the team")
    d.add_argument("--seed", type=count(0), default=None, help="which tasks are sampled (default: the spec's seed)")
    d.add_argument("--out", type=Path, default=None, help="folder for diagnosis.json and heat_map.png "
                   "(default: $EVOLVE_HOME/teams/<run>)")  # fmt: skip
    d.set_defaults(func=cmd_team_diagnose)


def cmd_team_diagnose(args: argparse.Namespace) -> None:
    from evolve.build import build_chat, build_store
    from evolve.spec import load_spec

    spec = load_spec(args.spec)
    quiet_loading(args.quiet)
    chat = build_chat(spec)
    store = build_store(spec)
    try:
        say_database("team diagnose", spec.run.database)
        if spec.team.order == "learned" and not args.pool:
            if args.tasks is not None or args.seed is not None:
                raise ConfigError('--tasks and --seed sample tasks to run; a chain with order = "learned" is shown '
                                  "from its run's log (leave them out, or add --pool to run its agents)")  # fmt: skip
            show_orders(spec, chat, store, args.out or diagnosis_folder(spec))
            return
        d = diagnose_spec(spec, chat, store, tasks=args.tasks or 20, pool=args.pool, seed=args.seed)
    finally:
        if store is not None:
            store.close()
    figures, png = save_diagnosis(d, args.out or diagnosis_folder(spec), title=spec.run.name)
    print(d.markdown())
    print(f"figures:  {figures}\nheat map: {png}")


def show_orders(spec: RunSpec, chat: ChatClient, store: MemoryStore | None, out: Path) -> None:
    """A learned order's state, as the run learned it: per task group an example task, the episodes it
    learned from, the order it serves (greedy) and the priorities; printed and saved as ``orders.json``."""
    from evolve.build import build_team
    from evolve.teams.ordered import OrderedTeam

    team = build_team(spec, chat, store)
    assert isinstance(team, OrderedTeam)
    groups = team.policy.table()
    print(f"# Learned order of {spec.run.name}\n")
    if not team.policy.learns:
        print("A team of one agent has one order: there is nothing to learn.")
    elif not groups:
        print(f"Nothing learned yet: the team acts in the listed order ({' > '.join(team.policy.agents)}) "
              "until a round of `evolve run` has rewarded it.")  # fmt: skip
    else:
        print("| group | episodes | served order | priorities | example task |\n|--:|--:|---|---|---|")
        for g in groups:
            pr = ", ".join(f"{a} {p:+.2f}" for a, p in g["priorities"].items())
            print(f"| {g['group']} | {g['episodes']} | {' > '.join(g['order'])} | {pr} | {g['example'][:60]} |")
    out.mkdir(parents=True, exist_ok=True)
    (out / "orders.json").write_text(json.dumps(groups, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"\nfigures:  {out / 'orders.json'}")


def diagnose_spec(
    spec: RunSpec, chat: ChatClient, store: MemoryStore | None, *, tasks: int, pool: bool, seed: int | None = None
) -> Diagnosis:
    """Diagnose the spec's team (``pool``: every agent but a judge) at its HEAD prompts on ``tasks`` of its
    tasks, sampled with ``seed`` (default: the spec's)."""
    from connectors import load_embedder
    from evolve.build import build_team
    from evolve.envs.tasks import load_tasks
    from evolve.serve.chat_requests import trained_prompts
    from evolve.teams.diagnose import diagnose
    from evolve.teams.parallel import ParallelTeam

    every = load_tasks(spec.resolve(spec.environment.tasks))
    rng = np.random.default_rng(spec.run.seed if seed is None else seed)
    sample = [every[i] for i in sorted(rng.choice(len(every), size=min(tasks, len(every)), replace=False))]
    team = build_team(spec, chat, store)
    if store is not None:
        team = team.with_prompts(trained_prompts(store.engine, spec.run.name, team.prompts()))
    if pool:
        judge = team.judge if isinstance(team, ParallelTeam) else None
        team = ParallelTeam([a for name, a in team.agents.items() if name != judge])
    elif not isinstance(team, ParallelTeam):
        where = spec.path or "the spec"
        raise ConfigError(f'{where}: its team is a chain, whose agents play different parts; diagnose its agents '
                          'side by side with --pool, or set [team] topology = "parallel"')  # fmt: skip
    embedder = store.embedder if store is not None else load_embedder(spec.embedder.name)
    return diagnose(team, sample, embedder=embedder)


def diagnosis_folder(spec: RunSpec) -> Path:
    """Where a run's latest diagnosis goes unless told otherwise: ``$EVOLVE_HOME/teams/<run>``."""
    return evolve_home() / "teams" / spec.run.name


def save_diagnosis(d: Diagnosis, out: Path, *, title: str) -> tuple[Path, Path]:
    """``diagnosis.json`` and ``heat_map.png`` in ``out``; their paths."""
    from evolve.teams.diagnose import heat_map

    out.mkdir(parents=True, exist_ok=True)
    figures = out / "diagnosis.json"
    figures.write_text(json.dumps(d.to_dict(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return figures, heat_map(d, out / "heat_map.png", title=f"{title}: K* {d.kstar_mean:.2f} of {len(d.members)}")
