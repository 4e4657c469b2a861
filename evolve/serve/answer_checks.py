"""A served answer is checked before it goes out: the JSON a request's ``response_format`` asks for
(``evolve.serve.formats``), the function call its ``tool_choice="required"`` (or a named function)
demands, and the arguments of each call to a ``strict`` tool (they must fit its schema, as OpenAI's
strict function calling promises; a prompted call on a local model is checked as it is read, an API
model's here). An answer that fails is asked for again, told what was wrong, up to ``formats.ATTEMPTS`` tries
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
from connectors.tools import argument_problem
from evolve.agent import Team
from evolve.episode import Step
from evolve.serve import formats
from evolve.serve.chat_requests import first_call_only
from evolve.tools.loop import DESCRIBED

CALL_NOTE = "Your last reply could not be used: {problem}. You must call one of the functions."
CUT_NOTE = " (max_tokens cut the answer off: allow more tokens)"
STRICT_NOTE = "Your last reply could not be used: {problem}. Make the call again with arguments that fit its schema."


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
    the call the request requires: up to ``formats.ATTEMPTS`` tries, fewer once a try repeats an earlier
    failed answer word for word (told again, it would say it again) or ends at its ``max_tokens`` (the same
    budget would cut it again: the error says to allow more tokens).

    Raises:
        ConnectorError: the team's model failed (its own kind, after its retries).
        FailedAnswer: still no valid answer after ``formats.ATTEMPTS`` tries.
    """
    must_call = tools is not None and params.get("tool_choice") == "required"
    checks = fmt is not None or must_call or any(t.strict for t in tools or ())
    tries = formats.ATTEMPTS if checks else 1
    usage, note, wrong = Usage(), "", ""
    steps: tuple[Step, ...] = ()
    failed: set[str] = set()
    made = 0
    for _ in range(tries):
        made += 1
        told = note or (fmt.instruction() if fmt is not None else "")
        seen = f"{observation}\n\n{told}" if told else observation
        act = team.act([seen], queries=[query], params=dict(params), tools=None if tools is None else [tools])[0]
        if act.error is not None:
            raise same_kind(act.cause, f"the team could not answer: {act.error}")
        steps = act.steps if parallel_tool_calls else first_call_only(act.steps)
        usage = usage + sum((s.usage for s in steps), Usage())
        wrong = problem(steps, fmt, must_call=must_call, tools=tools)
        if not wrong:
            steps = cleaned(steps, fmt)
            return Checked(steps, usage, steps[-1].output if steps else act.answer)
        said = steps[-1].output if steps else act.answer
        if said in failed or cut_off(steps):  # told again, it would say it again; or cut again by the same budget
            break
        failed.add(said)
        note = retry_note(wrong, steps, fmt, must_call=must_call)
    why = f"the team's answer is not {asked(steps, fmt, must_call)} after {made} {'try' if made == 1 else 'tries'}: {wrong}"
    raise FailedAnswer(why, steps=steps, usage=usage)


def retry_note(wrong: str, steps: Sequence[Step], fmt: formats.Format | None, *, must_call: bool) -> str:
    """What the team is told when it is asked again: the call it must make, fix, or the format it missed."""
    if must_call and not called(steps):
        return CALL_NOTE.format(problem=wrong)
    if called(steps):
        return STRICT_NOTE.format(problem=wrong)
    return formats.retry_note(wrong, fmt) if fmt is not None else ""


def asked(steps: Sequence[Step], fmt: formats.Format | None, must_call: bool) -> str:
    """What the failed answer was not, for ``FailedAnswer``'s message."""
    if must_call and not called(steps):
        return "a function call (tool_choice required)"
    if called(steps):
        return "a call whose arguments fit its function's strict schema"
    return f"valid for response_format {fmt.kind if fmt else None}"


def called(steps: Sequence[Step]) -> bool:
    """Whether the answering agent called one of the request's tools."""
    return bool(steps) and any(r.result == DESCRIBED for r in steps[-1].calls)


def problem(
    steps: Sequence[Step], fmt: formats.Format | None, *, must_call: bool, tools: Sequence[Tool] | None = None
) -> str:
    """What is wrong with the answer ("" when nothing): a required call missing, a call whose arguments break its
    ``strict`` tool's schema, or JSON that does not fit."""
    if not steps:
        return ""
    cut = CUT_NOTE if cut_off(steps) else ""
    if must_call and not called(steps):
        if steps[-1].problems:  # calls it wrote that could not be used, and why
            return f"it made no valid function call{cut}: {'; '.join(dict.fromkeys(steps[-1].problems))[:500]}"
        return f"it made no function call{cut}"
    if called(steps):
        return strict_problem(steps, tools or ())
    if fmt is None:
        return ""
    wrong = formats.read_json(steps[-1].output, fmt)[1]
    return wrong + cut if wrong else ""


def cut_off(steps: Sequence[Step]) -> bool:
    """Whether the answer's last step ended at its ``max_tokens``: asked again with the same budget, it is cut again."""
    return bool(steps) and steps[-1].finish == "length"


def strict_problem(steps: Sequence[Step], tools: Sequence[Tool]) -> str:
    """Why a call the answer makes to a ``strict`` tool does not fit that tool's schema ("" when every one fits).

    Example:
        >>> from connectors import ToolCall
        >>> from evolve.tools.runs import ToolRun
        >>> schema = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
        >>> made = ToolRun(ToolCall("lookup", {"code": 4471}), DESCRIBED, True)
        >>> steps = [Step("solver", (), "[lookup(code=4471)]", calls=(made,))]
        >>> strict_problem(steps, [Tool("lookup", "", schema, strict=True)])
        "tool 'lookup': arguments at code 4471 is not of type 'string'"
    """
    strict = {t.name: t for t in tools if t.strict}
    for run in steps[-1].calls if steps else ():
        tool = strict.get(run.call.name)
        wrong = argument_problem(tool, run.call.arguments) if tool is not None and run.result == DESCRIBED else None
        if wrong:
            return wrong
    return ""


def cleaned(steps: tuple[Step, ...], fmt: formats.Format | None) -> tuple[Step, ...]:
    """The steps with a JSON answer's code fence taken off."""
    if fmt is None or not steps or called(steps):
        return steps
    text, _ = formats.read_json(steps[-1].output, fmt)
    return (*steps[:-1], dataclasses.replace(steps[-1], output=text))


__all__ = ["Checked", "FailedAnswer", "called", "checked_act", "cleaned", "problem", "strict_problem"]
