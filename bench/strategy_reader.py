"""The rule reader of the strategy bench: ``bench.noise.rule_reply``, which answers with what the best recalled
episode shows, taught to read a strategy written by rule too (``memory.upkeep.consolidation.rule_strategy``).

A figure it yields measures what memory hands the model, not a model's reading of it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bench.noise import rule_reply
from connectors import Message
from memory import prompts

_BLOCK = re.compile(r"<experience>\n?(.*?)\n?</experience>", re.S)
_DO_ANSWER = re.compile(
    "|".join(re.escape(t).replace(re.escape("{answer}"), "(.+)") for t in (prompts.RULE_DO_ANSWER,
                                                                           prompts.RULE_DO_REVEALED))
)  # fmt: skip
_CALLED = re.compile(r"^Called (.+?)(?: -> .*)?$", re.M)


def rule_reader(messages: Sequence[Message]) -> str:
    """What the best recalled memory (rendered last) shows: for an episode ``rule_reply``'s answer; for a
    strategy the answer its Do line names, else the calls it names (``[f(x=1)]``), else "unknown".

    Example:
        >>> block = 'Strategy: Door\\nWhen: a task like: Door?\\nDo: answer "4471", as the successful attempts did'
        >>> rule_reader([Message("user", f"<experience>\\n{block}\\n</experience>\\nDoor?")])
        '4471'
    """
    blocks = _BLOCK.findall(messages[-1].content)
    if not blocks or not blocks[-1].startswith("Strategy: "):
        return rule_reply(messages)
    do = blocks[-1].split("\nDo: ", 1)[-1].split("\nAvoid: ", 1)[0]
    named = _DO_ANSWER.fullmatch(do)
    if named:
        return next(g for g in named.groups() if g is not None)
    calls = _CALLED.findall(do)
    return "[" + ", ".join(calls) + "]" if calls else "unknown"
