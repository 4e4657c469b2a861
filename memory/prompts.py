"""Every text the memory writer sends to a model or stores, as named constants.

Rendered by ``tests/memory/test_prompts.py`` against a golden snapshot, so a change here shows up as
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
