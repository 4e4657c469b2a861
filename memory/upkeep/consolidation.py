"""Consolidation: groups of related episodes distilled into strategies (docs/design/decisions.md, "Consolidation").

An episode memory says what one attempt did; a **strategy** says what to do on a kind of task, learned
from several attempts, successes and failures together (as ReasoningBank's items and ACE's playbook
bullets do). Two steps, both pure functions of their inputs:

1. ``group_episodes`` finds groups of episodes about one task: the same intent group when the caller
   knows it (``memory_items.intent_id``; grouping is identity, not resemblance), else the nearest
   neighbours of an episode above a cosine ``similarity``; never across namespaces.
2. ``distil`` turns one group into a ``Strategy``: with a model, one call (``prompts.CONSOLIDATE_PROMPT``)
   whose labelled answer is parsed leniently; without one, by rule: the successes' most common answer
   (ties: the higher summed Q) is what to do, the failures' answers or lessons are what to avoid, and
   the group's most common intent says when it applies. Storing strategies is the store's business.

Example:
    >>> def episode(i, answer, ok):
    ...     text = f"Trajectory (condensed):\\nAnswer given: {answer}"
    ...     return MemoryItem(f"m{i}", "default", "Door code of the north store?", text, 0.5, 1, 0.0, {"success": ok})
    >>> group = [episode(1, "4471", True), episode(2, "4471", True), episode(3, "1234", False)]
    >>> print(distil(group, llm=None).text())
    Strategy: Door code of the north store
    When: a task like: Door code of the north store?
    Do: answer "4471", as the successful attempts did
    Avoid: answering "1234", as a failed attempt did
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from connectors.chat import ChatModel
from connectors.embedders import normalise_rows
from connectors.errors import ConfigError, ParseError
from connectors.types import Message
from memory import prompts
from memory.storage.records import MemoryItem
from memory.upkeep.supersession import ANSWER_GIVEN, FACT_KEY, REVEALED, normalise_fact
from memory.write.writer import condense

log = logging.getLogger(__name__)

CONSOLIDATE_SIMILARITY = 0.98  # MemoryConfig.group_threshold: MiniLM merges no two different tasks at it
MAX_EPISODES = 12  # the most episodes of a group shown to the model
EPISODE_LIMIT = 600  # the most characters of one episode's experience shown to the model
FIELD_LIMIT = 600  # the most characters of a strategy's applies_when, do and avoid
TITLE_LIMIT = 80  # the most characters of a strategy's title
AVOID_MAX = 3  # the most distinct mistakes the rule-based avoid lists
CONSOLIDATE_MAX_TOKENS = 300
CHUNK = 1024  # rows of the similarity matrix computed at once (memory: CHUNK × n floats)


@dataclass(frozen=True)
class Strategy:
    """What to do on a kind of task, distilled from several episodes.

    Attributes:
        title: a short name for it.
        applies_when: the kind of task or situation it is for.
        do: what to do (concrete values, names or steps).
        avoid: what to avoid; empty when nothing is known to go wrong.
        sources: the ids of the episodes it was distilled from, sorted.

    Example:
        >>> s = Strategy("Door codes", "asked for a door code", "answer 4471", "", ("m2", "m1"))
        >>> s.sources, s.text()
        (('m1', 'm2'), 'Strategy: Door codes\\nWhen: asked for a door code\\nDo: answer 4471')
    """

    title: str
    applies_when: str
    do: str
    avoid: str = ""
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("title", "applies_when", "do", "avoid"):
            value = getattr(self, name)
            if not isinstance(value, str) or (name != "avoid" and not value.strip()):
                raise ConfigError(
                    f"Strategy.{name} must be a non-empty string (avoid: may be empty), got {value!r:.120}"
                )
        if isinstance(self.sources, str) or not all(isinstance(s, str) for s in self.sources):
            raise ConfigError(f"Strategy.sources must be a sequence of episode ids, got {self.sources!r:.120}")
        object.__setattr__(self, "sources", tuple(sorted(set(self.sources))))

    def text(self) -> str:
        """The strategy as one memory experience: what a model sees in its prompt."""
        out = prompts.STRATEGY_TEXT.format(title=self.title, applies_when=self.applies_when, do=self.do)
        return out + "\n" + prompts.STRATEGY_AVOID.format(avoid=self.avoid) if self.avoid else out


def consolidate(
    items: Sequence[MemoryItem],
    vectors: np.ndarray,
    *,
    llm: ChatModel | None = None,
    min_size: int = 3,
    similarity: float = CONSOLIDATE_SIMILARITY,
    intents: Sequence[str | None] | None = None,
) -> list[Strategy]:
    """``group_episodes`` then ``distil`` each group: the strategies, sorted by title then sources.

    The same inputs (in any order) give the same strategies; a group that yields none is left out.

    Example:
        >>> rows = [MemoryItem(f"m{i}", "default", "Code?", "Answer given: 7", 0.0, 0, 0.0, {"success": True})
        ...         for i in range(3)]
        >>> [s.do for s in consolidate(rows, np.ones((3, 4)))]
        ['answer "7", as the successful attempts did']
    """
    groups = group_episodes(items, vectors, min_size=min_size, similarity=similarity, intents=intents)
    found = [distil([items[i] for i in g], llm=llm) for g in groups]
    return sorted((s for s in found if s is not None), key=lambda s: (s.title.casefold(), s.title, s.sources))


# ---------------------------------------------------------------- grouping
def group_episodes(
    items: Sequence[MemoryItem],
    vectors: np.ndarray,
    *,
    min_size: int,
    similarity: float,
    intents: Sequence[str | None] | None = None,
) -> list[list[int]]:
    """Groups of related episodes to consolidate, as positions in ``items`` (each ascending; groups by
    their first position).

    Episodes of one namespace only ever share a group. Those with an intent group (``intents[i]``, e.g.
    ``memory_items.intent_id``, or an ``intent_id`` attribute of the item) are grouped by it, and with
    no other. The others are grouped by resemblance: the episode with the most neighbours (cosine of
    ``vectors`` >= ``similarity``; ties: the smaller id) takes those of them that are also neighbours of
    each other, then the next among those left: every two episodes of a group are neighbours, so no
    chain of look-alikes merges two tasks. Successes and failures group alike; superseded memories
    are left out; groups smaller than ``min_size`` are skipped. Membership does not depend on the input
    order. Cost: O(n²) comparisons among the episodes without an intent group.

    Raises:
        ConfigError: ``vectors`` is not one row per item, ``intents`` not one per item, ``min_size`` < 1
            or ``similarity`` outside [-1, 1].
    """
    vecs = _check_inputs(items, vectors, min_size, similarity, intents)
    keyed: dict[tuple[str, str], list[int]] = {}
    loose: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        if not item.valid:
            continue
        intent = intents[i] if intents is not None else getattr(item, "intent_id", None)
        if intent is not None:
            keyed.setdefault((item.namespace, str(intent)), []).append(i)
        else:
            loose.setdefault(item.namespace, []).append(i)
    groups = list(keyed.values())
    for rows in loose.values():
        groups += _neighbour_groups(rows, [items[i].id for i in rows], vecs[rows], similarity)
    return sorted(sorted(g) for g in groups if len(g) >= min_size)


def _check_inputs(
    items: Sequence[MemoryItem], vectors: np.ndarray, min_size: int, similarity: float, intents: object
) -> np.ndarray:
    """``vectors`` as float32 rows, after checking every argument of ``group_episodes``."""
    if isinstance(min_size, bool) or not isinstance(min_size, int) or min_size < 1:
        raise ConfigError(f"min_size must be an integer >= 1 (episodes per group), got {min_size!r}")
    if isinstance(similarity, bool) or not isinstance(similarity, (int, float)) or not -1.0 <= similarity <= 1.0:
        raise ConfigError(f"similarity must be a cosine in [-1, 1], got {similarity!r}")
    vecs = np.asarray(vectors, dtype=np.float32)
    if vecs.ndim != 2 or len(vecs) != len(items):
        raise ConfigError(f"vectors must be one row per item's intent: shape ({len(items)}, dim), got {vecs.shape}")
    if intents is not None and (
        isinstance(intents, str) or not isinstance(intents, Sequence) or len(intents) != len(items)
    ):
        raise ConfigError(f"intents must be one intent group id (or None) per item: {len(items)} expected")
    return vecs


def _neighbour_groups(rows: list[int], ids: list[str], vecs: np.ndarray, similarity: float) -> list[list[int]]:
    """``rows`` grouped by resemblance (``group_episodes``): each seed (most neighbours first, then the
    smaller id) takes, closest first, the neighbours left that are neighbours of every member so far."""
    unit = normalise_rows(vecs)
    n = len(rows)
    close = np.zeros((n, n), dtype=bool)
    for start in range(0, n, CHUNK):
        close[start : start + CHUNK] = unit[start : start + CHUNK] @ unit.T >= similarity - 1e-6
    np.fill_diagonal(close, True)
    degree = close.sum(axis=1)
    taken = np.zeros(n, dtype=bool)
    groups = []
    for seed in sorted(range(n), key=lambda j: (-int(degree[j]), ids[j], j)):
        if taken[seed]:
            continue
        near = np.flatnonzero(close[seed] & ~taken).tolist()
        sim = dict(zip(near, (unit[near] @ unit[seed]).tolist(), strict=True))
        members = [seed]
        for j in sorted(near, key=lambda j: (-sim[j], ids[j], j)):
            if j != seed and close[j, members].all():
                members.append(j)
        taken[members] = True
        groups.append([rows[m] for m in members])
    return groups


# ---------------------------------------------------------------- distilling with a model
def distil(group: Sequence[MemoryItem], *, llm: ChatModel | None, strict: bool = False) -> Strategy | None:
    """One group's strategy: written by ``llm`` (one call) or, with none, by rule (``rule_strategy``).

    A model's reply that does not parse, or a model call that fails, gives None and a warning in the
    log; a reply of ``NONE`` (nothing to learn) gives None. With ``strict``, both raise instead.

    Raises:
        ConfigError: the group is empty.
        ParseError: only with ``strict``: the reply did not parse (``.raw`` holds it).
    """
    if not group:
        raise ConfigError("distil: expected a group of at least one episode, got none")
    if llm is None:
        return rule_strategy(group)
    sources = tuple(item.id for item in group)
    try:
        raw = llm.complete(consolidate_messages(group), temperature=0.0, max_tokens=CONSOLIDATE_MAX_TOKENS).text
    except Exception as e:  # any backend failure: this group waits for the next consolidation
        if strict:
            raise
        log.warning("consolidation: %s failed (%s: %s); no strategy for %s", llm.name, type(e).__name__, e, sources)
        return None
    try:
        strategy = parse_strategy(raw, sources)
    except ParseError as e:
        if strict:
            raise
        log.warning("consolidation: %s's reply did not parse (%s); no strategy for %s", llm.name, e, sources)
        return None
    if strategy is None:
        log.info("consolidation: %s found nothing to learn in %s", llm.name, sources)
    return strategy


def consolidate_messages(group: Sequence[MemoryItem]) -> list[Message]:
    """The messages that ask a model to distil ``group`` (at most ``MAX_EPISODES`` of it shown)."""
    shown = _shown(group)
    episodes = "\n\n".join(
        prompts.CONSOLIDATE_EPISODE.format(
            index=i, outcome=_OUTCOME[item.success], q=item.q, intent=condense(item.intent, 300),
            experience=condense(item.experience, EPISODE_LIMIT) or "(empty)",
        )
        for i, item in enumerate(shown, 1)
    )  # fmt: skip
    prompt = prompts.CONSOLIDATE_PROMPT.format(count=len(shown), intent=_shared_intent(group), episodes=episodes)
    return [Message("system", prompts.CONSOLIDATE_SYSTEM), Message("user", prompt)]


_OUTCOME = {True: "success", False: "failure", None: "outcome unknown"}
_LABEL = re.compile(
    r"^[\s#>*_•\-\d.)]*(title|applies[ _-]+when|when|do|avoid)[\s*_]*:[\s*_]*(.*?)[\s*_]*$", re.IGNORECASE
)
_FIELDS = {"title": "title", "when": "applies_when", "do": "do", "avoid": "avoid"}
_NOTHING = {"", "nothing", "none", "n/a", "na", "-", "—", "nothing known", "unknown"}


def parse_strategy(raw: str, sources: Sequence[str]) -> Strategy | None:
    """The strategy in a model's reply (labelled ``Title:``, ``Applies when:``, ``Do:``, ``Avoid:`` lines),
    or None when the reply is ``NONE``.

    Lenient: markdown around labels, chatter before them, values running on over several lines, and a
    repeated label (the last one wins) are accepted; ``Avoid`` may be missing or say "nothing".

    Raises:
        ParseError: no title, no ``Applies when`` or no ``Do`` (``.raw`` holds the reply).

    Example:
        >>> parse_strategy("**Title:** Door codes\\nApplies when: asked for a code\\nDo: say 4471", ["m1"]).do
        'say 4471'
    """
    text = str(raw or "").strip()
    if text.strip(".").upper() == "NONE":
        return None
    fields: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        match = _LABEL.match(line)
        if match:
            current = _FIELDS[re.split(r"[ _-]+", match.group(1).casefold())[-1]]
            fields[current] = [match.group(2)]
        elif not line.strip():
            current = None
        elif current is not None:
            fields[current].append(line.strip())
    values = {k: _clean(" ".join(v)) for k, v in fields.items()}
    if missing := [name for name in ("title", "applies_when", "do") if not values.get(name)]:
        raise ParseError(f"expected the labelled lines Title, Applies when and Do; missing {missing}", raw=text)
    avoid = values.get("avoid", "")
    avoid = "" if avoid.casefold().strip(".") in _NOTHING else avoid
    return _clipped(values["title"], values["applies_when"], values["do"], avoid, sources)


def _clean(value: str) -> str:
    """A parsed value without surrounding markdown, or empty when it is the format's placeholder."""
    value = " ".join(value.split()).strip("*_` ")
    return "" if value.startswith("<") and value.endswith(">") else value


def _shown(group: Sequence[MemoryItem]) -> list[MemoryItem]:
    """The episodes the model sees: successes by Q (at least half the room), then failures, then others."""
    by_q = sorted(group, key=lambda it: (-it.q, it.id))
    wins = [it for it in by_q if it.success is True]
    losses = [it for it in by_q if it.success is False]
    others = [it for it in by_q if it.success is None]
    wins = wins[: max(MAX_EPISODES // 2, MAX_EPISODES - len(losses))]
    losses = losses[: MAX_EPISODES - len(wins)]
    return wins + losses + others[: MAX_EPISODES - len(wins) - len(losses)]


# ---------------------------------------------------------------- distilling by rule
_STEPS = re.compile(r"^Reusable steps:[ \t]*\n(.*?)(?:\n[ \t]*\n[ \t]*Trajectory \(condensed\):|\Z)", re.S | re.M)
_TRAJECTORY = re.compile(r"^Trajectory \(condensed\):[ \t]*\n(.*?)(?:\nFeedback:|\Z)", re.S | re.M)


_FAILURE_LABELS = ("What to avoid", "What went wrong", "Correct approach")  # prompts.FAILURE_PROMPT's answer
_AVOID, _WRONG, _CORRECT = (re.compile(rf"^{label}:[ \t]*(.+)$", re.M) for label in _FAILURE_LABELS)
# Other ways a checker's feedback states the right answer (BFCL: "A correct call: f(x=1)"), on one line.
_STATED = re.compile(r"(?:The correct answer is|A correct call|Correct calls)[ \t]*:[ \t]*(\S.*)$", re.M | re.I)


def rule_strategy(group: Sequence[MemoryItem]) -> Strategy | None:
    """The strategy of ``group`` without a model, or None when no episode says what to do.

    - ``do``: the lesson the most successes share (ties: the higher summed Q, then the text). A success's
      lesson is the fact it states (``meta["fact"]`` or its ``Answer given:`` line), else its reusable
      steps, else its condensed trajectory. With no success: the correct answer the failures' feedback
      revealed, or their ``Correct approach:``.
    - ``avoid``: up to ``AVOID_MAX`` distinct mistakes of the failures, most common first: their
      ``What to avoid:`` or ``What went wrong:`` line, else the answer they gave (when it was kept and
      differs from the one to give).
    - ``applies_when`` and ``title``: the group's most common intent (ties: the earliest).
    """
    items = sorted(group, key=lambda it: it.id)
    wins = [it for it in items if it.success is True]
    losses = [it for it in items if it.success is False]
    do = _ranked([(_success_lesson(it), it.q) for it in wins]) or _ranked([(_correction(it), 0.0) for it in losses])
    if not do:
        return None
    right = normalise_fact(do[0][1])
    mistakes = [(_mistake(it, right), 0.0) for it in losses]
    avoid = "; ".join(text for text, _ in _ranked(mistakes)[:AVOID_MAX])
    intent = _shared_intent(items)
    when = prompts.RULE_APPLIES_WHEN.format(intent=intent)
    return _clipped(intent.rstrip("?!.:; "), when, do[0][0], avoid, [it.id for it in items])


Lesson = tuple[str, str] | None
"""A lesson as ``(text shown, what it says)``: two lessons saying the same count as one."""


def _ranked(lessons: Iterable[tuple[Lesson, float]]) -> list[tuple[str, str]]:
    """Distinct lessons, most common first (ties: higher summed Q, then the text); each shown as first met."""
    count: dict[str, int] = {}
    q: dict[str, float] = {}
    shown: dict[str, tuple[str, str]] = {}
    for lesson, value in lessons:
        if lesson is None:
            continue
        key = normalise_fact(lesson[1]) or lesson[1]
        count[key] = count.get(key, 0) + 1
        q[key] = q.get(key, 0.0) + value
        shown.setdefault(key, lesson)
    return [shown[k] for k in sorted(shown, key=lambda k: (-count[k], -q[k], k))]


def _answer(item: MemoryItem) -> str | None:
    """The answer the episode gave: ``meta["fact"]`` or its last ``Answer given:`` line."""
    fact = item.meta.get(FACT_KEY)
    given = ANSWER_GIVEN.findall(item.experience)
    answer = fact if isinstance(fact, str) else (given[-1] if given else "")
    return " ".join(answer.split()).rstrip(".") or None


def _success_lesson(item: MemoryItem) -> Lesson:
    answer = _answer(item)
    if answer:
        return prompts.RULE_DO_ANSWER.format(answer=answer), answer
    found = [m.group(1).strip() for m in (p.search(item.experience) for p in (_STEPS, _TRAJECTORY)) if m]
    text = next((t for t in found if t and t != "(empty)"), condense(item.experience, FIELD_LIMIT))
    return (text, text) if text else None


def _correction(item: MemoryItem) -> Lesson:
    if REVEALED in item.experience:
        answer = " ".join(item.experience.rsplit(REVEALED, 1)[1].split()).rstrip(".")
        if answer:
            return prompts.RULE_DO_REVEALED.format(answer=answer), answer
    stated = _STATED.findall(item.experience)
    if stated and (answer := " ".join(stated[-1].split()).rstrip(".")):
        return prompts.RULE_DO_REVEALED.format(answer=answer), answer
    return _line(_CORRECT, item.experience)


def _mistake(item: MemoryItem, right: str | None) -> Lesson:
    for pattern in (_AVOID, _WRONG):
        if (found := _line(pattern, item.experience)) is not None:
            return found
    answer = _answer(item)
    if answer and not _agrees(normalise_fact(answer), right):
        return prompts.RULE_AVOID_ANSWER.format(answer=answer), answer
    return None


def _agrees(a: str | None, b: str | None) -> bool:
    """Whether two normalised answers say the same: equal, or one is a whole-word part of the other
    ("4471" and "the code is 4471")."""
    if a is None or b is None:
        return False
    short, long = sorted((a, b), key=len)
    return re.search(rf"(?<!\w){re.escape(short)}(?!\w)", long) is not None


def _line(pattern: re.Pattern[str], text: str) -> Lesson:
    """The last line ``pattern`` labels, unless it says nothing ("unknown")."""
    found = [v.strip() for v in pattern.findall(text)]
    value = found[-1] if found else ""
    return None if value.casefold().strip(".") in _NOTHING else (value, value)


def _shared_intent(items: Sequence[MemoryItem]) -> str:
    """The group's most common intent (spacing collapsed; ties: the earliest written, then the id)."""
    texts = [" ".join(it.intent.split()) for it in sorted(items, key=lambda it: (it.created_at, it.id))]
    count = Counter(text.casefold() for text in texts)
    return max(texts, key=lambda text: count[text.casefold()])  # the first of the most common


def _clipped(title: str, applies_when: str, do: str, avoid: str, sources: Sequence[str]) -> Strategy:
    """A ``Strategy`` whose texts are cut to ``TITLE_LIMIT`` and ``FIELD_LIMIT``."""
    when, do, avoid = (_clip(t, FIELD_LIMIT) for t in (applies_when, do, avoid))
    return Strategy(_clip(title, TITLE_LIMIT), when, do, avoid, tuple(sources))


def _clip(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters (``…`` marks the cut)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0] if " " in text[: limit - 1] else text[: limit - 1]
    return cut.rstrip() + "…"
