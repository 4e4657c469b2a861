"""CHAMP (the ``champ-dataset`` package's 270 competition maths problems) as single-step tasks.

Each problem's reference answer is sorted, once, into the fairest check that can be automated
(``reference``); the ``"champ"`` checker then reads the reply's final answer (``Answer: ...`` line,
``\\boxed{}``, or its last line) the same way:

- ``numeric`` (140 of 270): the reference is one number ("239", "C(10, 5), or equivalently 252",
  "sqrt(3)/3", "98 values", "3 is the only possible value"); the reply's final answer is read as an
  expression and must have that value (relative tolerance 1e-6).
- ``formula`` (33): an expression in the problem's counting variables n, m, k, r, a, b ("2^(n-1)",
  "n(n+1)(2n+1)/6"); the reply's must agree at six fixed integer points. Expressions in x, y, z are
  left to ``text``: for "factorize ..." an expanded polynomial is not an answer.
- ``yes_no`` (33): the final answer must say the expected word and not the other one.
- ``numbers`` (6): a list of numbers ("376 and 625", "x=16 and x=81"); the same set must be named.
- ``text`` (58): the rest ("No integer solutions", "(x^2+x+1)(x^2-x+1)", "x=6, y=5"); the
  reference (or one of its stated equivalents) must appear in a short final answer, compared
  ignoring case, spaces around operators and ``*``. The strictest rule: a correct paraphrase can fail.

A ``numeric`` or ``formula`` reference with a worded aside ("0 (i.e., no real-valued zeros)") also
accepts the aside's words.

Feedback is ``"hint"`` by default: a failure shows the problem's own hints (or, for the 25 problems
without, its concepts), never the answer, so memory can only learn how to approach a problem — not
copy its answer. ``feedback="reveal"`` gives the answer instead.

Example:
    >>> tasks = champ_tasks(limit=1)                                   # doctest: +SKIP
    >>> check(tasks[0], "... so there are 239 strings.\\nAnswer: 239")[0]  # doctest: +SKIP
    1.0
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass

from connectors.errors import ConfigError
from connectors.install import extra_hint
from evolve.envs.mathmatch import best_expression, equivalent, final_answer, parse, tokens
from evolve.envs.tasks import FEEDBACK_MODES, CheckResult, Task, register_checker
from evolve.envs.textmatch import matches_normalised, words

log = logging.getLogger(__name__)

INSTALL_HINT = extra_hint("bench")
INSTRUCTION = "Solve the problem. End your reply with one line of the form 'Answer: <your final answer>'."
FORMULA_VARIABLES = frozenset("nmkrab")
MAX_HINT = 700

_ALTERNATIVES = re.compile(r",? or (?:equivalently|an equivalent form such as) ", re.IGNORECASE)
_APPROXIMATELY = re.compile(r",? or approximately .*$", re.IGNORECASE)
_ASIDE = re.compile(r"\s+\(([^()]*)\)$")
_WRAPPERS = re.compile(
    r"^(?:the limit exists and is equal to |the only possible value for the limit is )|"
    r" (?:is the only possible value|values|roots|pairs|inequalities|times)$",
    re.IGNORECASE,
)
_NUMBER_LIST = re.compile(r"^(?:x=)?-?\d+(?:(?:,| and|, and) (?:x=)?-?\d+)+$")
_INTEGER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass(frozen=True)
class Reference:
    """How one reference answer is checked: ``kind`` and what that kind compares against."""

    kind: str
    expression: str = ""
    variables: frozenset[str] = frozenset()
    texts: tuple[str, ...] = ()


@functools.cache
def reference(answer: str) -> Reference:
    """Sort a CHAMP reference answer into the check it gets (see the module docstring)."""
    answer = " ".join(answer.split())
    if answer in ("Yes", "No"):
        return Reference("yes_no", texts=(answer.lower(),))
    if _NUMBER_LIST.match(answer):
        return Reference("numbers", texts=tuple(_INTEGER.findall(answer)))
    parts = _ALTERNATIVES.split(_APPROXIMATELY.sub("", answer))
    texts = [answer, *parts] if len(parts) > 1 else [answer]
    for part in parts:
        core, aside = _split_aside(part)
        texts += [aside] if aside else []
        core = _WRAPPERS.sub("", core).strip()
        names = {tok for kind, tok in tokens(core, ()) if kind == "word" and len(tok) == 1 and tok.isalpha()}
        if names <= FORMULA_VARIABLES and parse(core, names) is not None:
            # only the worded aside is accepted as text: "0 or 1" must not pass for "0" by naming it
            asides = (aside,) if aside else ()
            return Reference("formula" if names else "numeric", core, frozenset(names), asides)
    return Reference("text", texts=tuple(texts))


def _split_aside(part: str) -> tuple[str, str]:
    """``"0 (i.e., no integer zeros)"`` → ``("0", "no integer zeros")``; an aside must be worded, not maths."""
    if " (i.e.," in part and part.endswith(")"):
        core, _, aside = part.partition(" (i.e.,")
        return core, aside[:-1].strip()
    found = _ASIDE.search(part)
    if found and re.search(r"[A-Za-z]{3,}", found.group(1)) and "=" not in found.group(1):
        return part[: found.start()], found.group(1)
    return part, ""


# ---------------------------------------------------------------- the checker
def canonical_text(text: str) -> str:
    """Casefolded, no ``$``/``\\``/``*``, unicode minus as "-", no spaces around ``= , + - / ^ ( ) < >``."""
    text = text.casefold().replace("\u2212", "-").replace("$", "").replace("\\", "").replace("*", "")
    text = re.sub(r"\s*([=,+\-/^()<>\u2264\u2265\u00b1])\s*", r"\1", text)
    return " ".join(text.split())


def check_champ(task: Task, reply: str) -> CheckResult:
    """The ``champ`` checker: the reply's final answer against ``reference(task.answer)``."""
    if not isinstance(task.answer, str) or not task.answer.strip():
        raise ConfigError(f"task {task.id!r}: the champ checker needs the reference answer as a string")
    ref = reference(task.answer)
    stated = final_answer(reply)
    if not stated:
        return 0.0, "No final answer found; end with a line 'Answer: ...'."
    if _text_matches(ref.texts if ref.kind in ("text", "numeric", "formula") else (), stated):
        return 1.0
    if ref.kind in ("numeric", "formula"):
        got = best_expression(stated, ref.variables)
        if got is None:
            return 0.0, f"No number or expression could be read in the final answer {stated[:80]!r}."
        return equivalent(parse(ref.expression, ref.variables), got)
    if ref.kind == "numbers":
        return sorted(map(float, _INTEGER.findall(stated))) == sorted(map(float, ref.texts))
    if ref.kind == "yes_no":
        said = set(words(stated))
        want = ref.texts[0]
        return want in said and ({"yes", "no"} - {want}).isdisjoint(said)
    return False


def _text_matches(texts: tuple[str, ...], stated: str) -> bool:
    got = canonical_text(stated)
    return any(matches_normalised(canonical_text(t), got) for t in texts)


register_checker("champ", check_champ, replace=True)


# ---------------------------------------------------------------- tasks
def champ_tasks(*, limit: int | None = None, feedback: str = "hint") -> list[Task]:
    """The CHAMP problems as tasks, in the dataset's order (Combinatorics, Inequality, Number-Theory, ...).

    Args:
        limit: keep the first ``limit`` problems.
        feedback: ``"hint"`` (the problem's hints, default), ``"reveal"`` (the answer) or ``"none"``.

    Returns:
        Tasks with id = the dataset's identifier (``P_Combinatorics_1``), prompt = the problem and
        ``INSTRUCTION``, answer = the reference answer, checker ``"champ"`` and ``meta`` with
        ``category``, ``kind`` (see ``reference``), ``hints`` and ``concepts``.

    Raises:
        ConfigError: champ-dataset is not installed, or an argument is invalid.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError(f"limit must be a non-negative integer or None, got {limit!r}")
    if feedback not in FEEDBACK_MODES:
        raise ConfigError(f"feedback must be one of {FEEDBACK_MODES}, got {feedback!r}")
    return [_task(p, feedback) for p in _problems()[:limit]]


def _task(problem: dict[str, object], feedback: str) -> Task:
    hints, concepts = list(problem["hints"]), list(problem["concepts"])  # type: ignore[call-overload]
    hint = " ".join(f"({i}) {h}" for i, h in enumerate(hints or concepts, start=1))
    if len(hint) > MAX_HINT:
        hint = hint[: MAX_HINT - 3] + "..."
    answer = str(problem["answer"])
    return Task(
        id=str(problem["id"]),
        prompt=f"{problem['text']}\n\n{INSTRUCTION}",
        answer=answer,
        checker="champ",
        family="champ",
        feedback=feedback,
        hint=hint or None,
        meta={"category": problem["category"], "kind": reference(answer).kind, "hints": hints, "concepts": concepts},
    )


@functools.cache
def _problems() -> list[dict[str, object]]:
    """The problems with their hints and concepts as plain data (the package's file takes ~2 s to read)."""
    try:
        import champ_dataset
    except ImportError:
        raise ConfigError(f"CHAMP tasks need the champ-dataset package: {INSTALL_HINT}") from None
    data = champ_dataset.load("v0")
    out = []
    for p in data.problems.values():
        refs = list(p.ch_list or [])
        out.append(
            {
                "id": p.identifier,
                "text": p.text,
                "answer": p.answer,
                "category": p.category,
                "hints": [data.hints[r].text for r in refs if r in (data.hints or {})],
                "concepts": [data.concepts[r].text for r in refs if r in (data.concepts or {})],
            }
        )
    return out
