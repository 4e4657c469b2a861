"""One attempt at a task: an ``Episode`` made of ``Step``s, with its reward and the recalls it used.

``condense`` turns steps into the trajectory memory stores, ``to_trace`` into the ``Trace`` a prompt
optimizer learns from. A ``TeamStream`` is an attempt whose final step is still being generated
(``Team.stream``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from connectors import Completion, ConnectorError, Message, Usage
from connectors.prompted_tools import call_text
from connectors.streaming import CANCELLED, StreamedCompletion
from evolve.tools.loop import DESCRIBED
from evolve.tools.runs import ToolRun
from optimizers.types import NodeCall, Trace


@dataclass(frozen=True)
class Step:
    """One agent's turn inside an episode: what it saw, what it said, which memories it recalled
    (``recall_id``, made in the memory namespace ``recall_namespace``), and for a tool-using agent the
    calls it made with their results (``calls``, in order) and the calls it wrote that could not be
    used (``problems``). ``usage`` sums the turn's model calls; ``finish`` is why its last one ended
    (``stop``, ``length`` when the token budget cut it, ``tool_calls`` when its calls are the answer,
    ``cancelled`` when the reader of a streamed answer closed it: ``output`` is then the text sent).
    """

    agent: str
    messages: tuple[Message, ...]
    output: str
    usage: Usage = field(default_factory=Usage)
    recall_id: str | None = None
    turn: int = 0
    recall_namespace: str | None = None
    calls: tuple[ToolRun, ...] = ()
    problems: tuple[str, ...] = ()
    finish: str | None = None
    logprobs: tuple[tuple[str, float], ...] | None = None  # the last answer's tokens, when its model gave them
    score: float | None = None  # the checker's reward had this output been the answer (an ordered team's credit)


@dataclass(frozen=True)
class Episode:
    """A finished attempt.

    ``answer`` is the team's last output; ``feedback`` is the environment's last observation text, which
    is what memory learns from. ``error`` is set when the attempt could not be made (a backend failed
    after its retries); such an episode has reward 0 and is not written to memory.
    """

    id: str
    task_id: str
    prompt: str
    steps: tuple[Step, ...]
    answer: str
    reward: float
    feedback: str
    round: int = 0
    error: str | None = None
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return self.error is None and self.reward >= 1.0

    @property
    def usage(self) -> Usage:
        total = Usage()
        for s in self.steps:
            total = total + s.usage
        return total

    @property
    def recall_ids(self) -> tuple[str, ...]:
        return tuple(s.recall_id for s in self.steps if s.recall_id is not None)

    def trajectory(self) -> str:
        """The condensed trajectory memory stores: each agent's output, in order."""
        return condense(self.steps)


class TeamStream:
    """A team's answer while its final agent generates it (``Team.stream``).

    Iterating gives the final agent's text deltas. Once they end — or once ``close()`` cuts the stream
    because its reader went away — ``steps`` are the steps ``Team.act`` gives: the other agents', then the
    final agent's with the text sent (``finish`` ``"cancelled"`` when cut). ``error`` (and ``cause``, the
    model's error) says why the team could not answer when it failed before the final agent's first
    delta; such a stream sends nothing. A failure mid-stream reaches the reader, and ``steps`` stays None.

    Example:
        >>> stream = TeamStream.whole((Step("solver", (), "42"),))
        >>> list(stream), [s.output for s in stream.steps]
        (['42'], ['42'])
    """

    def __init__(
        self, before: tuple[Step, ...], deltas: StreamedCompletion | None, step: Callable[[Completion], Step]
    ) -> None:
        self.before = before
        self.error: str | None = None
        self.cause: ConnectorError | None = None
        self._deltas, self._step = deltas, step
        self._steps: tuple[Step, ...] | None = None

    @classmethod
    def whole(
        cls, steps: tuple[Step, ...], error: str | None = None, cause: ConnectorError | None = None
    ) -> TeamStream:
        """A team that has answered (its final step last) or failed (``error``): its answer in one delta."""
        if error is not None:
            failed = cls(steps, None, lambda c: Step("", (), c.text))
            failed.error, failed.cause = error, cause
            return failed
        last = steps[-1]

        def step(c: Completion) -> Step:
            return last if c.finish_reason != CANCELLED else replace(last, output=c.text, finish=CANCELLED)

        return cls(steps[:-1], StreamedCompletion.whole(Completion(last.output, last.agent, last.usage)), step)

    def __iter__(self) -> TeamStream:
        return self

    def __next__(self) -> str:
        if self._deltas is None:
            raise StopIteration
        return next(self._deltas)

    def close(self) -> None:
        """Stop the final agent; ``steps`` then hold what it sent. A stream that has ended is left as it is."""
        if self._deltas is not None:
            self._deltas.close()

    @property
    def steps(self) -> tuple[Step, ...] | None:
        """The steps ``Team.act`` gives, once the stream has ended or was closed; None until then (and
        after a failure mid-stream). A team that failed before answering: the steps before the failure."""
        if self._deltas is None:
            return self.before
        if self._steps is None and self._deltas.completion is not None:
            self._steps = (*self.before, self._step(self._deltas.completion))
        return self._steps


def condense(steps: Sequence[Step]) -> str:
    """Steps as the condensed trajectory memory stores: each agent's calls and output, in order.

    Example:
        >>> from connectors import ToolCall
        >>> run = ToolRun(ToolCall("area", {"base": 10}), "25.0", True)
        >>> print(condense([Step("solver", (), "It is 25.", calls=(run,))]))
        Called area(base=10) -> 25.0
        Answer given: It is 25.
    """
    if len(steps) == 1:
        answer = [] if _only_described(steps[0]) else [f"Answer given: {steps[0].output.strip()}"]
        return "\n".join([*_calls(steps[0]), *answer])
    lines = []
    for s in steps:
        lines += [f"[{s.agent}, turn {s.turn}] {line}" for line in _calls(s)]
        if not _only_described(s):
            lines.append(f"[{s.agent}, turn {s.turn}] {s.output.strip()}")
    return "\n".join(lines)


def _only_described(step: Step) -> bool:
    """True when the step's output is its calls to described tools (the answer is the calls)."""
    return bool(step.calls) and all(run.result == DESCRIBED for run in step.calls)


CALL_RESULT_LIMIT = 200
"""The most characters of one tool result a condensed trajectory keeps."""


def _calls(step: Step) -> list[str]:
    """One line per call: ``Called f(a=1) -> result`` (results of described calls are left out)."""
    out = []
    for run in step.calls:
        head = f"Called {call_text(run.call)}"
        if run.result == DESCRIBED:
            out.append(head)
            continue
        result = " ".join(run.result.split())
        if len(result) > CALL_RESULT_LIMIT:
            result = result[:CALL_RESULT_LIMIT] + "…"
        out.append(f"{head} -> {result}")
    return out


def to_trace(
    example_id: str, steps: Sequence[Step], output: str, score: float, feedback: str, *, prompt: str = ""
) -> Trace:
    """Steps as the ``Trace`` a prompt optimizer learns from: one ``NodeCall`` per step, on the agent's
    trainable components (``<agent>.system``, ``<agent>.library``), and the steps' summed usage.

    A call's input is the step's last message; steps stored without their messages (a served response's:
    ``evolve.run_log.steps_to_json`` keeps none) take ``prompt``, what the team was asked.

    Example:
        >>> step = Step("solver", (), "4")
        >>> trace = to_trace("t1", [step], "4", 1.0, "correct", prompt="What is 2 + 2?")
        >>> trace.calls[0].components, trace.calls[0].prompt
        (('solver.system', 'solver.library'), 'What is 2 + 2?')
    """
    calls = tuple(
        NodeCall(
            s.agent,
            (f"{s.agent}.system", f"{s.agent}.library"),
            s.messages[-1].content if s.messages else prompt,
            s.output,
        )
        for s in steps
    )
    return Trace(example_id, calls, output, score, feedback, sum((s.usage for s in steps), Usage()))
