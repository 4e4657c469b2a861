"""A served answer is checked before it goes out: the JSON a request's ``response_format`` asks for
(``evolve.serve.formats``) and the function call its ``tool_choice="required"`` (or a named function)
demands. An answer that fails is asked for again, told what was wrong, up to ``formats.ATTEMPTS`` tries
in all; one that still fails is a ``FailedAnswer`` (a ``ParseError`` that keeps the answer's steps:
``evolve serve`` records it and answers 502 ``invalid_model_output`` with its ``response_id``, so the app
can rate the failure like any answer), never prose passed off as what was asked for.

Example:
    >>> from evolve.episode import Step
    >>> problem([Step("solver", (), "Die Antwort ist 42.", finish="length")], None, must_call=True)
    'it made no function call (max_tokens cut the answer off: allow more tokens)'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connectors import Tool, Usage
from connectors.errors import ParseError, same_kind
from evolve.agent import Team
from evolve.episode import Step
from evolve.serve import formats
from evolve.serve.chat_requests import first_call_only
from evolve.tools.loop import DESCRIBED

CALL_NOTE = "Your last reply could not be used: {problem}. You must call one of the functions."


class FailedAnswer(ParseError):
    """The team's answer that stayed invalid after every try: ``steps`` (with their recall ids) and ``usage``
    keep it; ``response_id`` is the id it was recorded under, once it is (``Deployment.answer``)."""

    def __init__(self, message: str, *, steps: tuple[Step, ...], usage: Usage) -> None:
        super().__init__(message, raw=steps[-1].output if steps else "")
        self.steps, self.usage = steps, usage
        self.response_id: str | None = None


@dataclass(frozen=True)
class Checked:
    """The team's answer that passed: its steps (the last one's output cleaned), their usage, its text."""

    steps: tuple[Step, ...]
    usage: Usage
    text: str


def checked_act(
    team: Team,
    observation: str,
    query: str,
    params: Mapping[str, Any],
    tools: Sequence[Tool] | None,
    *,
    fmt: formats.Format | None,
    parallel_tool_calls: bool = True,
) -> Checked:
    """The team's answer to ``observation``, asked again (told what was wrong) until it has the format and
    the call the request requires.

    Raises:
        ConnectorError: the team's model failed (its own kind, after its retries).
        FailedAnswer: still no valid answer after ``formats.ATTEMPTS`` tries.
    """
    must_call = tools is not None and params.get("tool_choice") == "required"
    tries = formats.ATTEMPTS if fmt is not None or must_call else 1
    usage, note, wrong = Usage(), "", ""
    steps: tuple[Step, ...] = ()
    for _ in range(tries):
        told = note or (fmt.instruction() if fmt is not None else "")
        seen = f"{observation}\n\n{told}" if told else observation
        act = team.act([seen], queries=[query], params=dict(params), tools=None if tools is None else [tools])[0]
        if act.error is not None:
            raise same_kind(act.cause, f"the team could not answer: {act.error}")
        steps = act.steps if parallel_tool_calls else first_call_only(act.steps)
        usage = usage + sum((s.usage for s in steps), Usage())
        wrong = problem(steps, fmt, must_call=must_call)
        if not wrong:
            steps = cleaned(steps, fmt)
            return Checked(steps, usage, steps[-1].output if steps else act.answer)
        if must_call and not called(steps):
            note = CALL_NOTE.format(problem=wrong)
        elif fmt is not None:
            note = formats.retry_note(wrong, fmt)
    if must_call and not called(steps):
        asked = "a function call (tool_choice required)"
    else:
        asked = f"valid for response_format {fmt.kind if fmt else None}"
    raise FailedAnswer(f"the team's answer is not {asked} after {tries} tries: {wrong}", steps=steps, usage=usage)


def called(steps: Sequence[Step]) -> bool:
    """Whether the answering agent called one of the request's tools."""
    return bool(steps) and any(r.result == DESCRIBED for r in steps[-1].calls)


def problem(steps: Sequence[Step], fmt: formats.Format | None, *, must_call: bool) -> str:
    """What is wrong with the answer ("" when nothing): a required call missing, or JSON that does not fit."""
    if not steps:
        return ""
    if must_call and not called(steps):
        if steps[-1].problems:  # calls it wrote that could not be used, and why
            return f"it made no valid function call: {'; '.join(dict.fromkeys(steps[-1].problems))[:500]}"
        cut = steps[-1].finish == "length"
        return "it made no function call" + (" (max_tokens cut the answer off: allow more tokens)" if cut else "")
    if fmt is None or called(steps):
        return ""
    return formats.read_json(steps[-1].output, fmt)[1]


def cleaned(steps: tuple[Step, ...], fmt: formats.Format | None) -> tuple[Step, ...]:
    """The steps with a JSON answer's code fence taken off."""
    if fmt is None or not steps or called(steps):
        return steps
    text, _ = formats.read_json(steps[-1].output, fmt)
    return (*steps[:-1], dataclasses.replace(steps[-1], output=text))


__all__ = ["Checked", "FailedAnswer", "called", "checked_act", "cleaned", "problem"]
