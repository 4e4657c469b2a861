"""Parsing the critic's answers, with validation: a malformed answer raises ``ParseError`` keeping the raw text.

Three shapes come back from the critic:

- a rewrite: the complete new text of a component between ``<new_text>`` and ``</new_text>``
  (chatter around the tags is tolerated; the last tagged block wins);
- free text (a critique, a rollout summary, lessons), where a sentinel such as ``NO CHANGE`` or
  ``NONE`` means "nothing here";
- Training-Free GRPO operations: a JSON list of ``{"op", "id", "text"}`` objects, found inside code
  fences or chatter and validated with pydantic.

Example:
    >>> parse_rewrite("Sure.\\n<new_text>\\nAlways state units.\\n</new_text>")
    'Always state units.'
    >>> [o.op for o in parse_operations('```json\\n[{"op": "add", "text": "When x, do y."}]\\n```')]
    ['ADD']
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, field_validator, model_validator

from connectors import ParseError

NO_CHANGE = "NO CHANGE"
NONE = "NONE"

_NEW_TEXT = re.compile(r"<\s*new_text\s*>(.*?)<\s*/\s*new_text\s*>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)
_NUMBERING = re.compile(r"^\s*\[\d+\]\s*")
# A clause and the whitespace after it: up to . ; ! or ? followed by space or the end, or the rest.
_CLAUSE = re.compile(r".*?(?:[.;!?]+(?=\s|$)\s*|$)", re.DOTALL)


def parse_rewrite(raw: str) -> str:
    """The new text of a component: what stands between the last ``<new_text>`` … ``</new_text>`` pair.

    Raises:
        ParseError: no complete tagged block, or the block is empty.
    """
    blocks = _NEW_TEXT.findall(raw)
    if not blocks:
        raise ParseError(
            "expected the new text between <new_text> and </new_text>, found no complete tagged block", raw=raw
        )
    text = str(blocks[-1]).strip()
    if not text:
        raise ParseError("the text between <new_text> and </new_text> is empty", raw=raw)
    return text


def parse_untagged_rewrite(raw: str) -> str:
    """``parse_rewrite``, falling back to the first paragraph of an answer that has no tags.

    Small local critics often cannot keep the output format; their first paragraph is still a
    proposal worth testing (the gates decide). Repeated lines are dropped and a lead-in such as
    "Here is the new text:" is skipped.

    Raises:
        ParseError: the answer is empty, or has no paragraph of at least three words.
    """
    try:
        return parse_rewrite(raw)
    except ParseError:
        pass
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", raw.replace("<new_text>", "")) if p.strip()]
    for paragraph in paragraphs:
        if paragraph.rstrip().endswith(":") or len(paragraph.split()) < 3:
            continue  # a lead-in or a fragment
        lines = list(dict.fromkeys(line.strip() for line in paragraph.splitlines() if line.strip()))
        return trim_degenerate("\n".join(lines))
    raise ParseError("no <new_text> block and no paragraph of at least three words to use instead", raw=raw)


def trim_degenerate(text: str) -> str:
    """``text`` up to its first repeated clause, without a final clause cut off mid-way.

    Small models fall into loops ("the answer is correct; the answer is correct; ...") and run out of
    tokens mid-clause; what comes before the loop is the proposal. Clauses end at ``. ; ! ?``; a repeat
    is the same clause ignoring case and spacing. An unterminated last clause is dropped when a complete
    one precedes it.

    Example:
        >>> trim_degenerate("Be brief. Answer in one sentence. Be brief. Be brief. Be")
        'Be brief. Answer in one sentence.'
    """
    clauses = _CLAUSE.findall(text)
    kept: list[str] = []
    seen: set[str] = set()
    for clause in clauses:
        key = " ".join(clause.lower().rstrip(".;!? \n").split())
        if not key:
            continue
        if key in seen:
            break
        seen.add(key)
        kept.append(clause)
    if len(kept) > 1 and not re.search(r"[.;!?]\s*$", kept[-1]):
        kept.pop()  # cut off by the token limit
    return "".join(kept).strip().rstrip(";").strip() or text.strip()


def parse_text(raw: str, *, what: str, nothing: str | None = None) -> str | None:
    """Free text, stripped; None when the answer is exactly the ``nothing`` sentinel.

    Args:
        raw: the critic's answer.
        what: what the text is, for the error message ("critique", "summary", ...).
        nothing: a sentinel meaning "nothing to say" (``NO CHANGE``, ``NONE``), matched ignoring case,
            surrounding quotes and a final full stop.

    Raises:
        ParseError: the answer is empty.
    """
    text = raw.strip()
    if not text:
        raise ParseError(f"expected a {what}, got an empty answer", raw=raw)
    if nothing is not None and text.strip("\"'`*. ").upper() == nothing:
        return None
    return text


def parse_critique(raw: str) -> str | None:
    """A critique (what to change and why); None when the critic answers ``NO CHANGE``."""
    return parse_text(raw, what="critique", nothing=NO_CHANGE)


def parse_summary(raw: str) -> str:
    """A rollout summary (never empty)."""
    text = raw.strip()
    if not text:
        raise ParseError("expected a summary of the attempt, got an empty answer", raw=raw)
    return text


def parse_lessons(raw: str) -> str | None:
    """The semantic advantage of a group ("When …, do …" lines); None when the critic answers ``NONE``."""
    return parse_text(raw, what="list of lessons", nothing=NONE)


class Operation(BaseModel):
    """One edit of the experience library, as the critic proposes it.

    ``id`` refers to the library's ``[id]`` numbering. ``ADD`` needs ``text``; ``UPDATE`` needs ``id``
    and ``text``; ``DELETE`` needs ``id``; ``KEEP`` (also written ``NONE``) changes nothing.

    Example:
        >>> Operation(op="update", id=2, text="[2] When stuck, re-read the task.")
        Operation(op='UPDATE', id=2, text='When stuck, re-read the task.')
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    op: Literal["ADD", "UPDATE", "DELETE", "KEEP"]
    id: int | None = None
    text: str | None = None

    @field_validator("op", mode="before")
    @classmethod
    def _normalise_op(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip().upper()
            return "KEEP" if value in ("NONE", "NOOP", "NO-OP") else value
        return value

    @field_validator("text", mode="before")
    @classmethod
    def _strip_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = _NUMBERING.sub("", value.strip()).strip()
            return value or None
        return value

    @model_validator(mode="after")
    def _check_fields(self) -> Operation:
        if self.op in ("UPDATE", "DELETE") and (self.id is None or self.id < 1):
            raise ValueError(f"{self.op} needs the id (>= 1) of an existing entry, got {self.id!r}")
        if self.op in ("ADD", "UPDATE") and not self.text:
            raise ValueError(f"{self.op} needs a non-empty text")
        return self


_OPERATIONS = TypeAdapter(list[Operation])


def parse_operations(raw: str) -> list[Operation]:
    """A JSON list of library operations, from code fences or chatter, validated.

    Also accepted: a single operation object, or ``{"operations": [...]}``. An empty list means
    "change nothing".

    Raises:
        ParseError: no JSON found, or it is not a list of valid operations.
    """
    data = _find_json(raw)
    if isinstance(data, dict):
        data = data.get("operations", [data] if "op" in data else data)
    if not isinstance(data, list):
        raise ParseError(f"expected a JSON list of operations, got {type(data).__name__}", raw=raw)
    try:
        return _OPERATIONS.validate_python(data)
    except ValidationError as e:
        problems = "; ".join(f"item {'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()[:5])
        raise ParseError(f"invalid library operations: {problems}", raw=raw) from e


def _find_json(raw: str) -> Any:
    """The first JSON value found in fences, then between the outermost brackets, then braces."""
    candidates = [m.strip() for m in _FENCE.findall(raw)]
    for opening, closing in (("[", "]"), ("{", "}")):
        start, end = raw.find(opening), raw.rfind(closing)
        if 0 <= start < end:
            candidates.append(raw[start : end + 1])
    for text in candidates:
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            continue
    raise ParseError("expected a JSON list of operations, found no parseable JSON", raw=raw)
