"""Consolidation: episodes grouped by task and distilled into strategies, by rule or by a model
(docs/design/decisions.md, "Consolidation")."""

from __future__ import annotations

import dataclasses
import doctest
import logging
import os
import random
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select

import memory.upkeep.consolidation
from connectors.chat import ChatClient
from connectors.embedders import HashEmbedder
from connectors.errors import ConfigError, ConnectorError, ParseError
from connectors.fakes import ScriptedChat
from connectors.types import Message
from memory import prompts
from memory.storage.records import MemoryItem
from memory.storage.schema import memory_items
from memory.store import MemoryStore
from memory.upkeep.consolidation import Strategy, consolidate, consolidate_messages, distil, group_episodes
from memory.write.writer import WriteEntry, cheap_experience, lesson_experience

GOLDEN = Path(__file__).parent / "golden" / "consolidation.txt"
TENANT = "Zürich-Nordhafen-Logistik-Team-07 / Türcodes"
OTHER = "Équipe-Marseille-Vieux-Port-Entrepôt-Sud-12"
DOOR = "What is the door code of the north storage room?"
DOOR_AGAIN = "North storage room: which code opens the door?"
BADGE = "Which visitor badge colour does the Quartz laboratory use?"
EMBEDDER = HashEmbedder(dim=64)


def attempt(
    item_id: str, intent: str, answer: str, *, success: bool, q: float = 0.0, ns: str = TENANT, at: float = 0.0
) -> MemoryItem:
    """An episode as the cheap writer stores it; a failure keeps its answer (``failure_keeps="both"``)."""
    feedback = "Correct." if success else "Wrong. The expected answer is: 4471."
    text = cheap_experience(
        intent, trajectory=f"Looked it up in the facilities wiki\nAnswer given: {answer}", feedback=feedback,
        success=success, keeps="both",
    )  # fmt: skip
    return MemoryItem(item_id, ns, intent, text, q, 1, at, {"success": success})


def door_group() -> list[MemoryItem]:
    return [
        attempt("ep-01", DOOR, "The code is 4471.", success=True, q=0.62, at=1.0),
        attempt("ep-02", DOOR_AGAIN, "4471", success=True, q=0.48, at=2.0),
        attempt("ep-03", DOOR, "The code is 4471.", success=True, q=0.55, at=3.0),
        attempt("ep-04", DOOR, "1234", success=False, q=-0.3, at=4.0),
    ]


def vectors_of(items: list[MemoryItem]) -> np.ndarray:
    return EMBEDDER.embed([it.intent for it in items])


def ids_of(groups: list[list[int]], items: list[MemoryItem]) -> list[set[str]]:
    return [{items[i].id for i in g} for g in groups]


# ---------------------------------------------------------------- Strategy
def test_a_strategy_renders_as_one_short_experience_and_refuses_an_empty_field() -> None:
    s = Strategy("Door codes", "asked for a door code", "answer 4471", "answering 1234", ("ep-2", "ep-1", "ep-2"))
    assert s.sources == ("ep-1", "ep-2")
    assert s.text() == "Strategy: Door codes\nWhen: asked for a door code\nDo: answer 4471\nAvoid: answering 1234"
    assert "Avoid" not in dataclasses.replace(s, avoid="").text()
    with pytest.raises(ConfigError, match=r"Strategy.do must be a non-empty string"):
        Strategy("Door codes", "asked for a door code", "  ")


# ---------------------------------------------------------------- grouping
def test_intent_groups_join_paraphrases_and_keep_look_alikes_apart() -> None:
    items = [
        *door_group(),
        attempt("ep-05", DOOR, "9902", success=True),  # same words, but known to be another room's task
        attempt("ep-06", DOOR, "9902", success=True),
        attempt("ep-07", DOOR, "9902", success=True),
    ]
    intents = ["task-north"] * 4 + ["task-south"] * 3
    groups = group_episodes(items, vectors_of(items), min_size=3, similarity=0.98, intents=intents)
    assert ids_of(groups, items) == [{"ep-01", "ep-02", "ep-03", "ep-04"}, {"ep-05", "ep-06", "ep-07"}]


def test_an_intent_id_carried_by_the_item_is_its_group() -> None:
    @dataclasses.dataclass(frozen=True)
    class StoredItem(MemoryItem):
        intent_id: str | None = None

    items = [StoredItem(**vars(it), intent_id="task-north") for it in door_group()]
    items[1] = dataclasses.replace(items[1], intent_id="task-other")
    groups = group_episodes(items, np.eye(4, 8), min_size=1, similarity=0.98)  # orthogonal vectors: no neighbours
    assert ids_of(groups, items) == [{"ep-01", "ep-03", "ep-04"}, {"ep-02"}]


def test_without_intents_neighbours_above_the_similarity_group_successes_and_failures_together() -> None:
    items = [*door_group(), *(attempt(f"ep-b{i}", BADGE, "green", success=i > 0) for i in range(3))]
    items.append(attempt("ep-x", "Book a meeting room for Friday afternoon.", "Room 4", success=True))
    vecs = np.array([[1, 0, 0]] * 4 + [[0, 1, 0]] * 3 + [[0, 0, 1]], dtype=np.float32)
    vecs[1] = [0.99, 0.141, 0]  # a paraphrase: cosine 0.99 with the others
    groups = group_episodes(items, vecs, min_size=1, similarity=0.98)
    assert ids_of(groups, items) == [{"ep-01", "ep-02", "ep-03", "ep-04"}, {"ep-b0", "ep-b1", "ep-b2"}, {"ep-x"}]
    assert {items[i].success for i in groups[0]} == {True, False}
    assert group_episodes(items, vecs, min_size=1, similarity=0.995)[0] == [0, 2, 3]  # the paraphrase left out


def test_a_chain_of_look_alikes_does_not_merge_two_tasks() -> None:
    a, b, c = (np.array([np.cos(t), np.sin(t)]) for t in (0.0, 0.15, 0.30))  # cos(a,b)=cos(b,c)=0.989, cos(a,c)=0.955
    items = [attempt(f"ep-{i}", DOOR, "4471", success=True) for i in range(3)]
    groups = group_episodes(items, np.stack([a, b, c]), min_size=1, similarity=0.98)
    assert len(groups) == 2 and all(not {0, 2} <= set(g) for g in groups)


def test_groups_below_min_size_and_groups_of_one_are_skipped() -> None:
    items = [*door_group(), attempt("ep-x", "Book a meeting room for Friday afternoon.", "Room 4", success=True)]
    vecs = np.array([[1.0, 0.0]] * 4 + [[0.0, 1.0]])
    assert ids_of(group_episodes(items, vecs, min_size=2, similarity=0.98), items) == [
        {"ep-01", "ep-02", "ep-03", "ep-04"}
    ]
    assert group_episodes(items, vecs, min_size=5, similarity=0.98) == []
    assert consolidate(items[-1:], vecs[-1:], min_size=1) != []  # a group of one distils when allowed
    assert consolidate(items[-1:], vecs[-1:]) == []  # and is skipped by default (min_size=3)


def test_namespaces_never_share_a_group_and_superseded_episodes_are_left_out() -> None:
    mine = door_group()
    theirs = [dataclasses.replace(it, id=f"other-{it.id}", namespace=OTHER) for it in mine]
    stale = dataclasses.replace(mine[0], id="ep-old", valid_to=5.0, superseded_by="ep-01")
    items = [*mine, *theirs, stale]
    groups = group_episodes(items, np.ones((len(items), 4)), min_size=1, similarity=0.98)
    assert sorted(map(sorted, ids_of(groups, items))) == [
        ["ep-01", "ep-02", "ep-03", "ep-04"], [f"other-ep-0{i}" for i in range(1, 5)]
    ]  # fmt: skip


def test_grouping_and_consolidation_do_not_depend_on_the_input_order() -> None:
    items = [*door_group(), *(attempt(f"ep-b{i}", BADGE, "green", success=True) for i in range(3))]
    items += [dataclasses.replace(it, id=f"o-{it.id}", namespace=OTHER) for it in items]
    vecs = vectors_of(items)
    first = consolidate(items, vecs, similarity=0.9)
    order = list(range(len(items)))
    random.Random(7).shuffle(order)
    shuffled = [items[i] for i in order]
    again = group_episodes(shuffled, vecs[order], min_size=3, similarity=0.9)
    base = group_episodes(items, vecs, min_size=3, similarity=0.9)
    assert sorted(map(sorted, ids_of(again, shuffled))) == sorted(map(sorted, ids_of(base, items)))
    assert consolidate(shuffled, vecs[order], similarity=0.9) == first == consolidate(items, vecs, similarity=0.9)
    assert len(first) == 4


def test_bad_inputs_are_refused_saying_what_was_expected() -> None:
    items = door_group()
    with pytest.raises(ConfigError, match=r"vectors must be one row per item's intent: shape \(4, dim\)"):
        group_episodes(items, np.ones((3, 8)), min_size=1, similarity=0.9)
    with pytest.raises(ConfigError, match=r"min_size must be an integer >= 1"):
        group_episodes(items, np.ones((4, 8)), min_size=0, similarity=0.9)
    with pytest.raises(ConfigError, match=r"similarity must be a cosine in \[-1, 1\]"):
        group_episodes(items, np.ones((4, 8)), min_size=1, similarity=1.5)
    with pytest.raises(ConfigError, match=r"intents must be one intent group id"):
        group_episodes(items, np.ones((4, 8)), min_size=1, similarity=0.9, intents=["task-north"])
    with pytest.raises(ConfigError, match=r"distil: expected a group of at least one episode"):
        distil([], llm=None)


# ---------------------------------------------------------------- the rule-based fallback
def test_door_codes_the_successes_answer_is_what_to_do_and_the_failures_what_to_avoid() -> None:
    s = distil(door_group(), llm=None)
    assert s is not None
    assert s.do == 'answer "The code is 4471", as the successful attempts did'  # two of three said it so
    assert s.avoid == 'answering "1234", as a failed attempt did'
    assert s.applies_when == f"a task like: {DOOR}" and s.title == DOOR.rstrip("?")
    assert s.sources == ("ep-01", "ep-02", "ep-03", "ep-04")
    assert "4471" in s.text() and "1234" not in s.do


def test_the_most_common_answer_wins_and_between_equals_the_higher_q() -> None:
    common = [attempt(f"ep-{i}", DOOR, "4471", success=True, q=0.1) for i in range(2)]
    rare = attempt("ep-9", DOOR, "9902", success=True, q=0.9)
    assert "4471" in distil([*common, rare], llm=None).do  # type: ignore[union-attr]
    assert "9902" in distil([common[0], rare], llm=None).do  # type: ignore[union-attr]


def test_a_failure_that_gave_the_right_answer_is_not_a_mistake_to_avoid() -> None:
    late = attempt("ep-05", DOOR, "4471", success=False)  # right code, failed for another reason
    s = distil([*door_group(), late], llm=None)
    assert s is not None and "4471" not in s.avoid and "1234" in s.avoid


def test_lessons_written_by_a_model_feed_the_rule_based_strategy() -> None:
    steps = "1. Open the facilities wiki.\n2. Search 'north storage'.\n3. Read the code from the access table."
    win = lesson_experience(steps, trajectory="searched the wiki", feedback="Correct.", success=True)
    lesson = "What went wrong: used last year's code\nWhat to avoid: codes from old e-mails\nCorrect approach: unknown"
    loss = lesson_experience(lesson, trajectory="(not kept)", feedback="Wrong.", success=False)
    group = [
        MemoryItem("ep-1", TENANT, DOOR, str(win), 0.5, 2, 1.0, {"success": True}),
        MemoryItem("ep-2", TENANT, DOOR, str(loss), -0.2, 1, 2.0, {"success": False}),
    ]
    s = distil(group, llm=None)
    assert s is not None and s.do == steps and s.avoid == "codes from old e-mails"


def test_without_a_success_the_revealed_answer_is_what_to_do_and_without_one_nothing_is_distilled() -> None:
    wrong = [attempt(f"ep-{i}", DOOR, code, success=False) for i, code in enumerate(["1234", "9999"])]
    s = distil(wrong, llm=None)
    assert s is not None and s.do == 'answer "4471", which the feedback on failed attempts revealed'
    assert "1234" in s.avoid and "9999" in s.avoid
    silent = [dataclasses.replace(w, experience="Outcome: failure\nFeedback: Wrong.") for w in wrong]
    assert distil(silent, llm=None) is None


def test_unicode_intents_group_and_render_intact() -> None:
    intent = "Welcher Türcode öffnet das Lager „Nordhafen“ in Zürich? 倉庫のドアコード"
    items = [attempt(f"ep-{i}", intent, "4471", success=True) for i in range(3)]
    items.append(attempt("ep-3", "Quelle couleur de badge pour le laboratoire « Quartz » ?", "vert", success=True))
    [s] = consolidate(items, vectors_of(items))
    assert s.title == intent.rstrip("?") and intent in s.text() and s.sources == ("ep-0", "ep-1", "ep-2")


def test_the_module_examples_run() -> None:
    assert doctest.testmod(memory.upkeep.consolidation).failed == 0


# ---------------------------------------------------------------- with a model
REPLY = """Here is the strategy.

**Title:** North storage door code
**Applies when:** someone asks for the code of the north storage room
**Do:** answer 4471, the current code
(confirmed by three successes)
**Avoid:** 1234, the code of the old lock"""


def test_a_well_formed_reply_becomes_the_strategy_in_one_call() -> None:
    chat = ScriptedChat([REPLY])
    s = distil(door_group(), llm=ChatClient(chat))
    assert s == Strategy(
        "North storage door code", "someone asks for the code of the north storage room",
        "answer 4471, the current code (confirmed by three successes)", "1234, the code of the old lock",
        ("ep-01", "ep-02", "ep-03", "ep-04"),
    )  # fmt: skip
    [(messages, params)] = chat.calls
    assert params["temperature"] == 0.0 and messages[0].content == prompts.CONSOLIDATE_SYSTEM
    assert "[1] success, Q 0.62" in messages[1].content and "[4] failure, Q -0.30" in messages[1].content


def test_avoid_may_say_nothing_and_none_means_nothing_to_learn() -> None:
    reply = "Title: Door code\nApplies when: asked for the north door code\nDo: answer 4471\nAvoid: nothing."
    assert distil(door_group(), llm=ScriptedChat([reply])).avoid == ""  # type: ignore[union-attr]
    assert distil(door_group(), llm=ScriptedChat(["NONE"])) is None


def test_a_malformed_reply_gives_none_and_a_log_line_or_a_parse_error_when_strict(
    caplog: pytest.LogCaptureFixture,
) -> None:
    garbled = "The successes all used 4471 while the failure used 1234."
    with caplog.at_level(logging.WARNING, logger="memory.upkeep.consolidation"):
        assert distil(door_group(), llm=ScriptedChat([garbled], name="tiny-critic")) is None
    assert "tiny-critic's reply did not parse" in caplog.text and "ep-04" in caplog.text
    with pytest.raises(ParseError, match="missing") as raised:
        distil(door_group(), llm=ScriptedChat([garbled]), strict=True)
    assert raised.value.raw == garbled


def test_a_failing_model_gives_none_and_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    def down(messages: list[Message]) -> str:
        raise ConnectorError("provider unavailable", retryable=False)

    with caplog.at_level(logging.WARNING, logger="memory.upkeep.consolidation"):
        assert consolidate(door_group(), np.ones((4, 4)), llm=ScriptedChat(down)) == []
    assert "provider unavailable" in caplog.text
    with pytest.raises(ConnectorError):
        distil(door_group(), llm=ScriptedChat(down), strict=True)


def render_all() -> str:
    fields = {
        "count": 2, "intent": "<intent>", "episodes": "<episodes>", "index": 1, "outcome": "<outcome>", "q": 0.5,
        "experience": "<experience>", "title": "<title>", "applies_when": "<applies_when>", "do": "<do>",
        "avoid": "<avoid>", "answer": "<answer>",
    }  # fmt: skip
    names = [
        "CONSOLIDATE_SYSTEM", "CONSOLIDATE_PROMPT", "CONSOLIDATE_EPISODE", "STRATEGY_TEXT", "STRATEGY_AVOID",
        "RULE_APPLIES_WHEN", "RULE_DO_ANSWER", "RULE_DO_REVEALED", "RULE_AVOID_ANSWER",
    ]  # fmt: skip
    out = "".join(f"===== {n} =====\n{getattr(prompts, n).format(**fields)}\n" for n in names)
    sent = "\n".join(f"--- {m.role} ---\n{m.content}" for m in consolidate_messages(door_group()))
    return out + f"===== the door-code group as sent =====\n{sent}\n"


def test_prompts_match_the_golden_snapshot() -> None:
    """Prompt changes must show up as a reviewed diff: regenerate with EVOLVE_UPDATE_GOLDEN=1."""
    rendered = render_all()
    if os.environ.get("EVOLVE_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(rendered, encoding="utf-8")
    assert rendered == GOLDEN.read_text(encoding="utf-8")


# ---------------------------------------------------------------- from a real store
def test_episodes_written_to_a_store_consolidate_per_task_and_per_tenant(tmp_path: Path) -> None:
    def entry(intent: str, answer: str, ok: bool, ns: str, task: str) -> WriteEntry:
        feedback = "Correct." if ok else "Wrong. The expected answer is: 4471."
        return WriteEntry(
            intent, trajectory=f"Answer given: {answer}", feedback=feedback, success=ok, namespace=ns, task=task,
            failure_keeps="both",
        )  # fmt: skip

    door = [(DOOR, "4471", True), (DOOR_AGAIN, "4471", True), (DOOR, "4471", True), (DOOR, "1234", False)]
    with MemoryStore(f"sqlite:///{tmp_path / 'm.db'}", embedder=EMBEDDER) as store:
        store.write_many([entry(i, a, ok, ns, "door · north storage") for ns in (TENANT, OTHER) for i, a, ok in door])
        store.write_many([entry(BADGE, "green", True, TENANT, "badge · Quartz")] * 2)  # too few to consolidate
        items = store.items(TENANT) + store.items(OTHER)
        with store.engine.connect() as conn:
            stored = dict(conn.execute(select(memory_items.c.id, memory_items.c.intent_id)).all())
    found = consolidate(items, vectors_of(items), intents=[stored[it.id] for it in items])
    assert len(found) == 2  # one per tenant; the badge task has two episodes only
    for s in found:
        namespaces = {it.namespace for it in items if it.id in s.sources}
        assert len(s.sources) == 4 and len(namespaces) == 1
        assert "4471" in s.do and "1234" in s.avoid and "1234" not in s.do


def test_a_checkers_stated_correct_call_is_what_to_do_when_no_attempt_succeeded() -> None:
    feedback = "Wrong: wrong type for 'base'. A correct call: calculate_triangle_area(base=10, height=5)"
    failures = [
        MemoryItem(f"b{i}", "default", "Area of a triangle, base 10 height 5?", f"Outcome: failure\nFeedback: {feedback}",
                   -0.2, 1, float(i), {"success": False})
        for i in range(2)
    ]  # fmt: skip
    s = distil(failures, llm=None)
    assert (
        s is not None
        and s.do
        == 'answer "calculate_triangle_area(base=10, height=5)", which the feedback on failed attempts revealed'
    )
