"""An agent's tool loop: the model calls tools, reads their results and answers, for many prompts at
once, bounded by a budget of model calls.

Each prompt is an ``Exchange``. A round asks the model for every exchange still open, together (a local
model generates them in one batch, each prompt with its own tools). What the model says decides the
exchange's next move:

- calls to tools that run here: each runs (``evolve.tools.runs``: errors, timeouts and refused arguments
  become tool messages) and the model is asked again with the results;
- calls to tools that are only described (``Tool.fn`` is None: an environment checks the calls, as
  BFCL's do): the calls are the answer, written as ``[name(arg=value), ...]``;
- calls it tried to write but that cannot be used (an unknown tool, arguments that are not JSON or that
  the schema refuses): it is told why and asked again;
- plain text: the answer.

When the budget is spent the exchange ends with the last text the model wrote. A backend failure ends
only its own exchange, with the error kept for the caller.

Example:
    >>> from connectors import Completion, Tool, ToolCall
    >>> def add(a: int, b: int) -> int:
    ...     '''Add two integers.'''
    ...     return a + b
    >>> replies = iter([Completion("", "m", tool_calls=(ToolCall("add", {"a": 2, "b": 3}, "c1"),)), Completion("5", "m")])
    >>> [x] = tool_loop(lambda batch, tools: [next(replies) for _ in batch], [[Message("user", "2 + 3?")]],
    ...                 [[Tool.from_function(add)]], rounds=4)
    >>> x.text, [r.result for r in x.runs]
    ('5', ['5'])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from connectors import Completion, ConnectorError, Message, Tool, Usage
from connectors.prompted_tools import call_text
from evolve.tools.runs import ToolRun, run_call

DESCRIBED = "(not run here: the environment checks this call)"
"""The result recorded for a call to a tool that is only described (``Tool.fn`` is None)."""

RETRY = "Your function call could not be used: {problems}. Write the call again, or answer in plain text."

Generate = Callable[[list[list[Message]], list[Sequence[Tool]]], list[Completion | ConnectorError]]
"""The model: prompts and each one's tools in, one completion (or the backend's error) per prompt out."""


@dataclass
class Exchange:
    """One prompt's tool conversation: the messages so far, the calls run, the answer or the error.

    ``problems`` are the calls the model wrote that could not be used (each told to it); ``spent`` is
    true when the budget ran out before the model answered.
    """

    messages: list[Message]
    tools: Sequence[Tool]
    runs: list[ToolRun] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    text: str = ""
    error: ConnectorError | None = None
    spent: bool = False
    finish: str | None = None

    def take(self, c: Completion, timeout: float) -> bool:
        """Record one completion; True when the model is to be asked again."""
        self.usage = self.usage + c.usage
        self.text, self.finish = c.text, c.finish_reason
        if c.tool_calls:
            known = {t.name: t for t in self.tools}
            if any(c.name in known and known[c.name].fn is None for c in c.tool_calls):
                self.runs.extend(ToolRun(call, DESCRIBED, True) for call in c.tool_calls)
                self.text = "[" + ", ".join(call_text(call) for call in c.tool_calls) + "]"
                self.finish = "tool_calls"
                return False
            runs = [run_call(call, self.tools, timeout=timeout) for call in c.tool_calls]
            self.runs.extend(runs)
            self.messages += [Message("assistant", c.text, tool_calls=c.tool_calls), *(r.message() for r in runs)]
            return True
        if c.tool_problems:
            self.problems.extend(c.tool_problems)
            self.messages += [
                Message("assistant", c.text),
                Message("user", RETRY.format(problems="; ".join(c.tool_problems))),
            ]
            return True
        return False


def tool_loop(
    generate: Generate,
    prompts: Sequence[Sequence[Message]],
    tools_each: Sequence[Sequence[Tool]],
    *,
    rounds: int,
    timeout: float = 10.0,
) -> list[Exchange]:
    """Every prompt's exchange, in prompt order, after at most ``rounds`` model calls each; a prompt
    with no tools is answered by one plain call."""
    exchanges = [Exchange(list(p), t) for p, t in zip(prompts, tools_each, strict=True)]
    open_ = list(range(len(exchanges)))
    for _ in range(max(1, rounds)):
        if not open_:
            break
        results = generate([exchanges[i].messages for i in open_], [exchanges[i].tools for i in open_])
        still = []
        for i, result in zip(open_, results, strict=True):
            if isinstance(result, ConnectorError):
                exchanges[i].error = result
            elif exchanges[i].take(result, timeout):
                still.append(i)
        open_ = still
    for i in open_:
        exchanges[i].spent = True
    return exchanges


__all__ = ["DESCRIBED", "Exchange", "Generate", "tool_loop"]
