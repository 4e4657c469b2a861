"""Turn a validated ``RunSpec`` into live objects: the memory store, the team and the ``Evolver``."""

from __future__ import annotations

import os
from typing import Any

from connectors import ChatClient, ConfigError, Embedder, ResponseCache, evolve_home, load_chat, load_embedder
from evolve.agent import Agent, MemoryView, Team
from evolve.evolver import Evolver, paraphrase_schedule, same_tasks
from evolve.spec import RunSpec
from evolve.tasks import load_tasks
from memory import MemoryConfig, MemoryStore, RetrievalConfig, similarity_only


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


def memory_config(spec: RunSpec) -> MemoryConfig:
    m = spec.memory
    retrieval = RetrievalConfig(k1=m.k1, k2=m.k2, delta=m.delta, lam=m.lam, epsilon=m.epsilon)
    config = MemoryConfig(retrieval=retrieval, alpha=m.alpha)
    return similarity_only(config) if m.mode == "similarity" else config


def build(
    spec: RunSpec, *, chat: ChatClient | None = None, embedder: Embedder | None = None, progress: bool = True
) -> Evolver:
    """Everything a spec describes, ready to ``run(spec.run.rounds)``; pass ``chat``/``embedder`` to reuse loaded models."""
    tasks = load_tasks(spec.resolve(spec.environment.tasks))
    chat = chat or build_chat(spec)
    store = None
    if spec.memory.enabled:
        embedder = embedder or load_embedder(spec.embedder.name)
        store = MemoryStore(spec.run.database, embedder=embedder, config=memory_config(spec), seed=spec.run.seed)
    params = {"max_tokens": spec.model.max_tokens, "temperature": spec.model.temperature, "seed": spec.run.seed}
    agents = [
        Agent(
            a.name,
            chat,
            system=a.system,
            memory=MemoryView(store, namespace=f"{spec.run.name}/{a.name}") if store is not None and a.memory else None,
            params=params,
        )
        for a in spec.agents
    ]
    edges = [(before, a.name) for a in spec.agents for before in a.after]
    team = Team(agents, edges or None)
    engine = store.engine if store is not None else None
    if engine is None:
        from connectors import make_engine

        engine = make_engine(spec.run.database)
    writer = chat if spec.memory.writer == "llm" else None
    schedule = paraphrase_schedule(spec.run.seed) if spec.environment.paraphrase else same_tasks
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
        progress=progress,
    )


__all__ = ["build", "build_chat", "memory_config"]
