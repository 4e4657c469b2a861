"""Feedback by LangChain run id: which recalls happened under which run, and the reward that follows.

A LangChain app rates runs (LangSmith-style feedback: ``run_id``, ``key``, ``score``, ``value``,
``comment``), not recalls. ``RecallTracker`` is a callback handler that listens to the runs it is
passed to: every run's parent is noted when it starts, and when a retriever ends, the recall ids in its
documents' metadata (``MemoryRetriever`` puts them there) are recorded under the retriever's run and
every ancestor run. ``feedback(run_id, score)`` then reinforces exactly the recalls made under that
run — the top-level chain's run id included — once per feedback id.

The run → recall map lives in this process (bounded by ``max_runs``); the reinforcement itself is
durable and idempotent in the store (a repeated feedback id updates nothing, in any process).

Needs the ``langchain`` extra (``pip install -e '.[langchain]'``).

Example:
    >>> from connectors import HashEmbedder
    >>> from memory import MemoryStore
    >>> from uuid import uuid4
    >>> from memory.integrations.langchain import MemoryRetriever
    >>> store = MemoryStore("sqlite://", embedder=HashEmbedder())
    >>> memory_id = store.add("sort a list of numbers", "use sorted(xs)").id
    >>> tracker = RecallTracker(store)
    >>> chain = MemoryRetriever(store=store, k=1) | (lambda docs: docs[0].page_content)
    >>> run = uuid4()
    >>> chain.invoke("sort numbers", config={"callbacks": [tracker], "run_id": run})
    'use sorted(xs)'
    >>> tracker.feedback(run, 1.0).reinforced, round(store.get(memory_id).q, 2)
    (1, 0.3)
    >>> store.close()
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from connectors.errors import ConfigError, StoreError
from connectors.install import extra_hint
from memory.learn.rewards import reinforcements
from memory.store import MemoryStore
from memory.write.checks import check_reward

INSTALL_HINT = extra_hint("langchain")

try:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.documents import Document
except ImportError as e:  # the optional extra is missing: say which one
    raise ConfigError(
        f"memory.integrations.langchain_tracker needs langchain-core from the 'langchain' extra: {INSTALL_HINT}"
    ) from e

__all__ = ["RecallTracker", "RunFeedback"]

MAX_KEY = 50
# With "/" and a store's 32-character recall id, a recall's key (``memory.reinforcements``) fits the store's
# 128 characters unshortened: it reads as given, and keys applied before stay the same.
MAX_FEEDBACK_ID = 95


@dataclass(frozen=True)
class RunFeedback:
    """One feedback on a run, LangSmith-shaped, with what it did to the memory.

    Attributes:
        run_id: the rated run.
        key: the feedback's name (``"score"``, ``"correctness"``, ``"user_rating"``...).
        score: the number that became the reward of every recall made under the run.
        value: any extra value, kept as given (not used for learning).
        comment: free text, kept as given.
        feedback_id: the idempotency key (default ``"<run_id>:<key>"``).
        recall_ids: the recalls the feedback was applied to.
        reinforced: memories updated by this call; 0 when the feedback id was applied before.
        created_at: Unix time of the call.

    Example:
        >>> RunFeedback(UUID(int=1), "score", 1.0, None, "", "x:score", ("r1",), 2, 0.0).reinforced
        2
    """

    run_id: UUID
    key: str
    score: float
    value: Any
    comment: str
    feedback_id: str
    recall_ids: tuple[str, ...]
    reinforced: int
    created_at: float


def as_run_id(run_id: object) -> UUID:
    """A run id as a ``UUID`` (LangChain's type); its string form is accepted too."""
    if isinstance(run_id, UUID):
        return run_id
    if isinstance(run_id, str):
        try:
            return UUID(run_id)
        except ValueError:
            pass
    raise ConfigError(f"run_id must be a UUID (or its string form) as LangChain gives it, got {run_id!r:.80}")


class RecallTracker(BaseCallbackHandler):
    """Records the recalls made under each LangChain run, and applies feedback on a run to them.

    Pass it as a callback to the outermost call (``config={"callbacks": [tracker]}``): LangChain hands
    it to every child run, so it sees the whole tree. Choose the run id with ``config={"run_id": ...}``
    (or read it from LangSmith or ``collect_runs``); a retriever invoked on its own ignores
    ``config["run_id"]`` and takes ``retriever.invoke(query, run_id=...)`` instead (LangChain's quirk).

    Args:
        store: the store the recalls were made in (the one ``MemoryRetriever`` reads).
        max_runs: how many runs to remember; the oldest are forgotten first.

    Example:
        >>> from connectors import HashEmbedder
        >>> store = MemoryStore("sqlite://", embedder=HashEmbedder())
        >>> tracker = RecallTracker(store)
        >>> tracker.on_chain_start({}, {}, run_id=UUID(int=1))
        >>> tracker.recall_ids(UUID(int=1))
        ()
        >>> store.close()
    """

    run_inline = True  # record in the caller's thread, in event order, before the call returns

    def __init__(self, store: MemoryStore, *, max_runs: int = 10_000) -> None:
        if not isinstance(store, MemoryStore):
            raise ConfigError(f"RecallTracker store must be a MemoryStore, got {type(store).__name__}")
        if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
            raise ConfigError(f"RecallTracker max_runs must be an integer >= 1, got {max_runs!r}")
        self.store = store
        self.max_runs = max_runs
        self.records: list[RunFeedback] = []
        self._parents: OrderedDict[UUID, UUID | None] = OrderedDict()
        self._recalls: dict[UUID, dict[str, str]] = {}  # recall id -> its namespace, in recall order
        self._lock = threading.Lock()

    # -- listening -----------------------------------------------------------------------------
    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                       **kwargs: Any) -> None:  # fmt: skip
        self._start(run_id, parent_run_id)

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: UUID, parent_run_id: UUID | None = None,
                           **kwargs: Any) -> None:  # fmt: skip
        self._start(run_id, parent_run_id)

    def on_tool_start(self, serialized: Any, input_str: str, *, run_id: UUID, parent_run_id: UUID | None = None,
                      **kwargs: Any) -> None:  # fmt: skip
        self._start(run_id, parent_run_id)

    def on_llm_start(self, serialized: Any, prompts: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                     **kwargs: Any) -> None:  # fmt: skip
        self._start(run_id, parent_run_id)

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID,
                            parent_run_id: UUID | None = None, **kwargs: Any) -> None:  # fmt: skip
        self._start(run_id, parent_run_id)

    def on_retriever_end(
        self, documents: Sequence[Document], *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """Record the recall ids (and their namespaces) found in the documents' metadata under this run
        and its ancestors."""
        found = {
            doc.metadata["recall_id"]: str(doc.metadata.get("namespace") or "default")
            for doc in documents
            if isinstance(doc.metadata.get("recall_id"), str) and doc.metadata["recall_id"]
        }
        with self._lock:
            self._start_locked(run_id, parent_run_id)
            for run in self._lineage(run_id):
                self._recalls.setdefault(run, {}).update(found)

    # -- reading and feedback ------------------------------------------------------------------
    def recall_ids(self, run_id: UUID | str) -> tuple[str, ...]:
        """The recalls made under ``run_id`` (its own and its descendants'), in the order they happened.

        Raises:
            StoreError: this tracker never saw the run (or has forgotten it, see ``max_runs``).
        """
        run = as_run_id(run_id)
        with self._lock:
            if run not in self._parents:
                raise StoreError(
                    f"unknown run id {run}: this RecallTracker saw no run with it (pass the tracker in "
                    f"config={{'callbacks': [tracker]}} of the call that made the run; it keeps the last "
                    f"{self.max_runs} runs)"
                )
            return tuple(self._recalls.get(run, {}))

    def feedback(
        self,
        run_id: UUID | str,
        score: float,
        *,
        key: str = "score",
        value: Any = None,
        comment: str = "",
        feedback_id: str | None = None,
    ) -> RunFeedback:
        """Reinforce every recall made under ``run_id`` with ``score`` as the reward, once per feedback id.

        Args:
            run_id: a run this tracker saw (the top-level call's run id covers all its children).
            score: the reward, a finite number (``Q ← Q + α·(score − Q)``; within ±1e12, as every reward).
            key: the feedback's name; with the run id it makes the default feedback id.
            value: extra value kept on the record.
            comment: free text kept on the record.
            feedback_id: the idempotency key (default ``"<run_id>:<key>"``): a repeat updates nothing.

        Raises:
            ConfigError: a score that is not a finite number, or a malformed key, comment or feedback id.
            StoreError: an unknown run id.
        """
        run = as_run_id(run_id)
        reward = check_reward(score, "RecallTracker.feedback", what="score")  # the score is the reward
        _check_text(key, "key", MAX_KEY)
        if not isinstance(comment, str):
            raise ConfigError(f"comment must be a string, got {type(comment).__name__}")
        fid = _check_text(feedback_id if feedback_id is not None else f"{run}:{key}", "feedback_id", MAX_FEEDBACK_ID)
        recalls = self.recall_ids(run)
        with self._lock:
            where = dict(self._recalls.get(run, {}))
        entries = reinforcements([(recall_id, where[recall_id]) for recall_id in recalls], reward, fid)
        reinforced = self.store.reinforce_many(entries) if entries else 0
        record = RunFeedback(run, key, reward, value, comment, fid, recalls, reinforced, time.time())
        with self._lock:
            self.records.append(record)
        return record

    # -- helpers -------------------------------------------------------------------------------
    def _start(self, run_id: UUID, parent_run_id: UUID | None) -> None:
        with self._lock:
            self._start_locked(run_id, parent_run_id)

    def _start_locked(self, run_id: UUID, parent_run_id: UUID | None) -> None:
        if run_id in self._parents:
            if parent_run_id is not None:
                self._parents[run_id] = parent_run_id
            return
        self._parents[run_id] = parent_run_id
        while len(self._parents) > self.max_runs:
            old, _ = self._parents.popitem(last=False)
            self._recalls.pop(old, None)

    def _lineage(self, run_id: UUID) -> list[UUID]:
        """The run and its known ancestors, nearest first (a cycle or an unknown parent ends the walk)."""
        out: list[UUID] = []
        run: UUID | None = run_id
        while run is not None and run in self._parents and run not in out:
            out.append(run)
            run = self._parents[run]
        return out


def _check_text(value: object, name: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise ConfigError(f"{name} must be a non-empty string of at most {limit} characters, got {value!r:.80}")
    return value
