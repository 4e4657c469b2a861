"""Every text the memory writer sends to a model or stores, as named constants.

Rendered by ``tests/memory/write/test_memory_writer.py`` against a golden snapshot, so a change here shows up as
a reviewed diff. Fields use ``str.format`` names: ``{task}``, ``{trajectory}``, ``{feedback}``, ...
"""

from __future__ import annotations

WRITER_SYSTEM = (
    "You turn one attempt at a task into a short memory that helps an agent do similar tasks better "
    "next time. Be concrete and brief. Write plain text with no preamble."
)

SUCCESS_PROMPT = """The attempt below succeeded. Write a reusable script of 3 to 5 numbered steps that \
would solve tasks like this one. Keep the steps general enough to transfer to similar tasks, but keep \
the concrete commands, names or formulas that mattered.

Task:
{task}

Trajectory (condensed):
{trajectory}

Feedback from the environment:
{feedback}

Answer with the numbered steps only."""

FAILURE_PROMPT = """The attempt below failed. Write a short lesson as three labelled lines:
What went wrong: <the mistake, concretely>
What to avoid: <the action or assumption not to repeat>
Correct approach: <what would have worked, only if the feedback reveals it; otherwise "unknown">

Task:
{task}

Trajectory (condensed):
{trajectory}

Feedback from the environment:
{feedback}

Answer with the three labelled lines only."""

# What gets stored. Cheap mode needs no model: the task, the outcome, the condensed trajectory and
# the environment's feedback.
CHEAP_EXPERIENCE = """Task: {task}
Outcome: {outcome}
Trajectory (condensed):
{trajectory}
Feedback: {feedback}"""

SUCCESS_EXPERIENCE = """Outcome: success
Reusable steps:
{script}

Trajectory (condensed):
{trajectory}"""

FAILURE_EXPERIENCE = """Outcome: failure
{lesson}

Feedback: {feedback}"""

OMITTED = "... [{count} characters omitted] ..."

# Consolidation (``memory.upkeep.consolidation``): several episodes of one kind of task distilled into one
# strategy. The model answers with four labelled lines, parsed leniently (``parse_strategy``).
CONSOLIDATE_SYSTEM = (
    "You distil several past attempts at one kind of task into one strategy that helps an agent do "
    "such tasks right next time. Be concrete and brief. Write plain text with no preamble."
)

CONSOLIDATE_PROMPT = """Below are {count} past attempts at the same kind of task, successes and \
failures, each with its outcome and its learned utility Q (higher: recalling it helped more often).

Task, as usually asked:
{intent}

Attempts:
{episodes}

Distil them into one strategy, written as four labelled lines:
Title: <a name for the strategy, at most eight words>
Applies when: <the kind of task or situation it is for>
Do: <what to do, with the concrete values, names or steps the successes relied on>
Avoid: <what the failures did wrong, concretely; "nothing" when no failure shows a mistake>

Prefer what the successes with the highest Q agree on; where attempts contradict each other, trust \
the successes. If the attempts teach nothing reusable, answer exactly NONE.

Answer with the four labelled lines only."""

CONSOLIDATE_EPISODE = """[{index}] {outcome}, Q {q:.2f}, task: {intent}
{experience}"""

# A strategy as stored and recalled: what a model sees in its prompt (the Avoid line only when there
# is something to avoid).
STRATEGY_TEXT = """Strategy: {title}
When: {applies_when}
Do: {do}"""

STRATEGY_AVOID = "Avoid: {avoid}"

# The rule-based distillation (no model): the group's shared intent, its successes' most common answer,
# what its failures answered.
RULE_APPLIES_WHEN = "a task like: {intent}"

RULE_DO_ANSWER = 'answer "{answer}", as the successful attempts did'

RULE_DO_REVEALED = 'answer "{answer}", which the feedback on failed attempts revealed'

RULE_AVOID_ANSWER = 'answering "{answer}", as a failed attempt did'
