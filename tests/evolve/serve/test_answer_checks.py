"""How often a served answer is asked again: a try cut off at its ``max_tokens`` is not retried (the same budget
cuts it again), and the error tells the app to allow more tokens; a try that ends on its own is asked again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from connectors import Tool
from evolve.agent import TeamAct
from evolve.episode import Step
from evolve.serve.answer_checks import FailedAnswer, checked_act

CUT_CALL = "[door_code(site='Havena Harbor Ware"  # what SmolLM2 wrote under the bundled spec's 12 tokens
DOOR = Tool(name="door_code", description="The door code of a site.", parameters={"type": "object"})


class Replies:
    """A team that answers each try with the next of ``outputs``, each ending for ``finish``."""

    def __init__(self, outputs: Sequence[str], finish: str) -> None:
        self.outputs, self.finish, self.tries = list(outputs), finish, 0

    def act(self, observations: Sequence[str], **_: Any) -> list[TeamAct]:
        output = self.outputs[min(self.tries, len(self.outputs) - 1)]
        self.tries += 1
        step = Step("solver", (), output, problems=(f"a call that cannot be parsed: {output}",), finish=self.finish)
        return [TeamAct((step,), output)]


def test_a_required_call_cut_by_max_tokens_is_not_asked_again_and_says_so() -> None:
    team = Replies([CUT_CALL, "[door_code(site='Harbor')]"], finish="length")
    with pytest.raises(FailedAnswer, match=r"after 1 try: it made no valid function call \(max_tokens cut"):
        checked_act(team, "Harbor door code?", "Harbor door code?", {"tool_choice": "required"}, [DOOR], fmt=None)  # type: ignore[arg-type]
    assert team.tries == 1


def test_a_required_call_missing_from_a_whole_answer_is_asked_again() -> None:
    team = Replies(["I cannot say.", "Still prose."], finish="stop")
    with pytest.raises(FailedAnswer, match="after 3 tries: it made no valid function call: ") as failed:
        checked_act(team, "Harbor door code?", "Harbor door code?", {"tool_choice": "required"}, [DOOR], fmt=None)  # type: ignore[arg-type]
    assert team.tries == 3 and "max_tokens" not in str(failed.value)
