"""``evolve team diagnose SPEC``: run a spec's parallel team, or its whole pool of agents, on sample tasks
and report each member's accuracy, K* per task and overall, how alike the members' answers are, and the
vote's accuracy (``evolve.teams.diagnose``), with a heat map PNG and the figures as JSON.

Example:
    >>> # evolve team diagnose data/facility_codes.toml --pool --tasks 20
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from apps.options import count, quiet_loading, say_database
from connectors import ConfigError, evolve_home


def add_team_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = sub.add_parser("team", help="teams by diversity: diagnose a parallel team or the spec's pool of agents")
    actions = t.add_subparsers(dest="team_action", required=True, help="what to do")
    d = actions.add_parser(
        "diagnose", help="run the team (--pool: every agent) on sample tasks: accuracy, K*, similarity, a heat map"
    )
    d.add_argument("spec", type=Path, help="the run's TOML spec")
    d.add_argument("--tasks", type=count(1), default=20, help="how many of the spec's tasks to sample (default 20)")
    d.add_argument("--pool", action="store_true", help="every agent of the spec (but a judge), not only the team")
    d.add_argument("--seed", type=count(0), default=None, help="which tasks are sampled (default: the spec's seed)")
    d.add_argument("--out", type=Path, default=None, help="folder for diagnosis.json and heat_map.png "
                   "(default: $EVOLVE_HOME/teams/<run>)")  # fmt: skip
    d.add_argument("--quiet", action="store_true", help="no progress or loading messages")
    d.set_defaults(func=cmd_team_diagnose)


def cmd_team_diagnose(args: argparse.Namespace) -> None:
    from evolve.build import build_chat, build_store, build_team
    from evolve.deploy.chat_requests import trained_prompts
    from evolve.envs.tasks import load_tasks
    from evolve.spec import load_spec
    from evolve.teams.diagnose import diagnose, heat_map
    from evolve.teams.parallel import ParallelTeam

    spec = load_spec(args.spec)
    tasks = load_tasks(spec.resolve(spec.environment.tasks))
    rng = np.random.default_rng(spec.run.seed if args.seed is None else args.seed)
    sample = [tasks[i] for i in sorted(rng.choice(len(tasks), size=min(args.tasks, len(tasks)), replace=False))]
    quiet_loading(args.quiet)
    chat = build_chat(spec)
    store = build_store(spec)
    try:
        team = build_team(spec, chat, store)
        if store is not None:
            team = team.with_prompts(trained_prompts(store.engine, spec.run.name, team.prompts()))
        if args.pool:
            judge = team.judge if isinstance(team, ParallelTeam) else None
            team = ParallelTeam([a for name, a in team.agents.items() if name != judge])
        elif not isinstance(team, ParallelTeam):
            raise ConfigError(f'{args.spec}: its team is a chain, whose agents play different parts; diagnose its '
                              'agents side by side with --pool, or set [team] topology = "parallel"')  # fmt: skip
        say_database("team diagnose", spec.run.database)
        embedder = store.embedder if store is not None else None
        if embedder is None:
            from connectors import load_embedder

            embedder = load_embedder(spec.embedder.name)
        d = diagnose(team, sample, embedder=embedder)
    finally:
        if store is not None:
            store.close()
    out = args.out or evolve_home() / "teams" / spec.run.name
    out.mkdir(parents=True, exist_ok=True)
    (out / "diagnosis.json").write_text(json.dumps(d.to_dict(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    png = heat_map(d, out / "heat_map.png", title=f"{spec.run.name}: K* {d.kstar_mean:.2f} of {len(d.members)}")
    print(d.markdown())
    print(f"figures:  {out / 'diagnosis.json'}\nheat map: {png}")
