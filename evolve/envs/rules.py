"""Output rules: tasks whose answer must be right *and* follow a form the task text does not state.

A task of the ``rules`` checker lists its rules in ``meta["rules"]``, e.g. ``["max_words:6",
"one_sentence"]``. Each rule is a pure function ``(answer) -> str | None`` that returns a violation
message in plain words, or ``None`` when the rule holds. Rules that take an argument are written
``name:argument``. The rules: ``one_word``, ``lowercase``, ``no_punctuation``, ``one_line``,
``one_sentence``, ``max_words:<n>`` and ``prefix:<text>``; ``state_rules`` words them as instructions.

A ``prefix`` rule is an envelope: it is checked first and removed, and the other rules and the content
check judge what follows it. The reward is 1.0 only when every rule holds and the content matches an
expected answer (``matches_normalised``); otherwise it is 0.0 and the feedback names every broken rule
and says whether the content was right.

Example:
    >>> check_rules(["one_word", "lowercase"], "The capital is Paris.", "paris")
    (0.0, 'The answer must be a single word; it had 4 words. The answer must be lowercase; it has the capital letters T, P. The content was right.')
    >>> check_rules(["one_word", "lowercase"], "paris", "paris")
    (1.0, '')
"""

from __future__ import annotations

import logging
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from connectors.errors import ConfigError
from evolve.envs.textmatch import matches_normalised, words

logger = logging.getLogger(__name__)

RuleCheck = Callable[[str], str | None]
"""A rule ready to run: the answer in, a violation message or ``None`` out."""

# A sentence ends at . ! or ? (repeats allowed) followed by whitespace or the end: "3.5" does not split.
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")
_WORD = re.compile(r"\w", re.UNICODE)


# ---------------------------------------------------------------- the rules (pure)
def count_words(text: str) -> int:
    """Whitespace-separated tokens holding a letter or digit: ``"2 + 3 = 5"`` has 3 words."""
    return sum(1 for token in text.split() if _WORD.search(token))


def count_sentences(text: str) -> int:
    """Sentences in ``text``: pieces between sentence ends (. ! ?) and line breaks that hold a word."""
    pieces = (piece for line in text.splitlines() for piece in _SENTENCE_END.split(line))
    return sum(1 for piece in pieces if _WORD.search(piece))


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def one_word(answer: str) -> str | None:
    """The answer is exactly one word (punctuation around it is another rule's business)."""
    n = count_words(answer)
    return None if n == 1 else f"The answer must be a single word; it had {_plural(n, 'word')}."


def lowercase(answer: str) -> str | None:
    """No capital letters anywhere."""
    capitals = list(dict.fromkeys(ch for ch in answer if ch != ch.lower()))
    if not capitals:
        return None
    shown = ", ".join(capitals[:5]) + (", ..." if len(capitals) > 5 else "")
    return f"The answer must be lowercase; it has the capital letters {shown}."


def no_punctuation(answer: str) -> str | None:
    """No ASCII punctuation (``.``, ``,``, quotes, ``!``, ...) and no typographic quotes."""
    marks = list(dict.fromkeys(ch for ch in answer if ch in string.punctuation or ch in "\u201c\u201d\u2018\u2019"))
    if not marks:
        return None
    return f"The answer must have no punctuation; it has {', '.join(repr(mark) for mark in marks)}."


def one_line(answer: str) -> str | None:
    """No line breaks inside the (stripped) answer."""
    n = len(answer.strip().splitlines())
    return None if n <= 1 else f"The answer must be on one line; it had {n} lines."


def one_sentence(answer: str) -> str | None:
    """At most one sentence: "Paris." and "2 + 3 = 5" pass, "It is cold. Heat is energy" does not."""
    n = count_sentences(answer)
    return None if n <= 1 else f"The answer must be a single sentence; it had {n} sentences."


def max_words(answer: str, value: int) -> str | None:
    """At most ``value`` words (see ``count_words``)."""
    n = count_words(answer)
    return None if n <= value else f"The answer must be at most {_plural(value, 'word')}; it had {n}."


def prefix(answer: str, value: str) -> str | None:
    """The answer starts with ``value`` exactly (case and spacing included), after leading whitespace."""
    got = answer.lstrip()
    if got.startswith(value):
        return None
    if not got:
        return f"The answer must start with {value!r}; it was empty."
    start = got[: len(value) + 8] + ("..." if len(got) > len(value) + 8 else "")
    return f"The answer must start with {value!r}; it started with {start!r}."


_PLAIN_RULES: dict[str, tuple[Callable[[str], str | None], str]] = {
    "one_word": (one_word, "Answer with a single word."),
    "lowercase": (lowercase, "Write in lowercase only, with no capital letters."),
    "no_punctuation": (no_punctuation, "Use no punctuation at all."),
    "one_line": (one_line, "Answer on one line."),
    "one_sentence": (one_sentence, "Answer in a single sentence; do not explain."),
}


def _positive_int(spec: str, arg: str) -> int:
    if not arg.isdigit() or int(arg) < 1:
        raise ConfigError(f"rule {spec!r}: expected a positive whole number after ':', got {arg!r}")
    return int(arg)


def _text(spec: str, arg: str) -> str:
    if not arg.strip():
        raise ConfigError(f"rule {spec!r}: expected the text after ':', e.g. 'prefix:ANSWER:'")
    return arg


_ARG_RULES: dict[str, tuple[Callable[..., str | None], Callable[[str, str], Any], str, str]] = {
    # name: (check, argument parser, instruction, example argument)
    "max_words": (max_words, _positive_int, "Use at most {arg} words.", "6"),
    "prefix": (prefix, _text, "Start the answer with {arg!r}.", "ANSWER:"),
}

RULE_NAMES: tuple[str, ...] = tuple(sorted([*_PLAIN_RULES, *(f"{name}:<arg>" for name in _ARG_RULES)]))
"""The rule names a task may use; ``<arg>`` marks where the argument goes (``max_words:6``)."""


# ---------------------------------------------------------------- parsing
@dataclass(frozen=True)
class Rule:
    """One parsed rule: its spec as written, its name, its argument and the check to run.

    Example:
        >>> rule = parse_rule("max_words:3")
        >>> rule.name, rule.arg, rule.check("one two three four")
        ('max_words', 3, 'The answer must be at most 3 words; it had 4.')
    """

    spec: str
    name: str
    arg: Any
    check: RuleCheck
    instruction: str


def parse_rule(spec: str) -> Rule:
    """Turn ``"one_word"`` or ``"max_words:6"`` into a ``Rule``; ConfigError names the known rules."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"a rule must be a non-empty string such as 'one_word', got {spec!r}")
    name, sep, arg = spec.partition(":")
    if name in _PLAIN_RULES:
        if sep:
            raise ConfigError(f"rule {name!r} takes no argument, got {spec!r}")
        fn, instruction = _PLAIN_RULES[name]
        return Rule(spec, name, None, fn, instruction)
    if name in _ARG_RULES:
        fn, parse_arg, template, example = _ARG_RULES[name]
        if not sep:
            raise ConfigError(f"rule {name!r} needs an argument after ':', e.g. '{name}:{example}'")
        value = parse_arg(spec, arg)
        return Rule(spec, name, value, partial(fn, value=value), template.format(arg=value))
    raise ConfigError(f"unknown output rule {spec!r}; expected one of {', '.join(RULE_NAMES)}")


def parse_rules(rules: Any) -> list[Rule]:
    """Parse a task's rule list; ConfigError for anything but a non-empty list of known rules."""
    if isinstance(rules, str) or not isinstance(rules, Sequence) or not rules:
        raise ConfigError(f"expected 'rules' as a non-empty list of rule names (e.g. ['one_word']), got {rules!r}")
    parsed = [parse_rule(spec) for spec in rules]
    envelopes = [r.spec for r in parsed if r.name == "prefix"]
    if len(envelopes) > 1:
        raise ConfigError(f"at most one prefix rule per task (it is the answer's envelope), got {envelopes}")
    return parsed


def state_rules(rules: Sequence[str]) -> str:
    """The rules as instructions, one sentence each: what a system prompt would tell the model.

    Example:
        >>> state_rules(["max_words:6", "one_sentence"])
        'Use at most 6 words. Answer in a single sentence; do not explain.'
    """
    return " ".join(rule.instruction for rule in parse_rules(rules))


# ---------------------------------------------------------------- checking
def expected_answers(expected: Any) -> tuple[str, ...]:
    """Accepted answers as strings: one string or number, or a list of them (any one passes)."""
    items = expected if isinstance(expected, (list, tuple)) else (expected,)
    return tuple(str(item) for item in items if item is not None)


def rule_violations(rules: Sequence[str], answer: str) -> tuple[list[str], str]:
    """Every broken rule's message (the envelope first), and the answer's body inside the envelope.

    The body is the stripped answer with the ``prefix`` removed when it is there; the other rules and
    the content check judge the body, so ``"ANSWER: paris"`` is one word under ``prefix:ANSWER:``.

    Example:
        >>> rule_violations(["prefix:ANSWER:", "one_word"], "ANSWER: paris")
        ([], 'paris')
    """
    parsed = parse_rules(rules)
    body = answer.strip()
    violations: list[str] = []
    for rule in parsed:
        if rule.name == "prefix":
            problem = rule.check(body)
            if problem is None:
                body = body[len(rule.arg) :].strip()
            else:
                violations.append(problem)
    violations.extend(problem for rule in parsed if rule.name != "prefix" and (problem := rule.check(body)))
    return violations, body


def holds_answer(expected: str, text: str) -> bool:
    """Whether the words of ``expected`` appear as a contiguous run of whole words anywhere in ``text``.

    Looser than ``matches_normalised`` (no limit on the words around it): it judges whether a long
    answer that broke a length rule still had the right content, never the reward itself.
    """
    want, got = words(expected), words(text)
    n = len(want)
    return n > 0 and any(got[i : i + n] == want for i in range(len(got) - n + 1))


def check_rules(rules: Sequence[str], answer: str, expected: Any, *, reveal: bool = True) -> tuple[float, str]:
    """Score ``answer``: 1.0 when every rule holds and the content is right, else 0.0 with the reasons.

    Args:
        rules: rule specs such as ``["one_word", "lowercase", "max_words:6"]``.
        answer: the model's answer.
        expected: the accepted answer(s); the content is right when the body matches one of them
            under ``matches_normalised`` (a short sentence around the answer passes unless a rule
            forbids it).
        reveal: name the expected answer when the content is wrong. ``TaskEnv`` passes False and lets
            the task's feedback mode decide.

    Returns:
        ``(reward, feedback)``: feedback is empty on success; otherwise one sentence per broken rule,
        then whether the content was right. When a rule broke, a right answer buried in a long reply
        counts as right content (``holds_answer``): the feedback then blames the form, not the
        knowledge.
    """
    accepted = expected_answers(expected)
    if not accepted:
        raise ConfigError(f"check_rules needs at least one expected answer, got {expected!r}")
    violations, body = rule_violations(rules, answer)
    if not violations and any(matches_normalised(item, body) for item in accepted):
        return 1.0, ""
    if violations and any(holds_answer(item, body) for item in accepted):
        return 0.0, " ".join([*violations, "The content was right."])
    verdict = "The content was wrong." if violations else "Every rule was followed, but the content was wrong."
    if reveal:
        first = accepted[0].strip()
        verdict += f" The expected answer is: {first}" + ("" if first.endswith((".", "!", "?")) else ".")
    return 0.0, " ".join([*violations, verdict])


# ---------------------------------------------------------------- the task checker
def check_task(task: Any, answer: str) -> tuple[float, str]:
    """The ``rules`` entry of ``evolve.envs.tasks.CHECKERS``: ``task.meta["rules"]`` against ``task.answer``."""
    return check_rules(task.meta.get("rules"), answer, task.answer, reveal=False)


def validate_task(task: Any) -> None:
    """Refuse a ``rules`` task whose rules are missing or unknown, or whose answer is empty.

    Raises:
        ConfigError: naming the task, what was expected and what arrived.
    """
    where = f"task {task.id!r}"
    rules = task.meta.get("rules") if isinstance(task.meta, Mapping) else None
    try:
        parse_rules(rules)
    except ConfigError as exc:
        raise ConfigError(f"{where}: the rules checker needs meta 'rules': {exc}") from None
    items = task.answer if isinstance(task.answer, (list, tuple)) else (task.answer,)
    if not items or not all(_is_answer(item) for item in items):
        raise ConfigError(
            f"{where}: 'answer' must be a non-empty string, a number or a list of them, got {task.answer!r}"
        )


def _is_answer(item: Any) -> bool:
    return not isinstance(item, bool) and isinstance(item, (str, int, float)) and bool(str(item).strip())
