"""Writing experiences: cheap mode, LLM mode, the fallback that never loses an attempt, the prompts."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from connectors.chat import ChatClient
from connectors.embedders import HashEmbedder
from connectors.errors import ConnectorError
from connectors.fakes import ScriptedChat
from connectors.types import Completion, Message
from memory import prompts
from memory.config import MemoryConfig
from memory.store import MemoryStore
from memory.write.writer import WriteEntry, compose_experience, compose_experiences, condense

GOLDEN = Path(__file__).parent / "golden" / "prompts.txt"
TRAJECTORY = "look around\n\n   go   north\nopen the door\nsay hello"


def test_condense_collapses_whitespace_and_keeps_head_and_tail() -> None:
    assert condense(TRAJECTORY) == "look around\ngo north\nopen the door\nsay hello"
    long = "\n".join(f"step {i}: did something useful" for i in range(400))
    short = condense(long, 600)
    assert len(short) <= 600
    assert short.startswith("step 0:") and short.endswith("step 399: did something useful")
    assert "characters omitted" in short


def test_cheap_mode_keeps_task_outcome_trajectory_and_feedback() -> None:
    written = compose_experience("open the door", trajectory=TRAJECTORY, feedback="door opened", success=True)
    assert written.mode == "cheap"
    assert written.experience == prompts.CHEAP_EXPERIENCE.format(
        task="open the door", outcome="success", trajectory=condense(TRAJECTORY), feedback="door opened"
    )
    failed = compose_experience("open the door", trajectory="", feedback="", success=False)
    assert "Outcome: failure" in failed.experience and "(empty)" in failed.experience


QUARTZ = "Visitor badge colour for the Quartz reception — north wing?"
WRONG, FEEDBACK = "Answer given: blue", "Wrong. The expected answer is: grey."


def test_a_failure_memory_keeps_the_feedback_not_the_wrong_answer_by_default(tmp_path: Path) -> None:
    with MemoryStore(f"sqlite:///{tmp_path}/m.db", embedder=HashEmbedder()) as store:
        failed, solved = store.write_many([
            WriteEntry(QUARTZ, trajectory=WRONG, feedback=FEEDBACK, success=False),
            WriteEntry("Badge colour at Ash?", trajectory="Answer given: red", feedback="Correct.", success=True),
        ])  # fmt: skip
        # byte for byte the text the benchmark measured (bench/results/seeds: q_memory_feedback_only)
        assert store.get(failed.id).experience == (
            f"Task: {QUARTZ}\nOutcome: failure\nTrajectory (condensed):\n(not kept)\nFeedback: {FEEDBACK}"
        )
        assert "Answer given: red" in store.get(solved.id).experience  # a success keeps its answer


@pytest.mark.parametrize(
    ("keeps", "trajectory", "feedback", "kept"),
    [
        ("both", WRONG, FEEDBACK, (WRONG, FEEDBACK)),
        ("attempt", WRONG, FEEDBACK, (WRONG, "Feedback: (not kept)")),
        ("feedback", WRONG, "", (WRONG,)),  # no feedback to keep: the attempt stays, no memory is blank
        ("attempt", "", FEEDBACK, (FEEDBACK,)),
    ],
)
def test_failure_keeps_chooses_the_part_of_a_failed_attempt_a_memory_stores(
    tmp_path: Path, keeps: str, trajectory: str, feedback: str, kept: tuple[str, ...]
) -> None:
    config = MemoryConfig(failure_keeps=keeps)  # type: ignore[arg-type]
    with MemoryStore(f"sqlite:///{tmp_path}/m.db", embedder=HashEmbedder(), config=config) as store:
        item = store.write(QUARTZ, trajectory=trajectory, feedback=feedback, success=False)
        assert all(part in store.get(item.id).experience for part in kept)


@pytest.mark.parametrize(("keeps", "stored_feedback"), [("feedback", FEEDBACK), ("attempt", "(not kept)")])
def test_a_model_written_lesson_reads_the_whole_attempt_and_is_stored_without_it(
    keeps: str, stored_feedback: str
) -> None:
    chat = ScriptedChat(["What went wrong: said blue. Correct approach: grey."])
    written = compose_experience(QUARTZ, trajectory=WRONG, feedback=FEEDBACK, success=False, llm=chat, keeps=keeps)  # type: ignore[arg-type]
    assert WRONG in chat.calls[0][0][1].content and FEEDBACK in chat.calls[0][0][1].content
    assert WRONG not in written.experience and written.experience.endswith(f"Feedback: {stored_feedback}")


def test_llm_mode_success_writes_a_script_plus_the_trajectory() -> None:
    chat = ScriptedChat(["1. Look\n2. Go north\n3. Open the door"])
    written = compose_experience("open the door", trajectory=TRAJECTORY, feedback="ok", success=True, llm=chat)
    assert written.mode == "llm"
    assert "Reusable steps:\n1. Look" in written.experience and "go north" in written.experience
    messages, params = chat.calls[0]
    assert messages[0] == Message("system", prompts.WRITER_SYSTEM)
    assert "succeeded" in messages[1].content and "open the door" in messages[1].content
    assert params["temperature"] == 0.0


def test_llm_mode_failure_writes_the_lesson_and_keeps_the_feedback() -> None:
    lesson = "What went wrong: pulled the door\nWhat to avoid: pulling\nCorrect approach: push"
    chat = ChatClient(ScriptedChat([lesson]))  # the wrapper every real backend goes through
    written = compose_experience(
        "open the door", trajectory=TRAJECTORY, feedback="push, not pull", success=False, llm=chat
    )
    assert written.experience == prompts.FAILURE_EXPERIENCE.format(lesson=lesson, feedback="push, not pull")
    assert "failed" in chat.backend.calls[0][0][1].content  # type: ignore[attr-defined]


@pytest.mark.parametrize("reply", ["", "   \n  "])
def test_empty_llm_answer_falls_back_to_cheap(reply: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="memory.write.writer"):
        written = compose_experience("t", trajectory="a", feedback="b", success=True, llm=ScriptedChat([reply]))
    assert written.mode == "cheap" and "empty" in caplog.text


def test_failing_llm_falls_back_to_cheap_and_the_store_keeps_the_attempt(
    store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(_messages: object) -> str:
        raise ConnectorError("model server down")

    with caplog.at_level(logging.WARNING, logger="memory.write.writer"):
        item = store.write(
            "open the door",
            trajectory=TRAJECTORY,
            feedback="locked",
            success=False,
            llm=ScriptedChat(broken),
            provenance={"episode": "ep-1"},
        )
    assert "model server down" in caplog.text
    assert item.meta == {
        "writer": "user:local", "composed": "cheap", "provenance": {"episode": "ep-1"}, "success": False
    }  # fmt: skip
    assert store.get(item.id).experience.startswith("Task: open the door\nOutcome: failure")
    assert store.retrieve("open the door").ids == (item.id,)


class BatchingChat:
    """A backend that answers a whole batch in one call and records each call's size; ``fail_batches``
    makes every call of more than one prompt fail, like a server refusing a large request."""

    name = "fake/batching"

    def __init__(self, reply: str, *, fail_batches: bool = False) -> None:
        self.reply, self.fail_batches, self.sizes = reply, fail_batches, list[int]()

    def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        return ScriptedChat([self.reply]).complete(messages)

    def complete_batch(self, prompts: Sequence[Sequence[Message]], **params: Any) -> list[Completion]:
        self.sizes.append(len(prompts))
        assert params == {"temperature": 0.0, "max_tokens": 400}
        if self.fail_batches and len(prompts) > 1:
            raise ConnectorError("request too large")
        return [ScriptedChat([self.reply if "Remember" not in p[-1].content else ""]).complete(p) for p in prompts]


ATTEMPTS = [
    WriteEntry("open the door", trajectory="push", feedback="opened", success=True),
    WriteEntry("Remember the gate code", trajectory="Answer given: 1111", feedback="The code is 4471.", success=False),
    WriteEntry("water the plants", trajectory="pour", feedback="too much", success=False),
]


def test_many_attempts_are_written_in_one_batched_call_and_an_empty_lesson_stays_cheap() -> None:
    chat = BatchingChat("What went wrong: guessed.")
    written = compose_experiences(ATTEMPTS, chat)
    assert chat.sizes == [3]  # one generation for the three lessons, not three
    assert [w.mode for w in written] == ["llm", "cheap", "llm"]  # the second came back empty
    assert written[0].experience.startswith("Outcome: success\nReusable steps:\nWhat went wrong: guessed.")
    assert "Feedback: The code is 4471." in written[1].experience
    assert written[2].experience == "Outcome: failure\nWhat went wrong: guessed.\n\nFeedback: too much"


def test_a_failed_batch_is_asked_one_attempt_at_a_time(caplog: pytest.LogCaptureFixture) -> None:
    chat = BatchingChat("What went wrong: guessed.", fail_batches=True)
    with caplog.at_level(logging.WARNING, logger="memory.write.writer"):
        written = compose_experiences(ATTEMPTS, chat)
    assert "request too large" in caplog.text and chat.sizes == [3]
    assert [w.mode for w in written] == ["llm", "llm", "llm"]  # each asked alone through complete()


def render_all() -> str:
    fields = {
        "task": "<task>",
        "trajectory": "<trajectory>",
        "feedback": "<feedback>",
        "outcome": "<outcome>",
        "script": "<script>",
        "lesson": "<lesson>",
        "count": 123,
    }
    names = [
        "WRITER_SYSTEM",
        "SUCCESS_PROMPT",
        "FAILURE_PROMPT",
        "CHEAP_EXPERIENCE",
        "SUCCESS_EXPERIENCE",
        "FAILURE_EXPERIENCE",
        "OMITTED",
    ]
    return "".join(f"===== {n} =====\n{getattr(prompts, n).format(**fields)}\n" for n in names)


def test_prompts_match_the_golden_snapshot() -> None:
    """Prompt changes must show up as a reviewed diff: regenerate with EVOLVE_UPDATE_GOLDEN=1."""
    rendered = render_all()
    if os.environ.get("EVOLVE_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(rendered, encoding="utf-8")
    assert rendered == GOLDEN.read_text(encoding="utf-8")


def test_an_entry_may_keep_its_failure_otherwise_than_the_store_and_a_bad_choice_is_refused(tmp_path: Path) -> None:
    from connectors.errors import ConfigError

    with MemoryStore(f"sqlite:///{tmp_path}/m.db", embedder=HashEmbedder()) as store:
        own = WriteEntry(QUARTZ, trajectory=WRONG, feedback=FEEDBACK, success=False, failure_keeps="both")
        assert WRONG in store.write_many([own])[0].experience  # the store's default would drop it
        bad = WriteEntry(QUARTZ, trajectory=WRONG, feedback=FEEDBACK, success=False, failure_keeps="answer")  # type: ignore[arg-type]
        with pytest.raises(
            ConfigError, match=r"entries\[0\].failure_keeps must be one of \('feedback', 'attempt', 'both'\)"
        ):
            store.write_many([bad])
        assert len(store.items()) == 1  # nothing written by the refused batch
