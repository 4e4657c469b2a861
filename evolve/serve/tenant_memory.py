"""Evolve's Q-valued memory for an outside agent, per tenant: recall, remember, feedback, explain, stats.

``TenantMemory`` is the seam ``evolve mcp`` (``evolve.serve.protocols.mcp``) stands on. The calling agent
brings its own model; Evolve brings what it learned: memories ranked by similarity and a learned utility Q.

- ``recall(tenant, query)`` selects up to ``k`` memories and logs the recall under a fresh id;
- ``remember(tenant, task, success=...)`` writes one experience (``MemoryStore.write``'s cheap text);
- ``feedback(tenant, recall_id, reward=...)`` reinforces exactly the memories that recall selected,
  once per ``(recall_id, key)``;
- ``explain`` shows every candidate of a recall with its similarity, Q and score; ``stats`` the counts
  and the Q distribution; ``prompts`` the run's HEAD prompts; ``memory`` one memory by id.

A tenant's memories live where ``evolve serve`` keeps them: tenant T's run is ``<run>@T``
(``RunSpec.for_tenant``) and an agent's namespace ``<run>@T/<agent>`` (``agent_namespace``); the
``agent`` argument names the agent part, never a whole namespace, so no tenant can name another's.
Under ``[serve] memory = "shared"`` a recall also reads the trained run's memory ``<run>/<agent>``
(read-only: rewards move the tenant's overlay Q on those, never the memories themselves).
A recall id another tenant made is unknown here, exactly as one that never existed.

Example:
    >>> from evolve.spec import RunSpec
    >>> spec = RunSpec.model_validate({"environment": {"tasks": "unused.jsonl"}, "run": {"database": "sqlite://"},
    ...     "embedder": {"name": "hash"}})
    >>> memory = TenantMemory(spec)
    >>> _ = memory.remember("Zürich-Nordhafen", "Door code of the Harbor warehouse?", success=True,
    ...     what_worked="Read it off the site plan: 4471.")
    >>> found = memory.recall("Zürich-Nordhafen", "Harbor warehouse door code")
    >>> memory.feedback("Zürich-Nordhafen", found["recall_id"], success=True)["reinforced"]
    1
    >>> memory.close()
"""

from __future__ import annotations

import dataclasses
import math
import threading
from dataclasses import dataclass
from numbers import Real
from typing import Any

from connectors import ConfigError, Embedder, StoreError
from connectors.db import check_chars
from evolve.build import agent_namespace, build_store, spec_prompts
from evolve.prompts.graph import PromptGraph
from evolve.serve.chat_requests import has_head, trained_prompts
from evolve.spec import RunSpec
from memory import MemoryItem, MemoryStore, Recall
from memory.write.checks import MAX_FEEDBACK_ID, check_k, fit_id, writer_name

MAX_K = 50
"""The most memories one recall returns."""
MAX_KEY = 200
"""The most characters of a feedback key."""


class UnknownRecall(StoreError):
    """No recall with this id belongs to this tenant (or it never existed: the two look the same)."""


@dataclass(frozen=True)
class Namespaces:
    """Where one agent of one tenant remembers (``own``) and what it also recalls, read-only (``shared``)."""

    agent: str
    own: str
    shared: str | None


class TenantMemory:
    """The spec's memory store served per tenant to agents that bring their own model.

    Args:
        spec: the run spec (its database, embedder, memory settings, agents and ``[serve] memory``).
        store: an open store to use (default: ``build_store(spec, embedder)``); closed by ``close``.
        embedder: the embedder to build the store with (default: the spec's).

    Example:
        >>> # memory = TenantMemory(load_spec("data/facility_codes.toml"))
        >>> # memory.recall("Zürich-Nordhafen", "Door code of the Harbor warehouse?", k=3)["memories"]
    """

    def __init__(self, spec: RunSpec, *, store: MemoryStore | None = None, embedder: Embedder | None = None) -> None:
        self.spec = spec
        self.agents = [a.name for a in spec.agents if a.remembers]
        if not self.agents:
            raise ConfigError("no agent of this spec has memory ([[agents]] memory = true): there is nothing to serve")
        built = store if store is not None else build_store(spec, embedder)
        if built is None:
            raise ConfigError("[memory] enabled = false: this spec has no memory to serve; enable it to serve it")
        self.store: MemoryStore = built
        self._graphs: dict[str, PromptGraph] = {}
        self._lock = threading.Lock()

    # ---- where a tenant's memories are ---------------------------------------------------------------

    def run_name(self, tenant: str | None) -> str:
        """The tenant's run, ``<run>@<tenant>`` (None, or ``[serve] memory = "base"``: the trained run)."""
        return self.spec.for_tenant(tenant).run.name

    def namespaces(self, tenant: str | None, agent: str | None = None) -> Namespaces:
        """The tenant's namespace for ``agent`` (default: the spec's first agent with memory)."""
        name = self.agents[0] if agent is None else agent
        if name not in self.agents:
            raise ConfigError(f"unknown namespace {name!r:.80}: this server's namespaces are {self.agents}")
        spec = self.spec.for_tenant(tenant)
        shared = spec.shared_run
        return Namespaces(
            name, agent_namespace(spec.run.name, name), None if shared is None else agent_namespace(shared, name)
        )

    # ---- the tools -----------------------------------------------------------------------------------

    def recall(self, tenant: str | None, query: str, *, k: int = 5, agent: str | None = None) -> dict[str, Any]:
        """Up to ``k`` memories for ``query``, best first, each with why it was chosen; ``recall_id`` is the
        handle ``feedback`` and ``explain`` take."""
        k = check_k(k, most=MAX_K)
        where = self.namespaces(tenant, agent)
        base = self.store.config.retrieval
        config = dataclasses.replace(base, k2=k, k1=max(base.k1, k))
        recall = self.store.retrieve(query, namespace=where.own, config=config, shared=where.shared)
        ranked_by: dict[str, float] = {}
        if any(item.namespace != where.own for item in recall.items):  # ranked by this tenant's Q of them
            logged = self.store.explain(recall.id, namespace=where.own)["candidates"]
            ranked_by = {c["id"]: c["q"] for c in logged}
        return {
            "recall_id": recall.id,
            "namespace": where.agent,
            "explored": recall.explored,
            "memories": recalled(recall, where, ranked_by),
        }

    def remember(
        self,
        tenant: str | None,
        task: str,
        *,
        success: bool,
        what_worked: str = "",
        instead: str = "",
        agent: str | None = None,
    ) -> dict[str, Any]:
        """Write one experience of ``task``: what was done (``what_worked``) and, for a failure, what to
        do ``instead``. Stored as every attempt is (``MemoryStore.write``), at the store's initial Q, written by
        ``mcp:<tenant>`` (``mcp:<run>`` without one): under ``[memory] trust = "quarantine"`` with the default
        trusted writers it is held back from recalls until an operator releases it (``evolve memory release``)."""
        if not isinstance(success, bool):
            raise ConfigError(f"success must be true or false, got {success!r:.80}")
        where = self.namespaces(tenant, agent)
        item = self.store.write(
            task,
            trajectory=what_worked,
            feedback=instead,
            success=success,
            namespace=where.own,
            provenance={"via": "mcp"},
            writer=writer_name("mcp", tenant if tenant is not None else self.run_name(None)),
        )
        return {"id": item.id, "namespace": where.agent, **memory_fields(item, where)}

    def feedback(
        self,
        tenant: str | None,
        recall_id: str,
        *,
        reward: float | None = None,
        success: bool | None = None,
        key: str | None = None,
    ) -> dict[str, Any]:
        """Reinforce the memories ``recall_id`` selected: ``reward`` in [-1, 1], or ``success`` (1 or -1).

        Once per ``(recall_id, key)``: a repeat returns ``applied=False`` and changes nothing.

        Raises:
            ConfigError: neither or both of ``reward`` and ``success``, a reward outside [-1, 1], a bad key.
            UnknownRecall: the tenant made no recall with this id.
        """
        value = check_reward_or_success(reward, success)
        key = check_key(key)
        where, detail = self._find_recall(tenant, recall_id)
        feedback_id = fit_id(f"mcp:{recall_id}:{key}", MAX_FEEDBACK_ID)
        receipt = {"recall_id": recall_id, "key": key, "reward": value, "applied": False, "reinforced": 0}
        if any(f["id"] == feedback_id for f in detail["feedback"]):
            return receipt  # this key was applied before
        reinforced = self.store.reinforce(recall_id, value, feedback_id=feedback_id, namespace=where.own)
        # 0 for a recall that selected memories: a concurrent call with the same key was first.
        applied = reinforced > 0 or not detail["selected"]
        return {**receipt, "applied": applied, "reinforced": reinforced}

    def explain(self, tenant: str | None, recall_id: str) -> dict[str, Any]:
        """The logged recall: its query and config, every candidate (sim, Q, z-scores, score, selected,
        source) and the feedback applied to it since."""
        where, detail = self._find_recall(tenant, recall_id)
        out = {**detail, "namespace": where.agent, "shared": detail["shared"] is not None}
        for c in out["candidates"]:
            c["source"] = "own" if c["source"] == where.own else "shared"
        return out

    def stats(self, tenant: str | None, *, agent: str | None = None) -> dict[str, Any]:
        """Counts and the Q distribution of the tenant's namespace (and how many shared memories it reads)."""
        where = self.namespaces(tenant, agent)
        out = self.store.stats(where.own)
        out["namespace"] = where.agent
        out["shared_count"] = None if where.shared is None else self.store.stats(where.shared)["count"]
        return out

    # ---- the resources -------------------------------------------------------------------------------

    def prompts(self, tenant: str | None) -> dict[str, Any]:
        """The tenant's HEAD prompts (``"<agent>.system"``, ``"<agent>.library"``) and their version id."""
        head = self.graph(tenant).head()
        return {"run": self.run_name(tenant), "version": head.id, "prompts": dict(head.nodes)}

    def graph(self, tenant: str | None) -> PromptGraph:
        """The tenant's prompt graph, seeded on first use as ``Deployment.graph`` seeds it: from the trained
        run's HEAD under ``[serve] memory = "shared"`` (once it has one), else from the spec."""
        spec = self.spec.for_tenant(tenant)
        run = spec.run.name
        with self._lock:
            if run not in self._graphs:
                graph = PromptGraph(self.store.engine, run)
                if not has_head(graph):
                    prompts, edges = spec_prompts(spec)
                    if spec.shared_run is not None:
                        prompts = trained_prompts(self.store.engine, spec.shared_run, prompts)
                    graph.init(prompts, edges)
                self._graphs[run] = graph
            return self._graphs[run]

    def memory(self, tenant: str | None, memory_id: str) -> dict[str, Any]:
        """One memory the tenant can recall, by id: its own, or one of the shared memory it reads."""
        for agent in self.agents:
            where = self.namespaces(tenant, agent)
            for namespace in (where.own, where.shared):
                if namespace is None:
                    continue
                try:
                    item = self.store.get(memory_id, namespace=namespace)
                except StoreError:
                    continue
                return {"id": item.id, "namespace": agent, **memory_fields(item, where)}
        raise StoreError(f"no memory {memory_id!r:.80} for this tenant")

    def close(self) -> None:
        """Save the vector index and release the database."""
        self.store.close()

    def _find_recall(self, tenant: str | None, recall_id: str) -> tuple[Namespaces, dict[str, Any]]:
        """The recall ``recall_id`` of one of the tenant's namespaces, with its log."""
        if isinstance(recall_id, str) and 0 < len(recall_id) <= 64 and recall_id.isprintable():
            for agent in self.agents:
                where = self.namespaces(tenant, agent)
                try:
                    return where, self.store.explain(recall_id, namespace=where.own)
                except StoreError:
                    continue
        raise UnknownRecall(f"unknown recall id {recall_id!r:.80}: no recall of this tenant has it")


def recalled(recall: Recall, where: Namespaces, ranked_by: dict[str, float]) -> list[dict[str, Any]]:
    """A recall's memories, best first, with the numbers that chose them; ``ranked_by`` holds the Q the
    ranking used where it is not the memory's own (a shared memory: the tenant's Q of it)."""
    out = []
    for rank, scored in enumerate(recall.details, 1):
        fields = memory_fields(scored.item, where)
        fields["q"] = q = ranked_by.get(scored.item.id, scored.item.q)
        why = f"similarity {scored.sim:.3f}, Q {q:+.3f}: score {scored.score:+.3f} (rank {rank})"
        if recall.explored:
            why += "; picked at random among the candidates (exploration)"
        out.append({"id": scored.item.id, **fields, "similarity": scored.sim, "why": why})
    return out


def memory_fields(item: MemoryItem, where: Namespaces) -> dict[str, Any]:
    return {
        "intent": item.intent,
        "experience": item.experience,
        "q": item.q,
        "visits": item.visits,
        "success": item.success,
        "source": "own" if item.namespace == where.own else "shared",
    }


def check_reward_or_success(reward: object, success: object) -> float:
    """Exactly one of ``reward`` (a finite number in [-1, 1]) and ``success`` (true: 1, false: -1)."""
    if (reward is None) == (success is None):
        raise ConfigError("give exactly one of reward (a number from -1 to 1) and success (true or false)")
    if success is not None:
        if not isinstance(success, bool):
            raise ConfigError(f"success must be true or false, got {success!r:.80}")
        return 1.0 if success else -1.0
    if not isinstance(reward, Real) or isinstance(reward, bool) or not math.isfinite(float(reward)):
        raise ConfigError(f"reward must be a number from -1 (harmful) to 1 (helpful), got {reward!r:.80}")
    if not -1.0 <= float(reward) <= 1.0:
        raise ConfigError(f"reward must be a number from -1 (harmful) to 1 (helpful), got {float(reward)!r}")
    return float(reward)


def check_key(key: object) -> str:
    """A feedback's idempotency key (default ``"default"``): one feedback per recall and key."""
    if key is None:
        return "default"
    if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY:
        raise ConfigError(f"key must be a non-empty string of at most {MAX_KEY} characters, got {key!r:.80}")
    return check_chars("key", key)


__all__ = ["MAX_K", "Namespaces", "TenantMemory", "UnknownRecall", "check_reward_or_success"]
