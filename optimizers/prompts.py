"""Every text the optimizers send to their critic, as named constants, and the helpers that fill them.

Rendered by ``tests/optimizers/test_prompts.py`` against a golden snapshot, so a change here shows up
as a reviewed diff. Fields use ``str.format`` names (``{component}``, ``{text}``, ``{feedback}``, ...).
Texts are always shown in full: a critic that sees only the ends of a long prompt rewrites blind.

Example:
    >>> describe("solver.library")
    "the agent's experience library: numbered rules, one per line, each of the form [n] When …, do …"
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from connectors.quoting import quote
from optimizers.types import NodeCall

CRITIC_SYSTEM = (
    "You improve the prompts of a team of LLM agents. You read what the agents did and what the "
    "environment said about the result, and you work out what in their prompts should change. Be "
    "concrete and brief, and claim nothing the feedback does not support."
)

# Backward, one call per (LLM call x trainable component), walking the team from its output back.
CRITIQUE_PROMPT = """Critique one prompt component of an agent team. The component below was part of the \
input of the LLM call shown after it; the team's final answer was then judged by the environment.

Component: {component} — {description}
Current text of {component}, in full:
<text>
{text}
</text>

The call (step {step} of {steps}, agent {node}):
Input:
{prompt}
Output:
{output}

The team's final answer:
{final}

Score: {score}
Feedback from the environment:
{feedback}

Critiques already written for later steps of the team (how this call's output was used downstream):
{downstream}

Say what should change in {component} so that answers like this one get better: what is missing, \
wrong or misleading in it, and why, judging from the feedback. Describe the change; do not write the \
new text. If {component} played no part in what went wrong, answer exactly NO CHANGE."""

# Backward for small graphs: one critique of the whole trace.
TRACE_CRITIQUE_PROMPT = """Critique the prompts of an agent team from one attempt at a task.

Trainable components, in full:
{component_texts}

What the team did:
{calls}

The team's final answer:
{final}

Score: {score}
Feedback from the environment:
{feedback}

Say what should change in the components above so that answers like this one get better: what is \
missing, wrong or misleading, and why, judging from the feedback. Name the component each change \
belongs to. Describe the changes; do not write new texts. If nothing in the components caused the \
problem, answer exactly NO CHANGE."""

# Update: one rewrite per chosen component.
REWRITE_PROMPT = """Rewrite one prompt component of an agent team.

Component: {component} — {description}
{role_block}Current text, in full:
<text>
{text}
</text>

Critiques from recent attempts (what to change and why):
{critiques}

Best past versions of this component, with their mean validation score:
{history}

Recently rejected proposals for this component (they did not pass validation; do not repeat them):
{rejected}

Write the complete new text of {component}. Keep what already works, address the critiques with \
general rules rather than answers to single examples, and keep it no longer than it needs to be. Put \
the new text, and nothing else, between <new_text> and </new_text>."""

# Update, edit="append": one new instruction per chosen component, added after its current text.
APPEND_PROMPT = """Add one instruction to a prompt component of an agent team.

Component: {component} — {description}
{role_block}Current text, in full:
<text>
{text}
</text>

Critiques from recent attempts (what to change and why):
{critiques}

Recently rejected proposals for this component (they did not pass validation; do not repeat them):
{rejected}

Write one short, general instruction to add to {component} so that the critiques no longer apply. Put \
the instruction, and nothing else, between <new_text> and </new_text>."""

# Training-Free GRPO: summarise each rollout of a group with mixed rewards.
SUMMARY_PROMPT = """Summarise one attempt of an agent at a task, to compare it with other attempts at \
the same task (example {example_id}).

Experience library the agent had in context:
{library}

The attempt:
{calls}

Final answer:
{output}

Reward: {score}
Feedback from the environment:
{feedback}

In at most five sentences, say what the agent did, which decisions mattered and, judging from the \
reward and the feedback, what went right or wrong. Mention the library entries it followed or \
ignored, if any."""

# Training-Free GRPO: the semantic advantage of one group.
ADVANTAGE_PROMPT = """Several attempts at the same task (example {example_id}), made with the same \
experience library, earned different rewards. Work out what the better attempts did that the worse \
ones did not.

Experience library used by every attempt:
{library}

The attempts, best reward first:
{attempts}

Write the lessons as general rules of the form "When <situation>, do <action>." — one per line, at \
most three, useful for other tasks of this kind and not only this one. If the attempts differ only by \
chance and teach nothing, answer exactly NONE."""

# Training-Free GRPO: turn a group's lessons into library operations.
OPERATIONS_PROMPT = """Update an experience library with new lessons.

Current library (at most {max_entries} entries, numbered by id):
{library}

New lessons:
{lessons}

For each lesson choose one operation:
- ADD a new entry when the library does not cover the lesson;
- UPDATE entry <id> when the lesson refines or corrects it (give the complete new text);
- DELETE entry <id> when the lesson shows it is wrong or harmful;
- KEEP when the library already says it.
Entries read "When <situation>, do <action>." and stay short and general.

Answer with a JSON list only, for example:
[{{"op": "ADD", "id": null, "text": "When ..., do ..."}}, {{"op": "UPDATE", "id": 2, "text": "When ..., do ..."}}, \
{{"op": "DELETE", "id": 3, "text": null}}, {{"op": "KEEP", "id": null, "text": null}}]"""

# Appended (after the unusable answer) when an answer could not be parsed; the call is tried once more.
RETRY_PROMPT = """Your previous answer could not be used: {error}
Answer again, in exactly the format asked for."""

# Pieces the prompts above are assembled from.
COMPONENT_BLOCK = """--- {component} — {description} ---
{text}"""

CALL_BLOCK = """--- step {step}: agent {node} (trainable components: {components}) ---
Input:
{prompt}
Output:
{output}"""

ROLE_BLOCK = """The agent's role and instructions ({system}), for context:
<role>
{role}
</role>
"""

DOWNSTREAM_ITEM = "- on {component} (step {step}, agent {node}): {text}"
CRITIQUE_ITEM = "{index}. (examples {examples}) {text}"
HISTORY_ITEM = """[version {id}: mean validation score {mean:.2f} over {n} examples]
{text}"""
REJECTED_ITEM = """[rejected proposal {index}]
{text}"""
ATTEMPT_BLOCK = """Attempt {index} (reward {score}):
{summary}"""
LIBRARY_ENTRY = "[{id}] {text}"

NOTHING = "(none)"
EMPTY_TEXT = "(empty)"
EMPTY_LIBRARY = "(the library is empty)"

PART_DESCRIPTIONS: dict[str, str] = {
    "system": "the agent's role and instructions (its system prompt)",
    "instructions": "the agent's task instructions",
    "format": "the output format the agent must follow",
    "library": "the agent's experience library: numbered rules, one per line, each of the form [n] When …, do …",
}
DEFAULT_DESCRIPTION = "a prompt component of agent {agent}"


def describe(component: str) -> str:
    """What a component is, from its ``"<agent>.<part>"`` name."""
    agent, _, part = component.partition(".")
    return PART_DESCRIPTIONS.get(part, DEFAULT_DESCRIPTION.format(agent=agent))


def system_component(component: str) -> str:
    """The name of the system prompt of the agent that owns ``component``."""
    return f"{component.partition('.')[0]}.system"


def shown(text: str, empty: str = EMPTY_TEXT) -> str:
    """A text as the critic sees it: in full, or a marker when it is empty."""
    return text if text.strip() else empty


def feedback_block(text: str) -> str:
    """The environment's feedback as quoted data: it may carry a user's comment (``evolve serve``
    feedback), which must not speak to the critic from outside its block."""
    return quote(shown(text), "feedback")


def render_list(items: Iterable[str]) -> str:
    """Items one after another, or ``(none)``."""
    listed = [i for i in items if i]
    return "\n".join(listed) if listed else NOTHING


def render_blocks(items: Iterable[str]) -> str:
    """Multi-line items separated by a blank line, or ``(none)``."""
    listed = [i for i in items if i]
    return "\n\n".join(listed) if listed else NOTHING


def render_component(component: str, text: str) -> str:
    return COMPONENT_BLOCK.format(component=component, description=describe(component), text=shown(text))


def render_calls(calls: Sequence[NodeCall]) -> str:
    """Every call of a forward pass, in order, with full inputs and outputs."""
    return render_blocks(
        CALL_BLOCK.format(
            step=i,
            node=call.node,
            components=", ".join(call.components) or NOTHING,
            prompt=shown(call.prompt),
            output=shown(call.output),
        )
        for i, call in enumerate(calls, 1)
    )


def render_role(component: str, candidate_text: str | None) -> str:
    """The owning agent's system prompt as context for a non-system component ('' when not applicable)."""
    system = system_component(component)
    if component == system or not candidate_text or not candidate_text.strip():
        return ""
    return ROLE_BLOCK.format(system=system, role=candidate_text)
