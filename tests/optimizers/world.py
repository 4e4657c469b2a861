"""A tiny deterministic world for the optimizer tests: fake teams whose score depends on rule words.

An example needs one rule word (e.g. "units"); it succeeds when the candidate's text carries that
word. The teams record every ``evaluate`` call so tests can check what the optimizers asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from connectors import ChatClient, Message, ScriptedChat
from optimizers import Candidate, NodeCall, Trace


@dataclass
class Call:
    candidate: dict[str, str]
    ids: list[str]
    samples: int
    temperature: float | None


@dataclass
class RuleTeam:
    """One agent ("solver"); example e succeeds when ``rules[e]`` appears in ``solver.system``."""

    rules: Mapping[str, str]
    component: str = "solver.system"
    calls: list[Call] = field(default_factory=list)

    def __call__(
        self, candidate: Candidate, example_ids: Sequence[str], *, samples: int = 1, temperature: float | None = None
    ) -> list[Trace]:
        self.calls.append(Call(dict(candidate), list(example_ids), samples, temperature))
        return [self.trace(candidate, e, k) for e in example_ids for k in range(samples)]

    def succeeds(self, candidate: Candidate, example_id: str, sample: int) -> bool:
        return self.rules[example_id] in candidate.get(self.component, "").lower()

    def trace(self, candidate: Candidate, example_id: str, sample: int) -> Trace:
        rule = self.rules[example_id]
        ok = self.succeeds(candidate, example_id, sample)
        answer = f"answer to {example_id} ({'with' if ok else 'without'} {rule})"
        library = candidate.get("solver.library", "")
        experience = f"\n\nExperience:\n{library}" if library else ""
        prompt = f"{candidate.get('solver.system', '')}{experience}\n\nTask {example_id}: solve it."
        call = NodeCall(
            "solver", tuple(c for c in ("solver.system", "solver.library") if c in candidate), prompt, answer
        )
        feedback = "correct" if ok else f"wrong: the answer must take care of the {rule}"
        return Trace(example_id, (call,), answer, 1.0 if ok else 0.0, feedback)

    def evaluated(self) -> list[str]:
        """Every example id any call evaluated."""
        return [e for c in self.calls for e in c.ids]


@dataclass
class LibraryTeam(RuleTeam):
    """Rollouts read ``solver.library``: a rule word there makes every sample succeed.

    Without it, an example of kind "mixed" succeeds on samples 0 and 1 only, "easy" always, "hard"
    never — so only mixed groups have rewards that differ.
    """

    component: str = "solver.library"
    kinds: Mapping[str, str] = field(default_factory=dict)

    def succeeds(self, candidate: Candidate, example_id: str, sample: int) -> bool:
        if self.rules[example_id] in candidate.get(self.component, "").lower():
            return True
        kind = self.kinds.get(example_id, "hard")
        return kind == "easy" or (kind == "mixed" and sample < 2)


@dataclass
class TwoAgentTeam(RuleTeam):
    """A planner then a solver; the solver sees the planner's output. Needs the rule in the planner."""

    component: str = "planner.system"

    def trace(self, candidate: Candidate, example_id: str, sample: int) -> Trace:
        rule = self.rules[example_id]
        ok = self.succeeds(candidate, example_id, sample)
        plan = f"plan for {example_id}: {'mind the ' + rule if ok else 'just answer'}"
        answer = f"answer to {example_id}"
        calls = (
            NodeCall("planner", ("planner.system",), f"{candidate['planner.system']}\n\nTask {example_id}", plan),
            NodeCall("solver", ("solver.system",), f"{candidate['solver.system']}\n\nPlan: {plan}", answer),
        )
        return Trace(example_id, calls, answer, 1.0 if ok else 0.0, "correct" if ok else f"wrong: ignored the {rule}")


Router = Mapping[str, str | Callable[[Sequence[Message]], str]]


def scripted_critic(routes: Router, *, default: str = "NO CHANGE") -> tuple[ChatClient, ScriptedChat]:
    """A critic answering by the first route key found in the prompt (a str or a function of the messages).

    The prompt is the first user message, so a retry (the same prompt, the bad answer and the error
    appended) is routed like the original call.
    """

    def reply(messages: Sequence[Message]) -> str:
        prompt = next(m.content for m in messages if m.role == "user")
        for key, answer in routes.items():
            if key in prompt:
                return answer if isinstance(answer, str) else answer(messages)
        return default

    backend = ScriptedChat(reply, name="critic")
    return ChatClient(backend, retries=0), backend


def transcript(backend: ScriptedChat) -> str:
    """Every message the critic received, call by call, as a readable text for golden files."""
    parts = []
    for n, (messages, _params) in enumerate(backend.calls, 1):
        parts.append(f"######## critic call {n}")
        parts += [f"=== {m.role}\n{m.content}" for m in messages]
    return "\n".join(parts) + "\n"


def user_prompts(backend: ScriptedChat) -> list[str]:
    """The last user message of every critic call."""
    return [messages[-1].content for messages, _ in backend.calls]


def kwargs_of(call: Call) -> dict[str, Any]:
    return {"samples": call.samples, "temperature": call.temperature}
