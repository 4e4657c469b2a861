"""Serving an evolved team: answer chat requests from memory and HEAD prompts, learn from feedback.

``Deployment`` is the seam every protocol (``evolve.serve.protocols``: OpenAI-compatible HTTP, MCP, A2A,
LangChain) and ``evolve playground`` (Streamlit) stand on:

- ``answer(messages, tenant=…)`` runs the tenant's team on a conversation (each agent recalls from its
  namespace and speaks from the HEAD prompts) and records the response under a fresh id;
- ``stream(messages, tenant=…)`` gives the same answer as the answering agent generates it
  (``evolve.serve.streaming``), recorded under its id when the text ends or the stream is closed;
- ``feedback(response_id, score, tenant=…)`` reinforces exactly the memories that response recalled,
  once per idempotency key (``evolve.serve.feedback``), and queues the rated response for the next job,
  which learns it (``evolve.jobs.served``); a rating that cannot be learned is quarantined with its reason
  (``quarantined``, ``retry_quarantined``) instead of blocking the queue.

A tenant's run is ``<run>@<tenant>`` (``RunSpec.for_tenant``): its memories, prompts, rounds and
responses are keyed by that name, so one tenant never sees another's. Under ``[serve] memory = "shared"``
(the default) each agent also recalls the trained run's memory ``<run>/<agent>``, read-only, in the same
two-phase recall, and a tenant starts from the trained run's HEAD prompts: what ``evolve run`` trained is
what every tenant is served. A tenant's ratings move its own memories and its overlay Q on the shared
ones (``memory.recall.context_q``), never another tenant's ranking; ``evolve job --tenant`` learns them, and
with ``[serve] promote = true`` moves the tenant's well-rated memories into the shared memory
(``evolve.jobs.served.promote``).

Example:
    >>> from evolve.spec import RunSpec
    >>> spec = RunSpec.model_validate({"environment": {"tasks": "unused.jsonl"}, "run": {"database": "sqlite://"},
    ...     "model": {"chat": "fake/scripted", "options": {"replies": ["4"]}}, "embedder": {"name": "hash"}})
    >>> deployment = Deployment(spec)
    >>> answer = deployment.answer([Message("user", "What is 2 + 2?")], tenant="alice")
    >>> answer.text, deployment.feedback(answer.id, 1.0, tenant="alice").applied
    ('4', True)
    >>> deployment.close()
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from connectors import ChatClient, ConfigError, Embedder, Message, Tool, make_engine
from connectors.coalesce import Coalescing
from connectors.db import check_chars, for_reads
from connectors.embed_batching import BatchingEmbedder
from connectors.embed_cache import CachedEmbedder
from connectors.errors import same_kind
from evolve.agent import Team
from evolve.build import build_chat, build_store, build_team, spec_prompts
from evolve.episode import Step
from evolve.evolver import centred
from evolve.prompts.graph import PromptGraph
from evolve.prompts.versions import PromptVersion
from evolve.serve import formats
from evolve.serve.answer_checks import Checked, FailedAnswer, checked_act
from evolve.serve.answers import Answer, UnknownResponse, Watcher, response_row, tell_answered, tell_rated
from evolve.serve.chat_requests import (
    REQUEST_PARAMS,
    check_penalties,
    check_request_tools,
    conversation,
    has_head,
    trained_prompts,
)
from evolve.serve.feedback import FeedbackReceipt, check_score, reinforce_recalls
from evolve.serve.responses import (
    MAX_RESPONSE_ID,
    QuarantinedRating,
    feedback_rows,
    open_tables,
    quarantined,
    release,
    responses,
    stored_steps,
)
from evolve.serve.streaming import AnswerStream, stream_params
from evolve.serve.timing import Timed, timed, timing, timings
from evolve.spec import RunSpec
from evolve.tools.mcp import MCPConnections
from evolve.weights.escalation import weights_blocker
from evolve.weights.switch import adapter_registry, attach_adapters
from memory import MemoryStore


class Deployment:
    """A run spec's team, served to tenants: answers from memory and HEAD prompts, learns from feedback.

    Args:
        spec: the run spec (its model, embedder, database, agents and memory settings).
        chat: a loaded chat client to reuse (default: built from the spec). An in-process model's
            backend is wrapped in ``connectors.coalesce.Coalescing``: concurrent requests are generated
            together.
        embedder: a loaded embedder to reuse (default: loaded from the spec); wrapped in
            ``connectors.embed_batching.BatchingEmbedder``, so concurrent requests embed their queries together,
            and that in ``connectors.embed_cache.CachedEmbedder``, so a query asked lately is not embedded again.

    Example:
        >>> # deployment = Deployment(load_spec("data/facility_codes.toml"))
        >>> # deployment.answer([Message("user", "Door code of the Harbor warehouse?")], tenant="acme").text
        >>> # for delta in deployment.stream([Message("user", "And the gate's?")], tenant="acme"): print(delta, end="")
    """

    def __init__(self, spec: RunSpec, *, chat: ChatClient | None = None, embedder: Embedder | None = None) -> None:
        self.spec = spec
        self.chat = chat or build_chat(spec)
        if getattr(self.chat.backend, "tools_each", False) is True and not isinstance(self.chat.backend, Coalescing):
            self.chat.backend = Coalescing(self.chat.backend)  # an in-process model: concurrent requests batch
        self.store: MemoryStore | None = build_store(spec, embedder)
        if self.store is not None and not isinstance(self.store.embedder, CachedEmbedder):
            # a repeated query skips the model; the others, at once, embed together
            self.store.embedder = CachedEmbedder(BatchingEmbedder(self.store.embedder))
        self.engine: Engine = self.store.engine if self.store is not None else make_engine(spec.run.database)
        open_tables(self.engine)
        self._graphs: dict[str, PromptGraph] = {}
        self._heads: dict[str, PromptVersion] = {}  # each run's HEAD as last read (``team``)
        self._lock = threading.Lock()
        self.mcp = MCPConnections(spec.path.parent if spec.path is not None else None)  # one set for every team
        self.watchers: list[Watcher] = []

    def watch(self, watcher: Watcher) -> None:
        """Tell ``watcher`` of every answer recorded and every rating taken, whichever protocol served it
        (``evolve.serve.answers.Watcher``): how ``/metrics`` and traces see the work."""
        self.watchers.append(watcher)

    @property
    def model_id(self) -> str:
        """The name clients pass as ``model``: the run's name."""
        return self.spec.run.name

    def run_name(self, tenant: str | None) -> str:
        return self.spec.for_tenant(tenant).run.name

    def graph(self, tenant: str | None) -> PromptGraph:
        """The tenant's versioned prompts, seeded on first use from the trained run's HEAD (``[serve] memory
        = "shared"``, once the run has one) or else the spec's; from then on the tenant's own jobs evolve them."""
        run = self.run_name(tenant)
        with self._lock:
            if run not in self._graphs:
                graph = PromptGraph(self.engine, run)
                if not has_head(graph):
                    spec = self.spec.for_tenant(tenant)
                    prompts, edges = spec_prompts(spec)  # no model loaded, no tool server connected
                    if spec.shared_run is not None:
                        prompts = trained_prompts(self.engine, spec.shared_run, prompts)
                    graph.init(prompts, edges)
                self._graphs[run] = graph
            return self._graphs[run]

    def team(self, tenant: str | None) -> tuple[Team, str]:
        """The tenant's team at its prompts' HEAD (and its HEAD adapters on a local model), and HEAD's id."""
        graph = self.graph(tenant)
        head_id, kept = graph.head_id(), self._heads.get(graph.name)
        head = kept if kept is not None and kept.id == head_id else graph.get(head_id)
        self._heads[graph.name] = head  # its components, read once per version
        team = build_team(
            self.spec.for_tenant(tenant), self.chat, self.store, mcp=self.mcp, engine=self.engine
        ).with_prompts(head.nodes)
        if weights_blocker(team) is None:
            attach_adapters(team, adapter_registry(self.engine, self.run_name(tenant)))
        return team, head.id

    def answer(
        self,
        messages: Sequence[Message],
        *,
        tenant: str | None = None,
        params: Mapping[str, Any] | None = None,
        tools: Sequence[Tool] | None = None,
        parallel_tool_calls: bool = True,
        response_format: Mapping[str, Any] | None = None,
        id_prefix: str = "chatcmpl-",
    ) -> Answer:
        """Answer the conversation's last user message with the tenant's team; the answer is recorded under a fresh
        id starting with ``id_prefix`` (the Responses API's are ``resp_``).

        ``params`` (``REQUEST_PARAMS``) override the spec's own for this answer: its ``max_tokens`` is the
        default, a request's wins. ``tools`` are the app's: described to the answering agent, never run
        here; its calls to them are the answer (``Answer.tool_calls``) and the app runs them;
        ``parallel_tool_calls=False`` keeps the first call of an answer that made several. Only a one-agent
        team takes tools. Without a ``seed`` each request samples afresh (the spec's seed would make every
        answer the same).
        ``response_format`` (OpenAI's ``json_object`` or ``json_schema``) is told to the team and its
        answer checked, with retries (``evolve.serve.formats``). ``logprobs=True`` asks for the answering
        agent's tokens and log-probabilities (``Answer.logprobs``): a local model computes them, an
        OpenAI-compatible one is asked for them, and a model that gives none makes it a ConfigError.

        Raises:
            ConfigError: no user message, a parameter the deployment does not take, a penalty an agent's
                model cannot take, tools for a team of several agents, or a malformed ``response_format``.
            ConnectorError: the team's model failed (after its retries).
            FailedAnswer: the answer still lacked the ``response_format`` or the required call after
                ``formats.ATTEMPTS`` tries; it is recorded all the same, under ``response_id``, and takes feedback.
        """
        observation, query = conversation(messages)
        given = {k: v for k, v in (params or {}).items() if v is not None}
        extra = sorted(set(given) - set(REQUEST_PARAMS))
        if extra:
            raise ConfigError(f"unsupported parameters {extra}; a request may set {list(REQUEST_PARAMS)}")
        with self._arriving():  # a local model's batch waits for this request (connectors.coalesce)
            started = time.perf_counter()
            team, version = self.team(tenant)
            work = timed(team)
            tools = check_request_tools(tools, given.get("tool_choice"), team)
            given = check_penalties(given, team)
            given.setdefault("seed", secrets.randbelow(2**31))
            fmt = formats.response_format(response_format)
            sink = team.agents[team.sink].model
            api = getattr(sink.backend, "native_response_format", False) is True  # an OpenAI-compatible server
            grammar = getattr(sink.backend, "takes_response_format", False) is True  # a local model, a grammar
            if fmt is not None and (api or grammar):
                given["response_format"] = dict(response_format or {})  # decoded under it; checked all the same
            wants_logprobs = given.pop("logprobs", False) is True
            if wants_logprobs and api:
                given["logprobs"] = True  # a local model computes them always; a server is asked
            try:
                done = checked_act(
                    team, observation, query, given, tools, fmt=fmt, parallel_tool_calls=parallel_tool_calls
                )
            except FailedAnswer as failed:  # recorded all the same: the app may rate the failure
                kept = Checked(failed.steps, failed.usage, failed.raw)
                failed.response_id = self._record(kept, tenant, version, query, messages, work, started, id_prefix).id
                raise
            steps = done.steps
            if wants_logprobs and (not steps or steps[-1].logprobs is None):
                raise ConfigError(f"logprobs were asked for and the answering agent's model ({sink.name}) gave none")
            logprobs = steps[-1].logprobs if wants_logprobs else None
            return self._record(done, tenant, version, query, messages, work, started, id_prefix, logprobs)

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tenant: str | None = None,
        params: Mapping[str, Any] | None = None,
        id_prefix: str = "chatcmpl-",
    ) -> AnswerStream:
        """The answer ``answer(messages, tenant=…, params=…, id_prefix=…)`` gives, sent as it is generated
        (``evolve.serve.streaming``): iterate the returned ``AnswerStream`` for the final agent's text deltas;
        the answer is recorded under ``AnswerStream.id`` when they end or when the stream is closed, and then
        takes feedback like any answer.

        Returns once the final agent's first delta is there (every other agent has acted), so what fails
        before any text is raised here. Without a ``seed`` the request samples afresh, as a plain answer does.
        Requests with tools, ``tool_choice``, ``response_format`` or ``logprobs`` are answered whole, by ``answer``.

        Raises:
            ConfigError: no user message, or a parameter a streamed answer does not take.
            ConnectorError: the team's model failed before the final agent's first delta (after its retries).
        """
        observation, query = conversation(messages)
        given = stream_params(params)
        started = time.perf_counter()
        team, version = self.team(tenant)
        work = timed(team)
        given = check_penalties(given, team)
        given.setdefault("seed", secrets.randbelow(2**31))
        stream = team.stream(observation, query=query, params=given)
        if stream.error is not None:
            raise same_kind(stream.cause, f"the team could not answer: {stream.error}")
        run = self.run_name(tenant)
        return AnswerStream(
            stream, engine=self.engine, run=run, prompt_version=version, query=query, messages=messages,
            id_prefix=id_prefix, work=work, started=started, watchers=self.watchers,
        )  # fmt: skip

    def _record(
        self,
        done: Checked,
        tenant: str | None,
        version: str,
        query: str,
        messages: Sequence[Message],
        work: list[Timed],
        started: float,
        id_prefix: str,
        logprobs: tuple[tuple[str, float], ...] | None = None,
    ) -> Answer:
        """The team's answer under a fresh response id, stored for feedback; the watchers are told."""
        answer = Answer(
            id=f"{id_prefix}{secrets.token_hex(12)}",
            run=self.run_name(tenant),
            text=done.text,
            steps=done.steps,
            usage=done.usage,
            prompt_version=version,
            created=int(time.time()),
            timings=timings(work, started),
            logprobs=logprobs,
        )
        with timing(work, "record", response_id=answer.id), self.engine.begin() as conn:
            conn.execute(insert(responses).values(**response_row(answer, query, messages)))
        answer = dataclasses.replace(answer, work=tuple(work))
        tell_answered(self.watchers, answer)
        return answer

    def _arriving(self) -> AbstractContextManager[None]:
        backend = self.chat.backend
        return backend.arriving() if isinstance(backend, Coalescing) else nullcontext()

    def feedback(
        self,
        response_id: str,
        score: float,
        *,
        tenant: str | None = None,
        comment: str = "",
        key: str | None = None,
    ) -> FeedbackReceipt:
        """Reinforce the memories ``response_id`` recalled with ``score`` in [0, 1] (1: good, 0: bad).

        One feedback per ``(response_id, key)``: a repeat returns ``applied=False`` and changes nothing.
        The score maps to a reward in [-1, 1] as the loop's rewards do (``evolve.evolver.centred``).

        Raises:
            ConfigError: a score outside [0, 1] or not a number, or a malformed key or comment.
            UnknownResponse: the tenant has no response with this id.
        """
        score = check_score(score)
        key = _check_text(key if key is not None else "default", "key", 200)
        comment = _check_text(comment, "comment", 20_000, empty=True)
        run = self.run_name(tenant)
        with for_reads(self.engine).connect() as conn:
            row = conn.execute(
                select(responses.c.steps).where(responses.c.id == _response_id(response_id), responses.c.run == run)
            ).first()
        if row is None:
            raise UnknownResponse(f"no response {response_id!r:.80} for this tenant")
        feedback_id = f"{response_id}:{key}"
        reward = centred(score)
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    insert(feedback_rows).values(
                        id=feedback_id,
                        response_id=response_id,
                        run=run,
                        score=score,
                        comment=comment,
                        created_at=time.time(),
                        applied=0,
                        learned=0,
                    )
                )
        except IntegrityError:
            tell_rated(self.watchers, False)
            return FeedbackReceipt(response_id, feedback_id, False, 0, reward)
        reinforced = self._reinforce(run, feedback_id, stored_steps(response_id, row[0]), reward)
        tell_rated(self.watchers, True)
        return FeedbackReceipt(response_id, feedback_id, True, reinforced, reward)

    def _reinforce(self, run: str, feedback_id: str, steps: Sequence[Step], reward: float) -> int:
        reinforced = reinforce_recalls(self.store, run, feedback_id, steps, reward)
        with self.engine.begin() as conn:
            conn.execute(update(feedback_rows).where(feedback_rows.c.id == feedback_id).values(applied=1))
        return reinforced

    def response(self, response_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """A recorded response of this tenant (query, answer, steps with recall ids, prompt version)."""
        with for_reads(self.engine).connect() as conn:
            row = conn.execute(
                select(responses).where(
                    responses.c.id == _response_id(response_id), responses.c.run == self.run_name(tenant)
                )
            ).first()
        if row is None:
            raise UnknownResponse(f"no response {response_id!r:.80} for this tenant")
        out = dict(row._mapping)
        out["steps"], out["messages"] = json.loads(out["steps"]), json.loads(out["messages"])
        return out

    def quarantined(self, *, tenant: str | None = None) -> list[QuarantinedRating]:
        """The tenant's ratings that no job could learn, and why (``evolve job`` passes over them)."""
        return quarantined(self.engine, self.run_name(tenant))

    def retry_quarantined(self, *, tenant: str | None = None, feedback_ids: Sequence[str] | None = None) -> int:
        """Queue the tenant's quarantined ratings (all, or those of ``feedback_ids``) for the next job
        again, once their cause is fixed; returns how many."""
        return release(self.engine, self.run_name(tenant), feedback_ids)

    def close(self) -> None:
        """Close the agents' MCP servers, save the vector index and release the database."""
        self.mcp.close()
        if self.store is not None:
            self.store.close()


def _check_text(value: object, name: str, limit: int, *, empty: bool = False) -> str:
    """A key or comment every database can store (PostgreSQL refuses NUL; memory refuses it when learning)."""
    if not isinstance(value, str) or (not empty and not value.strip()) or len(value) > limit:
        raise ConfigError(
            f"{name} must be a {'' if empty else 'non-empty '}string of at most {limit} characters, got {value!r:.80}"
        )
    return check_chars(name, value)


def _response_id(value: object) -> str:
    """A response id as a query may use it; anything that cannot be one is just an unknown id."""
    if isinstance(value, str) and 0 < len(value) <= MAX_RESPONSE_ID and value.isprintable():
        return value
    raise UnknownResponse(f"no response {value!r:.80} for this tenant")


__all__ = ["Deployment"]
