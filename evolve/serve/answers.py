"""A served answer: what ``Deployment.answer`` and ``Deployment.stream`` give a caller, and the row it is
kept under (``evolve.serve.responses``), whose id is the handle for feedback.

Example:
    >>> from connectors import Usage
    >>> from evolve.episode import Step
    >>> answer = Answer("chatcmpl-1", "codes@acme", "4471", (Step("solver", (), "4471"),), Usage(), "v1", 0)
    >>> answer.finish_reason, answer.recall_ids
    ('stop', ())
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connectors import Message, StoreError, ToolCall, Usage
from evolve.episode import Step
from evolve.run_log import steps_to_json
from evolve.tools.loop import DESCRIBED


class UnknownResponse(StoreError):
    """No response with this id belongs to this tenant (or it never existed: the two look the same)."""


@dataclass(frozen=True)
class Answer:
    """One served response: its id (the handle for feedback), the text and how the team got there."""

    id: str
    run: str
    text: str
    steps: tuple[Step, ...]
    usage: Usage
    prompt_version: str
    created: int
    timings: Mapping[str, float] = dataclasses.field(default_factory=dict)  # ms: "recall", "answer"
    logprobs: tuple[tuple[str, float], ...] | None = None  # the answer's (token, logprob)s, when asked for

    @property
    def recall_ids(self) -> tuple[str, ...]:
        """The recalls the team made, in agent order: feedback reinforces their memories."""
        return tuple(s.recall_id for s in self.steps if s.recall_id is not None)

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The calls the answering agent made to the request's tools: the app runs them."""
        last = self.steps[-1] if self.steps else None
        return tuple(r.call for r in last.calls if r.result == DESCRIBED) if last is not None else ()

    @property
    def finish_reason(self) -> str:
        """Why the answer ended, in OpenAI's words: ``tool_calls``, ``length`` (the token budget cut it)
        or ``stop``."""
        if self.tool_calls:
            return "tool_calls"
        last = self.steps[-1].finish if self.steps else None
        return "length" if last == "length" else "stop"


def response_row(answer: Answer, query: str, messages: Sequence[Message]) -> dict[str, Any]:
    return {
        "id": answer.id,
        "run": answer.run,
        "created_at": float(answer.created),
        "query": query,
        "messages": json.dumps([m.to_dict() for m in messages]),
        "answer": answer.text,
        "steps": steps_to_json(answer.steps),
        "prompt_version": answer.prompt_version,
        "tokens": answer.usage.total_tokens,
    }


__all__ = ["Answer", "UnknownResponse", "response_row"]
