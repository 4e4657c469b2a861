"""Timing a served answer's work: each recall and each model call of the tenant's team, and the answer's recording.

``Deployment`` builds a team per answer, so it can give that team's agents timed stand-ins for their memory view
(``TimedView``) and their model (``TimedChat``): both hand every call on unchanged and add a ``Timed`` record of it
to one list per answer. The answer carries the list (``Answer.work``): ``Server-Timing`` sums it, ``/metrics``
observes each call (``evolve.serve.metrics``) and a trace turns each into a child span of the request
(``evolve.serve.tracing``). A model call that fails is recorded too, with its error.

Example:
    >>> from connectors import ChatClient
    >>> from connectors.fakes import ScriptedChat
    >>> work: list[Timed] = []
    >>> chat = TimedChat(ChatClient(ScriptedChat(["4"])), work)
    >>> chat.complete("2 + 2?").text, [(w.kind, w.detail["model"]) for w in work]
    ('4', [('model', 'scripted')])
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from connectors import ChatClient, Completion, Tool, Usage
from connectors.chat import Prompt
from connectors.streaming import StreamedCompletion
from evolve.agent import MemoryView, Team
from memory import Recall

Kind = Literal["recall", "model", "record"]


@dataclass(frozen=True)
class Timed:
    """One piece of an answer's work: a ``recall``, a ``model`` call or the ``record``ing of the answer.

    Attributes:
        kind: what the work was.
        started: when it started, in seconds since the epoch (a trace's child span starts there).
        seconds: how long it took.
        detail: what a span of it says: a recall's ``namespace``, ``recall_ids`` and ``memories``; a model call's
            ``model``, ``caller``, ``prompt_tokens``, ``completion_tokens``, ``finish_reasons`` (or ``error``).
    """

    kind: Kind
    started: float
    seconds: float
    detail: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@contextmanager
def timing(work: list[Timed], kind: Kind, **detail: Any) -> Iterator[dict[str, Any]]:
    """Time the block into ``work``; the block may add to the yielded ``detail``. A failure is recorded with its
    error, then goes on."""
    started, clock = time.time(), time.perf_counter()
    found = dict(detail)
    try:
        yield found
    except Exception as e:
        found["error"] = type(e).__name__
        raise
    finally:
        work.append(Timed(kind, started, time.perf_counter() - clock, found))


def seconds_of(work: Sequence[Timed], kind: Kind) -> float:
    """The seconds all of ``work``'s pieces of ``kind`` took, summed (calls made in parallel count each)."""
    return sum(w.seconds for w in work if w.kind == kind)


def timings(work: Sequence[Timed], started: float) -> dict[str, float]:
    """An answer's ``timings`` (``Server-Timing``), in milliseconds: its recalls and model calls summed, and the
    whole answer since ``started`` (a ``perf_counter`` reading)."""
    return {
        "recall": round(seconds_of(work, "recall") * 1000, 2),
        "model": round(seconds_of(work, "model") * 1000, 2),
        "answer": round((time.perf_counter() - started) * 1000, 2),
    }


@dataclass(frozen=True)
class TimedView(MemoryView):
    """A memory view that adds a ``Timed`` record of each recall to ``work`` (one list per served answer)."""

    work: list[Timed] = dataclasses.field(default_factory=list)

    def recall_many(self, queries: Sequence[str], contexts: Sequence[str | None] | None = None) -> list[Recall]:
        with timing(self.work, "recall", namespace=self.namespace) as detail:
            recalls = super().recall_many(queries, contexts)
            detail.update(recall_ids=[r.id for r in recalls], memories=sum(len(r.items) for r in recalls))
            return recalls


class TimedChat(ChatClient):
    """A team's model for one answer: every call goes to ``model`` (its retries, cache and usage accounting are
    the shared client's) and adds a ``Timed`` record to ``work``; a stream's when it ends.

    It keeps no state of its own but ``work``: every other attribute (``backend``, ``name``, ``usage``...) is the
    wrapped client's.
    """

    def __init__(self, model: ChatClient, work: list[Timed]) -> None:  # no super().__init__(): the state is model's
        self._model = model
        self._work = work

    def __getattr__(self, name: str) -> Any:
        if name in ("_model", "_work") or name.startswith("__"):  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self._model, name)

    def complete_batch(
        self,
        prompts: Sequence[Prompt],
        *,
        sample_index: int = 0,
        caller: str = "default",
        tools_each: Sequence[Sequence[Tool]] | None = None,
        **params: Any,
    ) -> list[Completion]:
        with timing(self._work, "model", model=self._model.name, caller=caller) as detail:
            out = self._model.complete_batch(
                prompts, sample_index=sample_index, caller=caller, tools_each=tools_each, **params
            )
            detail.update(described(out))
            return out

    def stream(
        self, messages: Prompt, *, sample_index: int = 0, caller: str = "default", **params: Any
    ) -> StreamedCompletion:
        started, clock = time.time(), time.perf_counter()
        detail: dict[str, Any] = {"model": self._model.name, "caller": caller}
        try:
            stream = self._model.stream(messages, sample_index=sample_index, caller=caller, **params)
        except Exception as e:
            self._work.append(
                Timed("model", started, time.perf_counter() - clock, detail | {"error": type(e).__name__})
            )
            raise

        def ended(completion: Completion) -> None:
            self._work.append(Timed("model", started, time.perf_counter() - clock, detail | described([completion])))

        stream.on_end(ended)
        return stream


def described(completions: Sequence[Completion]) -> dict[str, Any]:
    """A model call's tokens and finish reasons, summed over the prompts it answered."""
    usage = sum((c.usage for c in completions), Usage())
    reasons = [c.finish_reason or "stop" for c in completions]
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "finish_reasons": reasons,
    }


def timed(team: Team) -> list[Timed]:
    """Time every recall and model call of this (per-answer) team: the list the ``Timed`` records go to."""
    work: list[Timed] = []
    for agent in team.agents.values():
        agent.model = TimedChat(agent.model, work)
        if agent.memory is not None:
            view = agent.memory
            agent.memory = TimedView(view.store, view.namespace, view.config, view.shared, work)
    return work


__all__ = ["Kind", "Timed", "TimedChat", "TimedView", "described", "seconds_of", "timed", "timing", "timings"]
