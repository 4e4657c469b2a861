"""Turning one attempt into one memory: cheap mode (no model) or a lesson written by an LLM.

Success and failure alike leave an experience (docs/design/decisions.md, "Writing experiences"). With a
model, a success becomes a 3–5 step reusable script plus the condensed trajectory, and a failure becomes
what went wrong, what to avoid and the correct approach when the feedback reveals it. When the model fails or answers
nothing, the cheap text is stored instead: an attempt is never lost. What a failure memory stores of
its attempt is ``MemoryConfig.failure_keeps`` (by default the feedback, not the wrong answer).

Example:
    >>> text = compose_experience("open the door", trajectory="go north\\nopen door", feedback="done", success=True)
    >>> text.mode, text.experience.splitlines()[1]
    ('cheap', 'Outcome: success')
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal

from connectors.chat import ChatModel
from connectors.errors import ConfigError
from connectors.types import Message
from memory import prompts
from memory.config import FAILURE_KEEPS, FailureKeeps
from memory.defences.trust import LOCAL_WRITER
from memory.write.checks import (
    check_chars,
    check_id,
    check_meta,
    check_namespace,
    check_success,
    check_text,
    check_writer,
    new_id,
)

log = logging.getLogger(__name__)

TRAJECTORY_LIMIT = 1500
FEEDBACK_LIMIT = 500
LESSON_LIMIT = 1500
WRITER_MAX_TOKENS = 400
NOT_KEPT = "(not kept)"


@dataclass(frozen=True)
class Written:
    """An experience text and how it was produced (``"cheap"`` or ``"llm"``).

    Example:
        >>> Written("Task: x", "cheap").mode
        'cheap'
    """

    experience: str
    mode: Literal["cheap", "llm"]


@dataclass(frozen=True)
class WriteEntry:
    """One attempt for ``MemoryStore.write_many``: the arguments ``MemoryStore.write`` takes.

    Attributes:
        intent: the task text the memory is written for.
        trajectory: what the agent did (condensed before storing).
        feedback: what the environment said about it.
        success: whether the attempt succeeded.
        namespace: the tenant or agent the memory belongs to.
        provenance: where it came from (episode id, recalls used), stored under ``meta["provenance"]``.
        id: a deterministic id makes the write idempotent (an id already stored is not written again).
        task: the task the attempt was at, when the caller knows it (a task id): memories of one task
            share one intent group and memories of different tasks never do, however alike their
            questions read. Without it, intents are grouped by similarity (``MemoryConfig.group_threshold``).
        failure_keeps: what this attempt's memory keeps if it failed, when it should differ from the
            store's ``MemoryConfig.failure_keeps`` (None: the store's). E.g. ``"both"`` where the feedback
            is only a verdict ("rated bad") and the attempt is what it judged.
        fact: the answer or fact the attempt established, when the caller knows it (stored as
            ``meta["fact"]``); None: read from the texts (``memory.upkeep.supersession``). With
            ``MemoryConfig.supersede`` a memory stating another fact than older ones of its group
            supersedes them.
        writer: who wrote it (``memory.defences.trust``): ``"<kind>:<name>"``, stored as ``meta["writer"]``; the
            trust policy decides by it (default ``"user:local"``, a direct API call).

    Example:
        >>> WriteEntry("open the door", trajectory="push", feedback="opened", success=True).namespace
        'default'
    """

    intent: str
    _: KW_ONLY
    trajectory: str
    feedback: str
    success: bool
    namespace: str = "default"
    provenance: Mapping[str, Any] | None = None
    id: str | None = None
    task: str | None = None
    failure_keeps: FailureKeeps | None = None
    fact: str | None = None
    writer: str = LOCAL_WRITER


def condense(text: str, limit: int = TRAJECTORY_LIMIT) -> str:
    """Whitespace collapsed, blank lines dropped, and the middle cut out when longer than ``limit``.

    The head (60%) and the tail (40%) survive, cut at line breaks where one is near: the start shows
    what was tried and the end shows how it finished.
    """
    lines = [re.sub(r"[ \t]+", " ", line).strip() for line in str(text).splitlines()]
    text = "\n".join(line for line in lines if line)
    if len(text) <= limit:
        return text
    budget = max(limit - len(prompts.OMITTED.format(count=len(text))) - 2, 20)
    head_len, tail_len = int(budget * 0.6), budget - int(budget * 0.6)
    head, tail = text[:head_len], text[len(text) - tail_len :]
    cut = head.rfind("\n")
    if cut > head_len // 2:
        head = head[:cut]
    cut = tail.find("\n")
    if 0 <= cut < tail_len // 2:
        tail = tail[cut + 1 :]
    omitted = len(text) - len(head) - len(tail)
    return f"{head}\n{prompts.OMITTED.format(count=omitted)}\n{tail}"


def kept_parts(trajectory: str, feedback: str, *, success: bool, keeps: FailureKeeps) -> tuple[str, str]:
    """The trajectory and feedback a memory stores: both for a success; for a failure what ``keeps`` says
    (``MemoryConfig.failure_keeps``), the dropped part shown as ``NOT_KEPT`` — unless the kept part is
    empty, when both stay, so that no memory is stored blank.

    Example:
        >>> kept_parts("Answer given: blue", "Wrong: it is grey.", success=False, keeps="feedback")
        ('(not kept)', 'Wrong: it is grey.')
        >>> kept_parts("Answer given: blue", "", success=False, keeps="feedback")
        ('Answer given: blue', '')
    """
    if success or keeps == "both":
        return trajectory, feedback
    if keeps == "feedback" and feedback.strip():
        return NOT_KEPT, feedback
    if keeps == "attempt" and trajectory.strip():
        return trajectory, NOT_KEPT
    return trajectory, feedback


def cheap_experience(
    task: str, *, trajectory: str, feedback: str, success: bool, keeps: FailureKeeps = "feedback"
) -> str:
    """The model-free experience: task, outcome, condensed trajectory and the environment's feedback
    (of a failure, the part ``keeps`` says)."""
    trajectory, feedback = kept_parts(trajectory, feedback, success=success, keeps=keeps)
    return prompts.CHEAP_EXPERIENCE.format(
        task=condense(task, TRAJECTORY_LIMIT),
        outcome="success" if success else "failure",
        trajectory=condense(trajectory) or "(empty)",
        feedback=condense(feedback, FEEDBACK_LIMIT) or "(none)",
    )


def writer_prompt(task: str, *, trajectory: str, feedback: str, success: bool) -> list[Message]:
    """The messages that ask a model to write the experience of one attempt."""
    fields = {
        "task": condense(task, TRAJECTORY_LIMIT),
        "trajectory": condense(trajectory) or "(empty)",
        "feedback": condense(feedback, FEEDBACK_LIMIT) or "(none)",
    }
    prompt = (prompts.SUCCESS_PROMPT if success else prompts.FAILURE_PROMPT).format(**fields)
    return [Message("system", prompts.WRITER_SYSTEM), Message("user", prompt)]


def lesson_experience(
    answer: str, *, trajectory: str, feedback: str, success: bool, keeps: FailureKeeps = "feedback"
) -> str | None:
    """The stored experience around a model's lesson, or None when the lesson is empty. A failure's
    lesson is stored with the feedback (never the raw attempt), unless ``keeps`` is ``"attempt"``."""
    lesson = condense(answer or "", LESSON_LIMIT)
    if not lesson:
        return None
    if success:
        return prompts.SUCCESS_EXPERIENCE.format(script=lesson, trajectory=condense(trajectory) or "(empty)")
    feedback = kept_parts(trajectory, feedback, success=False, keeps=keeps)[1]
    return prompts.FAILURE_EXPERIENCE.format(lesson=lesson, feedback=condense(feedback, FEEDBACK_LIMIT) or "(none)")


def llm_experience(
    task: str, *, trajectory: str, feedback: str, success: bool, llm: ChatModel, keeps: FailureKeeps = "feedback"
) -> str | None:
    """The experience written by ``llm`` (which reads the whole attempt), or None when the call failed or
    came back empty."""
    messages = writer_prompt(task, trajectory=trajectory, feedback=feedback, success=success)
    try:
        answer = llm.complete(messages, temperature=0.0, max_tokens=WRITER_MAX_TOKENS).text
    except Exception as e:  # any backend failure: the attempt is kept in cheap mode instead
        log.warning("memory writer: %s failed (%s: %s); storing the cheap experience", llm.name, type(e).__name__, e)
        return None
    text = lesson_experience(answer, trajectory=trajectory, feedback=feedback, success=success, keeps=keeps)
    if text is None:
        log.warning("memory writer: %s returned an empty answer; storing the cheap experience", llm.name)
    return text


def compose_experience(
    task: str,
    *,
    trajectory: str,
    feedback: str,
    success: bool,
    llm: ChatModel | None = None,
    keeps: FailureKeeps = "feedback",
) -> Written:
    """One experience for one attempt: written by ``llm`` when given and working, else cheap mode; a
    failure stores the part of its attempt ``keeps`` says (``MemoryConfig.failure_keeps``)."""
    if llm is not None:
        text = llm_experience(task, trajectory=trajectory, feedback=feedback, success=success, llm=llm, keeps=keeps)
        if text is not None:
            return Written(text, "llm")
    return Written(
        cheap_experience(task, trajectory=trajectory, feedback=feedback, success=success, keeps=keeps), "cheap"
    )


def compose_experiences(
    entries: Sequence[WriteEntry], llm: ChatModel | None, *, keeps: FailureKeeps = "feedback"
) -> list[Written]:
    """``compose_experience`` for many attempts; a model with ``complete_batch`` (a local model, a
    ``ChatClient``) writes them all in one batched call. When that call fails, each attempt is asked
    on its own, so one bad request costs no other attempt its lesson."""
    batch_fn = getattr(llm, "complete_batch", None)
    if llm is None or batch_fn is None or len(entries) < 2:
        return [compose_entry(e, llm, e.failure_keeps or keeps) for e in entries]
    asked = [
        writer_prompt(e.intent, trajectory=e.trajectory, feedback=e.feedback, success=bool(e.success)) for e in entries
    ]
    try:
        answers = [c.text for c in batch_fn(asked, temperature=0.0, max_tokens=WRITER_MAX_TOKENS)]
    except Exception as e:  # any backend failure: one call per attempt, each falling back to cheap mode
        log.warning(
            "memory writer: %s failed on a batch (%s: %s); writing one at a time", llm.name, type(e).__name__, e
        )
        return [compose_entry(entry, llm, entry.failure_keeps or keeps) for entry in entries]
    if len(answers) != len(entries):
        log.warning("memory writer: %s answered %d of %d; writing one at a time", llm.name, len(answers), len(entries))
        return [compose_entry(entry, llm, entry.failure_keeps or keeps) for entry in entries]
    out = []
    for entry, answer in zip(entries, answers, strict=True):
        mine = entry.failure_keeps or keeps
        text = lesson_experience(
            answer, trajectory=entry.trajectory, feedback=entry.feedback, success=bool(entry.success), keeps=mine
        )
        if text is None:
            log.warning("memory writer: %s returned an empty answer; storing the cheap experience", llm.name)
        out.append(Written(text, "llm") if text is not None else compose_entry(entry, None, mine))
    return out


def check_write_entries(entries: object) -> list[WriteEntry]:
    """``write_many``'s input as a list, every entry checked before any model is called."""
    if isinstance(entries, (str, WriteEntry)) or not isinstance(entries, Sequence):
        raise ConfigError(f"write_many: entries must be a sequence of WriteEntry, got {type(entries).__name__}")
    out = list(entries)
    for i, e in enumerate(out):
        if not isinstance(e, WriteEntry):
            raise ConfigError(f"write_many: entries[{i}] must be a WriteEntry, got {type(e).__name__}")
        check_text(f"entries[{i}].intent", e.intent)
        for name in ("trajectory", "feedback"):
            if not isinstance(getattr(e, name), str):
                raise ConfigError(f"entries[{i}].{name} must be a string, got {getattr(e, name)!r:.120}")
            check_chars(f"entries[{i}].{name}", getattr(e, name))
        check_namespace(e.namespace)
        if check_success(e.success, f"entries[{i}].success") is None:
            raise ConfigError(
                f"entries[{i}].success must be True or False: a write records an attempt's outcome "
                "(use add(..., success=None) for a memory whose outcome is unknown)"
            )
        if e.id is not None:
            check_id(f"entries[{i}].id", e.id)
        if e.task is not None:
            check_text(f"entries[{i}].task", e.task)
        if e.fact is not None:
            check_text(f"entries[{i}].fact", e.fact)
        if e.failure_keeps is not None and e.failure_keeps not in FAILURE_KEEPS:
            raise ConfigError(
                f"entries[{i}].failure_keeps must be one of {FAILURE_KEEPS} or None, got {e.failure_keeps!r}"
            )
        check_meta(e.provenance, f"entries[{i}].provenance")
        check_writer(e.writer, f"entries[{i}].writer")
    return out


def entry_ids(entries: Sequence[WriteEntry]) -> tuple[list[str], list[int]]:
    """Each entry's memory id (a fresh one when it names none), and the positions of the entries that
    write one: the first of each id. Entries sharing an id must share the namespace (ids are unique
    across a store)."""
    ids = [e.id if e.id is not None else new_id() for e in entries]
    first: dict[str, int] = {}
    for i, item_id in enumerate(ids):
        j = first.setdefault(item_id, i)
        if entries[j].namespace != entries[i].namespace:
            raise ConfigError(
                f"write_many: entries[{j}] and entries[{i}] share the id {item_id!r} but not the namespace; "
                "ids are unique across the store"
            )
    return ids, sorted(first.values())


def compose_entry(entry: WriteEntry, llm: ChatModel | None, keeps: FailureKeeps = "feedback") -> Written:
    """``compose_experience`` for one checked entry."""
    return compose_experience(
        entry.intent, trajectory=entry.trajectory, feedback=entry.feedback, success=bool(entry.success), llm=llm,
        keeps=keeps,
    )  # fmt: skip
