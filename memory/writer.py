"""Turning one attempt into one memory: cheap mode (no model) or a lesson written by an LLM.

Success and failure alike leave an experience (DESIGN §4 "Writing"). With a model, a success becomes
a 3–5 step reusable script plus the condensed trajectory, and a failure becomes what went wrong,
what to avoid and the correct approach when the feedback reveals it. When the model fails or answers
nothing, the cheap text is stored instead: an attempt is never lost.

Example:
    >>> text = compose_experience("open the door", trajectory="go north\\nopen door", feedback="done", success=True)
    >>> text.mode, text.experience.splitlines()[1]
    ('cheap', 'Outcome: success')
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Literal

from connectors.chat import ChatModel
from connectors.types import Message
from memory import prompts

log = logging.getLogger(__name__)

TRAJECTORY_LIMIT = 1500
FEEDBACK_LIMIT = 500
LESSON_LIMIT = 1500
WRITER_MAX_TOKENS = 400


@dataclass(frozen=True)
class Written:
    """An experience text and how it was produced (``"cheap"`` or ``"llm"``).

    Example:
        >>> Written("Task: x", "cheap").mode
        'cheap'
    """

    experience: str
    mode: Literal["cheap", "llm"]


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


def cheap_experience(task: str, *, trajectory: str, feedback: str, success: bool) -> str:
    """The model-free experience: task, outcome, condensed trajectory and the environment's feedback."""
    return prompts.CHEAP_EXPERIENCE.format(
        task=condense(task, TRAJECTORY_LIMIT),
        outcome="success" if success else "failure",
        trajectory=condense(trajectory) or "(empty)",
        feedback=condense(feedback, FEEDBACK_LIMIT) or "(none)",
    )


def llm_experience(task: str, *, trajectory: str, feedback: str, success: bool, llm: ChatModel) -> str | None:
    """The experience written by ``llm``, or None when the call failed or came back empty."""
    fields = {
        "task": condense(task, TRAJECTORY_LIMIT),
        "trajectory": condense(trajectory) or "(empty)",
        "feedback": condense(feedback, FEEDBACK_LIMIT) or "(none)",
    }
    prompt = (prompts.SUCCESS_PROMPT if success else prompts.FAILURE_PROMPT).format(**fields)
    messages = [Message("system", prompts.WRITER_SYSTEM), Message("user", prompt)]
    try:
        answer = llm.complete(messages, temperature=0.0, max_tokens=WRITER_MAX_TOKENS).text
    except Exception as e:  # any backend failure: the attempt is kept in cheap mode instead
        log.warning("memory writer: %s failed (%s: %s); storing the cheap experience", llm.name, type(e).__name__, e)
        return None
    lesson = condense(answer or "", LESSON_LIMIT)
    if not lesson:
        log.warning("memory writer: %s returned an empty answer; storing the cheap experience", llm.name)
        return None
    if success:
        return prompts.SUCCESS_EXPERIENCE.format(script=lesson, trajectory=fields["trajectory"])
    return prompts.FAILURE_EXPERIENCE.format(lesson=lesson, feedback=fields["feedback"])


def compose_experience(
    task: str, *, trajectory: str, feedback: str, success: bool, llm: ChatModel | None = None
) -> Written:
    """One experience for one attempt: written by ``llm`` when given and working, else cheap mode."""
    if llm is not None:
        text = llm_experience(task, trajectory=trajectory, feedback=feedback, success=success, llm=llm)
        if text is not None:
            return Written(text, "llm")
    return Written(cheap_experience(task, trajectory=trajectory, feedback=feedback, success=success), "cheap")
