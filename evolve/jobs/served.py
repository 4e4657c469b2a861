"""Turning served ratings into learning: the memories a rated answer recalled, the lessons it teaches,
and the traces a prompt optimizer learns from.

A rating arrives through ``Deployment.feedback`` (``evolve.serve.deployment``), which reinforces the recalls
of the rated response at once (``evolve.serve.feedback.reinforce_recalls``) and queues the rating in
``evolve_feedback`` (``evolve.serve.responses``). ``evolve job`` then, before its round:

- ``learn_from_feedback`` finishes the queue: reinforces what was not yet reinforced, writes each rated
  response into the memory of the agents that answered it, marks it learned; a rating that cannot be
  learned is quarantined with its reason instead of blocking the queue;
- ``feedback_traces`` hands the answers rated since the last job to the round's prompt step, where
  textual gradients learn from the users' comments.

``learn_served(evolver)`` does both.

Example:
    >>> from connectors import Message
    >>> from evolve.serve.deployment import Deployment
    >>> from evolve.spec import RunSpec
    >>> spec = RunSpec.model_validate({"environment": {"tasks": "unused.jsonl"}, "run": {"database": "sqlite://"},
    ...     "model": {"chat": "fake/scripted", "options": {"replies": ["4"]}}, "embedder": {"name": "hash"}})
    >>> deployment = Deployment(spec)
    >>> answer = deployment.answer([Message("user", "What is 2 + 2?")], tenant="alice")
    >>> _ = deployment.feedback(answer.id, 0.0, tenant="alice", comment="show the working")
    >>> [t.feedback for t in feedback_traces(deployment.engine, deployment.run_name("alice"))]
    ['A user rated this answer 0 out of 1 (bad). Their comment: show the working']
    >>> deployment.close()
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, select, update

from connectors import ChatModel, ConnectorError, EvolveError, StoreError
from connectors.db import for_reads
from evolve.agent import Team
from evolve.episode import Step, condense, to_trace
from evolve.evolver import Evolver, centred
from evolve.serve.feedback import reinforce_recalls
from evolve.serve.responses import feedback_rows, open_tables, quarantine, responses, stored_steps
from memory import MemoryStore
from memory.config import FailureKeeps
from memory.write.checks import fit_id, writer_name
from optimizers.types import Trace

log = logging.getLogger(__name__)


def learn_from_feedback(store: MemoryStore | None, team: Team, run: str, *, writer: ChatModel | None = None) -> int:
    """Finish the run's queued feedback: reinforce what was not yet reinforced, write each rated response
    into the memory of every agent that answered it (idempotent ids, written by ``served_writer(run)``),
    mark it learned; returns how many.

    ``evolve job`` calls this before its round, so a killed server or job loses nothing and applies
    nothing twice. A rating that cannot be learned (its stored response cannot be read, or memory refuses
    it) is quarantined with the error as its reason and a warning, and the rest are learned: one bad
    rating never blocks the queue (``evolve.serve.responses``). A model or embedder that fails in a way
    that may pass (``ConnectorError.retryable``) leaves it queued and stops here, for the next job to
    retry. Without a memory store there is nothing to learn into.
    """
    if store is None:
        return 0
    open_tables(store.engine)
    with for_reads(store.engine).connect() as conn:
        rows = conn.execute(
            select(feedback_rows, responses.c.query, responses.c.answer, responses.c.steps)
            .join(responses, responses.c.id == feedback_rows.c.response_id)
            .where(feedback_rows.c.run == run, feedback_rows.c.learned == 0, feedback_rows.c.quarantined.is_(None))
            .order_by(feedback_rows.c.created_at)
        ).all()
    learned = 0
    for row in rows:
        r = dict(row._mapping)
        try:
            steps = stored_steps(r["response_id"], r["steps"])
            if not r["applied"]:
                reinforce_recalls(store, run, r["id"], steps, centred(r["score"]))
            _write(store, team, r, steps, writer, served_writer(run))
        except EvolveError as e:
            if isinstance(e, ConnectorError) and e.retryable:
                raise
            reason = f"{type(e).__name__}: {e}"
            log.warning("run %s: rating %s quarantined, not learned: %s", run, r["id"], reason)
            quarantine(store.engine, r["id"], reason)
            continue
        with store.engine.begin() as conn:
            conn.execute(update(feedback_rows).where(feedback_rows.c.id == r["id"]).values(applied=1, learned=1))
        learned += 1
    return learned


def learn_served(evolver: Evolver, *, since: float = 0.0) -> list[Trace]:
    """What ``evolve job`` does with served feedback before its round: learn the queue into the run's
    memory (``learn_from_feedback``) and return the answers rated since ``since`` for its prompt step."""
    learn_from_feedback(evolver.memory, evolver.team, evolver.run_name, writer=evolver.writer)
    return feedback_traces(evolver.log.engine, evolver.run_name, since=since)


def feedback_traces(engine: Engine, run: str, *, since: float = 0.0, limit: int = 50) -> list[Trace]:
    """The run's rated answers since ``since`` (Unix time), newest first, as traces a prompt optimizer
    learns from: the score is the rating, the feedback the user's comment (``Evolver.run_round``'s
    ``extra_traces``)."""
    open_tables(engine)
    with for_reads(engine).connect() as conn:
        rows = conn.execute(
            select(feedback_rows.c.response_id, feedback_rows.c.score, feedback_rows.c.comment, responses)
            .join(responses, responses.c.id == feedback_rows.c.response_id)
            .where(
                feedback_rows.c.run == run, feedback_rows.c.created_at > since, feedback_rows.c.quarantined.is_(None)
            )
            .order_by(feedback_rows.c.created_at.desc())
            .limit(limit)
        ).all()
    traces = []
    for row in rows:
        r = row._mapping
        try:
            steps = stored_steps(r["response_id"], r["steps"])
        except StoreError as e:
            log.warning("run %s: %s; the rating is left out of the prompt step", run, e)
            continue
        feedback = rating_text(r["score"], r["comment"])
        served = f"served:{r['response_id']}"
        traces.append(to_trace(served, steps, r["answer"], float(r["score"]), feedback, prompt=r["query"]))
    return traces


def promote(store: MemoryStore | None, team: Team, *, min_q: float, min_visits: int, tenant: str | None = None) -> int:
    """Move a tenant's memories whose Q reached ``min_q`` over at least ``min_visits`` rewards into the shared
    memory its agents recall from (``MemoryView.shared``: the trained run's); returns how many moved.

    Each is stored there under a fixed id (``promoted:<id>``), with its Q, visits not carried (the shared
    memory has not been rewarded for it yet) and ``promoted_from`` in its meta, then removed from the
    tenant's memory, so every tenant recalls it and none recalls it twice. A promotion stopped half way
    leaves the shared copy (a repeat stores nothing twice) and removes the tenant's on the next call.

    The copy's writer is ``promoted:<tenant>`` (without ``tenant``: ``promoted:<the tenant's namespace>``), the
    original writer kept as ``meta["promoted_writer"]``. ``promoted:*`` is not among the default trusted
    writers, so under ``[memory] trust = "neutral"`` the copy starts at ``q_init`` with no visits (its Q is the
    tenant's own ratings), and under ``"quarantine"`` no tenant recalls it until an operator releases it
    (``memory.defences.trust``); the tenant's copy is removed either way.
    """
    if store is None:
        return 0
    moved = 0
    for agent in team.agents.values():
        view = agent.memory
        if view is None or view.shared is None:
            continue
        ready = [m for m in store.items(view.namespace) if m.q >= min_q and m.visits >= min_visits]
        who = writer_name("promoted", tenant if tenant is not None else view.namespace)
        for m in ready:
            meta = {k: v for k, v in m.meta.items() if k not in ("success", "writer")}
            if "writer" in m.meta:
                meta["promoted_writer"] = m.meta["writer"]
            store.add(
                m.intent, m.experience, namespace=view.shared, success=m.meta.get("success"), q=m.q,
                meta={**meta, "promoted_from": view.namespace, "promoted_id": m.id}, id=fit_id(f"promoted:{m.id}"),
                writer=who,
            )  # fmt: skip
        moved += store.remove([m.id for m in ready], namespace=view.namespace)
    return moved


def rating_text(score: float, comment: str) -> str:
    """A user's rating as the feedback text memory and optimizers learn from."""
    verdict = f"A user rated this answer {score:g} out of 1 ({'good' if score >= 0.5 else 'bad'})."
    return f"{verdict} Their comment: {comment}" if comment else verdict


def served_writer(run: str) -> str:
    """Who wrote the memories a served run learns from its ratings: ``tenant:<T>`` in tenant T's run
    ``<run>@<T>``. Under ``[serve] memory = "base"`` the served run is the trained run itself and the rating
    does not say which key's tenant sent it: ``run:<run>`` (one tenant only:
    ``evolve.serve.protocols.keys.check_base_memory``).

    Example:
        >>> served_writer("codes@Zürich-Nordhafen"), served_writer("codes")
        ('tenant:Zürich-Nordhafen', 'run:codes')
    """
    _, at, tenant = run.partition("@")
    return writer_name("tenant", tenant) if at else writer_name("run", run)


def _write(
    store: MemoryStore,
    team: Team,
    r: Mapping[str, Any],
    steps: Sequence[Step],
    writer: ChatModel | None,
    who: str,
) -> None:
    success = r["score"] >= 0.5
    feedback, trajectory = rating_text(r["score"], r["comment"]), condense(steps)
    # A rating without a comment is only a verdict: the answer it judged is what the memory must show
    # (else "rated bad" about nothing); a comment says what was wrong, as an environment's feedback does.
    keeps: FailureKeeps | None = None if r["comment"] else "both"
    for agent in dict.fromkeys(s.agent for s in steps):
        view = team.agents[agent].memory if agent in team.agents else None
        if view is None:
            continue
        store.write(
            r["query"],
            trajectory=trajectory,
            feedback=feedback,
            success=success,
            namespace=view.namespace,
            llm=writer,
            provenance={"response": r["response_id"], "feedback": r["id"], "score": r["score"]},
            id=fit_id(f"served:{r['response_id']}/{view.namespace}"),  # the same id every time: written once
            failure_keeps=keeps,
            writer=who,
        )


__all__ = [
    "feedback_traces", "learn_from_feedback", "learn_served", "promote", "rating_text", "served_writer",
]  # fmt: skip
