"""A model that knows nothing but copies what recalled experiences reveal (the evolve tests, the fault scenarios)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from connectors import Message

REVEALED = re.compile(r"(?:expected answer is: |Answer given: )(\d{4})")


def copying_reply(messages: Sequence[Message]) -> str:
    """A model that knows nothing but copies the last code a recalled experience shows."""
    found = REVEALED.findall(messages[-1].content)
    return found[-1] if found else "0000"
