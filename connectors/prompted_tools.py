"""Tool calling for models without native function calling (a local model through transformers or
vLLM): the tools are described in the system message, the model is asked to write its calls in Python
call syntax (``[name(arg=value, ...)]``, BFCL's prompt format for such models), and what it writes is
read back by ``connectors.tools.parse_tool_calls`` into ``Completion.tool_calls`` — or into
``tool_problems`` when an attempt cannot be read, never an exception.

Earlier tool turns are rendered as text the model's chat template knows: an assistant's calls as the
call syntax, a tool result as a user turn naming the call it answers.

Example:
    >>> from connectors.tools import Tool
    >>> tool = Tool("lookup", "Look a code up.", {"type": "object", "properties": {"code": {"type": "string"}}})
    >>> msgs = render([Message("user", "Which code?")], [tool], "auto")
    >>> msgs[0].role, "lookup" in msgs[0].content, msgs[1].content
    ('system', True, 'Which code?')
    >>> with_calls(Completion('[lookup(code="4471")]', "m"), [tool]).tool_calls[0].arguments
    {'code': '4471'}
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence

from connectors.errors import ConfigError
from connectors.tools import Tool, ToolCall, parse_tool_calls
from connectors.types import Completion, Message

TOOL_CHOICES = ("auto", "required", "none")

TOOLS_SYSTEM = """You can call these functions (JSON Schema of each one's arguments):
{specs}

{rule} To call functions, reply with only the calls, filling in the values from the request, in this form:
{example}"""

RULES = {
    "auto": "Call a function when it helps; otherwise answer in plain text.",
    "required": "You must call at least one function.",
}

PREFILL = "["
"""With ``tool_choice="required"`` the answer starts with this, which the model continues: small models
that would answer in prose then write calls (SmolLM2-135M on BFCL's first 16 simple_python questions:
0 calls without it; with it, most replies are calls)."""


def example_call(tools: Sequence[Tool]) -> str:
    """The form of a call, shown with the first tool's real name and required arguments (a small model
    copies a placeholder name such as ``function_name`` literally).

    Example:
        >>> example_call([Tool("area", "", {"type": "object", "properties": {"base": {}}, "required": ["base"]})])
        '[area(base=...)]'
    """
    first = tools[0]
    names = list(first.parameters.get("required", ())) or list(first.parameters.get("properties", {}))[:1]
    return f"[{first.name}({', '.join(f'{n}=...' for n in names)})]"


def check_tools(tools: Sequence[Tool] | None, tool_choice: str | None) -> None:
    """ConfigError unless ``tools`` is a list of ``Tool`` and ``tool_choice`` one of ``TOOL_CHOICES``."""
    if not tools:
        if tool_choice is not None:
            raise ConfigError(f"tool_choice={tool_choice!r} needs tools=[...]")
        return
    if isinstance(tools, (str, Tool)) or not all(isinstance(t, Tool) for t in tools):
        raise ConfigError(f"tools must be a list of connectors.Tool, got {tools!r:.120}")
    if tool_choice is not None and tool_choice not in TOOL_CHOICES:
        raise ConfigError(f"tool_choice must be one of {TOOL_CHOICES}, got {tool_choice!r}")


def render(messages: Sequence[Message], tools: Sequence[Tool], tool_choice: str | None) -> list[Message]:
    """``messages`` with the tools described in the system message (merged into the first one, if any)
    and tool turns as plain text; ``tool_choice="none"`` describes no tool."""
    turns = [_as_text(m) for m in messages]
    if tool_choice == "none":
        return turns
    # strict is not shown: every prompted call is checked against its schema as it is read (parse_tool_calls)
    plain = [dataclasses.replace(t, strict=False) for t in tools]
    specs = "\n".join(json.dumps(t.spec()["function"], ensure_ascii=False) for t in plain)
    described = TOOLS_SYSTEM.format(specs=specs, rule=RULES[tool_choice or "auto"], example=example_call(tools))
    if turns and turns[0].role == "system":
        return [Message("system", f"{turns[0].content}\n\n{described}"), *turns[1:]]
    return [Message("system", described), *turns]


def plain_turns(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with tool calls and tool results written as text, for a model without tools now."""
    return [_as_text(m) for m in messages]


def _as_text(m: Message) -> Message:
    if m.role == "tool":
        return Message("user", f"Result of {m.tool_call_id}: {m.content}")
    if m.tool_calls:
        calls = ", ".join(call_text(c) for c in m.tool_calls)
        return Message("assistant", f"{m.content}\n[{calls}]".strip(), name=m.name)
    return m


def call_text(call: ToolCall) -> str:
    """A call in the syntax the model is asked to write: ``name(a=1, b='x')``."""
    return f"{call.name}({', '.join(f'{k}={v!r}' for k, v in call.arguments.items())})"


def with_calls(completion: Completion, tools: Sequence[Tool]) -> Completion:
    """``completion`` with the calls its text asks for (and the problems of those it cannot read)."""
    parsed = parse_tool_calls(completion.text, tools)
    if not parsed.attempted:
        return completion
    reason = "tool_calls" if parsed.calls else completion.finish_reason
    return dataclasses.replace(completion, tool_calls=parsed.calls, tool_problems=parsed.problems, finish_reason=reason)


def prompted_batch(
    generate: Callable[[list[list[Message]], str, list[Sequence[Tool]]], list[Completion]],
    prompts: Sequence[Sequence[Message]],
    tools: Sequence[Tool] | None,
    tool_choice: str | None,
    tools_each: Sequence[Sequence[Tool]] | None = None,
) -> list[Completion]:
    """``generate(prompts, prefill, offered)`` over ``prompts`` with ``tools`` prompted in and their calls
    read back out; ``tools_each`` (one list per prompt, instead of ``tools``) gives each prompt its own
    tools while the prompts are still generated together. With ``tool_choice="required"`` every
    prompt with tools has its answer started with ``PREFILL`` (the text returned includes it).

    ``offered`` holds, for each prompt of the call, the tools its prompt describes (none under
    ``tool_choice="none"``); with a ``prefill`` the answer must call one of them, which a backend that
    decodes under a grammar enforces (``connectors.constrained``)."""
    if tools_each is None:
        check_tools(tools, tool_choice)
        each: list[Sequence[Tool]] = [tools or ()] * len(prompts)
    else:
        if tools:
            raise ConfigError("give tools= (one list for every prompt) or tools_each= (one per prompt), not both")
        if len(tools_each) != len(prompts):
            raise ConfigError(
                f"tools_each has {len(tools_each)} lists for {len(prompts)} prompts; expected one per prompt"
            )
        for t in tools_each:
            check_tools(t, tool_choice if t else None)
        each = list(tools_each)
    # tool turns of an earlier exchange become text the chat template knows, with or without tools now
    rendered = [
        render(p, t, tool_choice) if t else [_as_text(m) for m in p] for p, t in zip(prompts, each, strict=True)
    ]
    out: list[Completion | None] = [None] * len(prompts)
    primed = [i for i, t in enumerate(each) if t and tool_choice == "required"]
    plain = [i for i in range(len(prompts)) if i not in set(primed)]
    offered = [() if tool_choice == "none" else t for t in each]
    for group, prefill in ((plain, ""), (primed, PREFILL)):
        if group:
            answers = generate([rendered[i] for i in group], prefill, [offered[i] for i in group])
            for i, c in zip(group, answers, strict=True):
                out[i] = dataclasses.replace(c, text=prefill + c.text) if prefill else c
    done = [c for c in out if c is not None]
    if tool_choice == "none":
        return done
    return [with_calls(c, t) if t else c for c, t in zip(done, each, strict=True)]


__all__ = [
    "PREFILL",
    "TOOL_CHOICES",
    "call_text",
    "check_tools",
    "example_call",
    "plain_turns",
    "prompted_batch",
    "render",
    "with_calls",
]
