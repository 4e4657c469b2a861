"""Turn a validated ``RunSpec`` into live objects: the memory store, the team and the ``Evolver``."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from sqlalchemy import Engine

from connectors import ChatClient, ConfigError, Embedder, ResponseCache, evolve_home, load_chat, load_embedder
from evolve.agent import Agent, MemoryView, Team
from evolve.envs.tasks import Task, load_tasks
from evolve.evolver import Evolver, paraphrase_schedule, same_tasks
from evolve.executors import Executor
from evolve.prompts.evolution import PromptEvolution, split_tasks
from evolve.prompts.graph import PromptGraph
from evolve.ray_executor import make_executor
from evolve.run_log import RunLog, learned_mark
from evolve.spec import AgentSection, RunSpec
from evolve.teams.compose import Recompose, last_kept
from evolve.teams.ordered import OrderedTeam, replay
from evolve.teams.parallel import ParallelTeam
from evolve.tools.mcp import MCPConnections
from evolve.weights.switch import WeightUpdates
from memory import MemoryConfig, MemoryStore, RetrievalConfig, TrustPolicy, similarity_only
from memory.config import ForgetConfig
from memory.write.checks import MAX_NAMESPACE, fit_id
from optimizers import PromptOptimizer, TextualGradientOptimizer, TrainingFreeGRPO
from optimizers.order_policy import OrderPolicy


def build_chat(spec: RunSpec) -> ChatClient:
    kwargs: dict[str, Any] = dict(spec.model.options)
    if spec.model.base_url:
        kwargs["base_url"] = spec.model.base_url
    if spec.model.api_key_env:
        key = os.environ.get(spec.model.api_key_env)
        if not key:
            raise ConfigError(f"model.api_key_env names ${spec.model.api_key_env}, which is not set")
        kwargs["api_key"] = key
    cache = ResponseCache(evolve_home() / "cache" / "responses.db") if spec.model.cache else None
    return load_chat(spec.model.chat, cache=cache, **kwargs)


def build_critic(spec: RunSpec, chat: ChatClient) -> ChatClient:
    """The ``[optimizer]`` critic: ``chat`` (the agents' model) when ``critic = "same"``, else its own model."""
    o = spec.optimizer
    if o.critic == "same":
        return chat
    critic_kwargs: dict[str, Any] = dict(o.critic_options)
    if o.critic_base_url:
        critic_kwargs["base_url"] = o.critic_base_url
    return load_chat(o.critic, **critic_kwargs)


def build_prompt_evolution(
    spec: RunSpec, team: Team, tasks: list[Task], engine: Engine, chat: ChatClient
) -> PromptEvolution | None:
    """The spec's prompt optimizer over a ``PromptGraph`` named after the run, or None when it is off."""
    o = spec.optimizer
    if o.kind == "none":
        return None
    critic = build_critic(spec, chat)
    optimizer: PromptOptimizer
    if o.kind == "textgrad":
        optimizer = TextualGradientOptimizer(
            critic=critic,
            budget=o.budget,
            minibatch_size=o.minibatch,
            parent_selection=o.parent_selection,
            backward=o.backward,
            edit=o.edit,
            critic_params={"max_tokens": o.critic_max_tokens},
            untagged=o.untagged,
            seed=spec.run.seed,
        )
    else:
        optimizer = TrainingFreeGRPO(
            critic=critic,
            library_component=f"{team.sink}.library",
            group_size=o.group_size,
            temperature=o.temperature,
            batch_size=o.minibatch,
            budget=o.budget,
            critic_params={"max_tokens": o.critic_max_tokens},
            untagged=o.untagged,
            seed=spec.run.seed,
        )
    train_ids, val_ids = split_tasks(tasks, val_fraction=o.val_fraction, seed=spec.run.seed)
    return PromptEvolution(PromptGraph(engine, spec.run.name), optimizer, train_ids=train_ids, val_ids=val_ids)


def weight_updates(spec: RunSpec) -> WeightUpdates:
    """The spec's ``[marft]`` section as the loop's escalation settings (same field names)."""
    return WeightUpdates(**spec.marft.model_dump(exclude={"enabled"}), seed=spec.run.seed)


def memory_config(spec: RunSpec) -> MemoryConfig:
    m = spec.memory
    retrieval = RetrievalConfig(
        k1=m.k1, k2=m.k2, delta=m.delta, lam=m.lam, epsilon=m.epsilon, context_q=m.context_q, draw_from=m.draw_from
    )
    config = MemoryConfig(
        retrieval=retrieval,
        alpha=m.alpha,
        durability=m.durability,
        recall_log_delay=m.recall_log_delay,
        failure_keeps=m.failure_keeps,
        supersede=m.supersede,
        credit_depth=m.credit_depth,
        credit_decay=m.credit_decay,
        forget=m.forget.config() if m.forget is not None else ForgetConfig(),
        trust=TrustPolicy(mode=m.trust, trusted=tuple(m.trusted)),
    )
    return similarity_only(config) if m.mode == "similarity" else config


def build_store(spec: RunSpec, embedder: Embedder | None = None) -> MemoryStore | None:
    """The spec's memory store (None when ``[memory] enabled = false``); loads the embedder if not given."""
    if not spec.memory.enabled:
        return None
    embedder = embedder or load_embedder(spec.embedder.name)
    return MemoryStore(spec.run.database, embedder=embedder, config=memory_config(spec), seed=spec.run.seed)


def agent_namespace(run: str, agent: str) -> str:
    """The memory namespace of one agent of a run: ``<run>/<agent>``, shortened (with a hash) when that is
    longer than a namespace may be."""
    return fit_id(f"{run}/{agent}", MAX_NAMESPACE)


def build_team(
    spec: RunSpec,
    chat: ChatClient,
    store: MemoryStore | None,
    *,
    mcp: MCPConnections | None = None,
    engine: Engine | None = None,
) -> Team:
    """The spec's team, to serve: its agents (``build_agents``) as its ``[team]`` puts them (``shaped``), with the
    members its run last kept when ``[team] recompose`` re-chose them, and a learned order as the run learned it,
    taken greedily (a tenant's run: else the trained run's). ``engine``: the run log's database when there is
    no store (default: the spec's, opened here)."""
    team = kept_team(spec, build_agents(spec, chat, store, mcp=mcp), store)
    if isinstance(team, OrderedTeam):
        team.policy = served_policy(team, spec, store.engine if store is not None else engine)
        team.serving = True
    return team


_SERVED: dict[tuple[str, str, str], tuple[tuple[int, float | None], OrderPolicy]] = {}
"""Learned orders replayed for serving, by database, run and settings, with the log mark they were replayed at."""


def served_policy(team: OrderedTeam, spec: RunSpec, engine: Engine | None) -> OrderPolicy:
    """The order policy the spec's run learned (a tenant's run without episodes: the trained run's), replayed
    from its log once per change of the log (``learned_mark``: one small query a call), else ``team``'s own."""
    from connectors import make_engine

    engine = engine if engine is not None else make_engine(spec.run.database)
    for run in [spec.run.name, *([spec.shared_run] if spec.shared_run else [])]:
        mark = learned_mark(engine, run)
        if not mark[0]:
            continue
        key = (str(engine.url), run, spec.team.model_dump_json())
        kept = _SERVED.get(key)
        if kept is None or kept[0] != mark:
            policy = replace(team.policy, groups=[])  # the same settings, nothing learned yet
            replay(policy, RunLog(engine, run).learned_episodes())
            kept = _SERVED[key] = (mark, policy)
        return kept[1]
    return team.policy


def kept_team(spec: RunSpec, agents: list[Agent], store: MemoryStore | None) -> Team:
    """``shaped``, with the members the run last kept when ``[team] recompose`` re-chose them (read from its
    round log; a tenant's run without rounds of its own: the trained run's). A learned order groups tasks with
    the store's embedder (the spec's without a store)."""
    if spec.team.order == "learned":
        return shaped(spec, agents, store.embedder if store is not None else load_embedder(spec.embedder.name))
    if spec.team.recompose == "off" or store is None:
        return shaped(spec, agents)
    for run in [spec.run.name, *([spec.shared_run] if spec.shared_run else [])]:
        kept = last_kept(RunLog(store.engine, run).completed())
        if kept is not None:
            return shaped(spec.model_copy(update={"team": spec.team.model_copy(update={"members": kept})}), agents)
    return shaped(spec, agents)


def build_agents(
    spec: RunSpec, chat: ChatClient, store: MemoryStore | None, *, mcp: MCPConnections | None = None
) -> list[Agent]:
    """The spec's agents on ``chat``, each recalling from namespace ``<run>/<agent>`` when it has memory (and
    from the trained run's ``<base run>/<agent>`` too in a tenant's run under ``[serve] memory = "shared"``); an
    agent with ``a2a = URL`` is a remote A2A agent (``connectors.a2a_chat``) with no local memory by default.

    An agent's ``mcp`` servers give it their tools, connected through ``mcp`` (share one ``MCPConnections``
    between the teams of a deployment); by default through new connections, which stay open while the team's
    tools are referenced and close when they are garbage-collected, or at exit."""
    servers = mcp if mcp is not None else MCPConnections(spec.path.parent if spec.path is not None else None)
    params = {"max_tokens": spec.model.max_tokens, "temperature": spec.model.temperature, "seed": spec.run.seed}
    base = spec.shared_run

    def shared(agent: str) -> str | None:
        return None if base is None else agent_namespace(base, agent)

    def view(agent: AgentSection) -> RetrievalConfig | None:  # an agent's own draw_from, else the store's
        if agent.draw_from is None or store is None:
            return None
        return replace(store.config.retrieval, draw_from=agent.draw_from)

    agents = [
        Agent(
            a.name,
            chat if a.a2a is None else load_chat(f"a2a/{a.a2a}", api_key_env=a.a2a_key_env),  # a remote member
            system=a.system,
            memory=MemoryView(
                store, namespace=agent_namespace(spec.run.name, a.name), config=view(a), shared=shared(a.name)
            )
            if store is not None and a.remembers
            else None,
            params=({**params, **({} if a.temperature is None else {"temperature": a.temperature})}
                    if a.a2a is None else {}),  # the spec's sampling is its model's, not a remote team's
            tools=servers.tools(a.mcp),
        )
        for a in spec.agents
    ]  # fmt: skip
    return agents


def shaped(spec: RunSpec, agents: list[Agent], embedder: Embedder | None = None) -> Team:
    """The spec's agents as its ``[team]`` puts them: a chain (by ``after``; an ``OrderedTeam`` under ``order =
    "learned"``, grouping tasks with ``embedder``), or a parallel team of its members with a vote or a judge."""
    t = spec.team
    if t.topology == "chain" and t.order == "learned":
        return OrderedTeam(
            agents, lr=t.order_lr, temperature=t.order_temperature, group_threshold=t.order_group_threshold,
            embed=None if embedder is None else embedder.embed, seed=spec.run.seed,
        )  # fmt: skip
    if t.topology == "chain":
        return Team(agents, [(before, a.name) for a in spec.agents for before in a.after] or None)
    by_name = {a.name: a for a in agents}
    judge = by_name[t.judge] if t.judge is not None else None
    return ParallelTeam([by_name[m] for m in spec.members], aggregate=t.aggregate, judge=judge, debate=t.debate)


def build_recompose(spec: RunSpec, agents: list[Agent], store: MemoryStore | None) -> Recompose | None:
    """``[team] recompose``: the ``Evolver`` option over every agent but the judge (answers embedded by the
    store's embedder, or the spec's without a store), or None."""
    t = spec.team
    if t.recompose == "off" or t.size is None:
        return None
    pool = [a for a in agents if a.name != t.judge]
    embedder = store.embedder if store is not None else load_embedder(spec.embedder.name)
    return Recompose(pool, t.size, embedder, by=t.recompose)


def spec_prompts(spec: RunSpec) -> tuple[dict[str, str], list[tuple[str, str, float]]]:
    """The prompts and message flow the spec's team starts from: ``build_team``'s, without loading the
    model or connecting the agents' tool servers (a placeholder model that is never called)."""
    unused = load_chat("fake/scripted", replies=[])
    team = shaped(spec, [Agent(a.name, unused, system=a.system) for a in spec.agents])
    return team.prompts(), [(a, b, 1.0) for a, b in team.edges]


def build(
    spec: RunSpec,
    *,
    chat: ChatClient | None = None,
    embedder: Embedder | None = None,
    progress: bool = True,
    allow_weight_updates: bool | None = None,
) -> Evolver:
    """Everything a spec describes, ready to ``run(spec.run.rounds)``; pass ``chat``/``embedder`` to reuse
    loaded models, and ``allow_weight_updates`` to override ``[marft] enabled``."""
    tasks = load_tasks(spec.resolve(spec.environment.tasks))
    chat = chat or build_chat(spec)
    store = build_store(spec, embedder)
    agents = build_agents(spec, chat, store)
    team = kept_team(spec, agents, store)
    engine = store.engine if store is not None else None
    if engine is None:
        from connectors import make_engine

        engine = make_engine(spec.run.database)
    writer = chat if spec.memory.writer == "llm" else None
    prompts = build_prompt_evolution(spec, team, tasks, engine, chat)
    schedule = paraphrase_schedule(spec.run.seed) if spec.environment.paraphrase else same_tasks
    allowed = spec.marft.enabled if allow_weight_updates is None else allow_weight_updates
    return Evolver(
        team,
        tasks,
        memory=store,
        engine=engine,
        run=spec.run.name,
        batch_size=spec.run.batch_size,
        max_turns=spec.environment.max_turns,
        writer=writer,
        schedule=schedule,
        prompts=prompts,
        weights=weight_updates(spec) if allowed else None,  # only then: its checks load torch
        executor=build_executor(spec),
        progress=progress,
        recompose=build_recompose(spec, agents, store),
    )


def build_executor(spec: RunSpec) -> Executor:
    """Where the spec's episodes run: here, or on a Ray cluster (``[run] executor = "ray"``)."""
    r = spec.run
    if r.executor == "ray":
        return make_executor("ray", address=r.ray_address, workers=r.workers)
    if r.workers is not None or r.ray_address is not None:
        raise ConfigError('[run] workers and ray_address apply only with executor = "ray"')
    return make_executor(r.executor)


__all__ = [
    "build",
    "build_agents",
    "build_chat",
    "build_critic",
    "build_executor",
    "build_recompose",
    "build_store",
    "build_team",
    "memory_config",
    "weight_updates",
]
