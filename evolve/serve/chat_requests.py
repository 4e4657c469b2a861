"""What a served chat request asks, read before the team answers it: the conversation as the team sees
it, the app's tools as the answering agent may use them, and the prompts a tenant starts from.

Example:
    >>> conversation([Message("system", "Be brief."), Message("user", "Door code?")])[1]
    'Door code?'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from sqlalchemy import Engine

from connectors import ConfigError, Message, StoreError, Tool
from connectors.db import check_chars
from connectors.prompted_tools import call_text
from evolve.agent import Team
from evolve.episode import Step
from evolve.prompts.graph import PromptGraph
from evolve.tools.loop import DESCRIBED

TOOL_CHOICES = ("auto", "none", "required")
# The parameters a request may set on the agents' calls, over the spec's own (its max_tokens, temperature...);
# anything else is the deployment's business.
REQUEST_PARAMS = ("temperature", "top_p", "max_tokens", "seed", "stop", "presence_penalty", "frequency_penalty",
                  "tool_choice", "logprobs")  # fmt: skip
PENALTIES = ("presence_penalty", "frequency_penalty")


def trained_prompts(engine: Engine, run: str, seed: Mapping[str, str]) -> dict[str, str]:
    """The trained run's HEAD prompts when it has a HEAD for the same agents, else ``seed``."""
    graph = PromptGraph(engine, run)
    if not has_head(graph):
        return dict(seed)
    nodes = dict(graph.head().nodes)
    return nodes if set(nodes) == set(seed) else dict(seed)


def has_head(graph: PromptGraph) -> bool:
    try:
        graph.head()
    except StoreError:
        return False
    return True


def conversation(messages: Sequence[Message]) -> tuple[str, str]:
    """``(observation, query)`` for a chat: the team answers the observation, memory recalls by the query.

    The query is the last user message's content. The observation is that message alone when it is the
    whole conversation and names no speaker; otherwise the app's instructions and the earlier turns come
    first, quoted, so the agents' own (evolved) system prompts stay in charge. A message's ``name`` (the
    participant: a multi-agent app's agent) is shown with its turn, never in the query.
    """
    if not messages:
        raise ConfigError("messages must hold at least one message")
    for i, m in enumerate(messages):
        check_chars(f"messages[{i}].content", m.content)  # recorded, recalled by and learned from
        check_chars(f"messages[{i}].name", m.name or "")
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    if not users:
        raise ConfigError("messages must hold at least one user message; the team answers the last one")
    last = users[-1]
    query = messages[last].content
    if not query.strip():
        raise ConfigError("the last user message is empty")
    context = [m for i, m in enumerate(messages) if i != last]
    asker = messages[last].name
    if not context and asker is None:
        return query, query
    instructions = [f"{m.name}: {m.content}" if m.name else m.content for m in context if m.role == "system"]
    turns = [turn_text(m) for m in context if m.role != "system"]
    parts = []
    if instructions:
        parts.append("Instructions from the app:\n" + "\n".join(instructions))
    if turns:
        parts.append("Conversation so far:\n" + "\n".join(turns))
    parts.append(f"Reply to {asker}: {query}" if asker else f"Reply to: {query}")
    return "\n\n".join(parts), query


def speaker(m: Message) -> str:
    """Who says ``m`` as the observation quotes it: its role, and its participant's name if it has one."""
    return f"{m.role} ({m.name})" if m.name else m.role


def turn_text(m: Message) -> str:
    """One earlier turn as the observation quotes it: its speaker, tool calls written out, tool results by call id."""
    if m.role == "tool":
        by = f" from {m.name}" if m.name else ""
        return f"tool result ({m.tool_call_id}){by}: {m.content}"
    calls = ", ".join(f"{call_text(c)} (call {c.id})" if c.id else call_text(c) for c in m.tool_calls)
    said = " ".join(x for x in (m.content, f"[called {calls}]" if calls else "") if x)
    return f"{speaker(m)}: {said}"


def first_call_only(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """The steps with the answering agent's calls to the app's tools cut to the first."""
    last = steps[-1] if steps else None
    described = [r for r in last.calls if r.result == DESCRIBED] if last is not None else []
    if last is None or len(described) < 2:
        return steps
    kept = described[0]
    others = tuple(r for r in last.calls if r.result != DESCRIBED)
    return (*steps[:-1], dataclasses.replace(last, calls=(*others, kept), output=f"[{call_text(kept.call)}]"))


def check_penalties(params: Mapping[str, object], team: Team) -> dict[str, object]:
    """``params`` without penalties of 0 (they ask nothing); ConfigError naming the agents whose model cannot
    take a penalty that was asked for (its backend does not say ``takes_penalties``), never a silent drop."""
    asked = [k for k in PENALTIES if params.get(k)]
    unable = [f"{name} ({agent.model.name})" for name, agent in team.agents.items()
              if getattr(agent.model.backend, "takes_penalties", False) is not True]  # fmt: skip
    if asked and unable:
        raise ConfigError(f"{' and '.join(asked)} cannot be honoured: the model of {', '.join(unable)} takes none")
    return {k: v for k, v in params.items() if k not in PENALTIES or v}


def check_request_tools(tools: Sequence[Tool] | None, choice: object, team: Team) -> list[Tool] | None:
    """The request's tools as described-only ones, for a one-agent team; ConfigError says what cannot be served."""
    if choice is not None and choice not in TOOL_CHOICES:
        raise ConfigError(f"tool_choice must be one of {list(TOOL_CHOICES)}, got {choice!r:.80}")
    if not tools:
        if choice is not None and choice != "none":
            raise ConfigError(f"tool_choice={choice!r} needs tools")
        return None
    if len(team.agents) > 1:
        raise ConfigError(
            f"tools are served by a one-agent team; this one has {len(team.agents)} agents "
            f"({', '.join(team.agents)}), whose calls would not be the app's to run"
        )
    bad = [t for t in tools if not isinstance(t, Tool)]
    if bad:
        raise ConfigError(f"tools must be connectors.Tool objects, got {type(bad[0]).__name__}")
    return [dataclasses.replace(t, fn=None) for t in tools]  # the app runs them, never this server
