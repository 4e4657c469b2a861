"""bench.ablations: the oracle reader reads what the best memory shows, each knob reaches the store, and a
small run reports every point with an interval."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench import ablations
from connectors import ChatClient, HashEmbedder, Message, ScriptedChat
from evolve.agent import EXPERIENCE_INTRO
from memory import MemoryStore, WriteEntry


def user(*experiences: str) -> list[Message]:
    """The user turn an agent sends, experiences best last (as ``evolve.agent.render_experiences`` does)."""
    body = "\n".join(f"<experience>\n{e}\n</experience>" for e in experiences)
    return [Message("system", "s"), Message("user", f"{EXPERIENCE_INTRO}\n{body}\n\nTask: Badge colour at Quartz?")]


FAILED = "Task: Badge colour at Quartz?\nOutcome: failure\nAnswer given: blue\nFeedback: Wrong. The expected answer is: grey."
SOLVED = "Task: Badge colour at Quartzite?\nOutcome: success\nAnswer given: white\nFeedback: Correct."


def test_the_oracle_answers_with_what_the_best_memory_shows() -> None:
    assert ablations.oracle_reply(user(SOLVED, FAILED)) == "grey"  # best last: the failure reveals grey
    assert ablations.oracle_reply(user(FAILED, SOLVED)) == "white"  # a success shows its answer
    assert ablations.oracle_reply(user(FAILED.replace(" The expected answer is: grey.", ""))) == "unknown"
    assert ablations.oracle_reply([Message("user", "Badge colour at Quartz?")]) == "unknown"
    steps = FAILED.replace("grey.", "remove tray, flip breaker, press power.")
    assert ablations.oracle_reply(user(steps)) == "remove tray, flip breaker, press power"


def test_the_cached_embedder_embeds_each_text_once() -> None:
    calls: list[list[str]] = []

    class Counting(HashEmbedder):
        def embed(self, texts):  # type: ignore[no-untyped-def]
            calls.append(list(texts))
            return super().embed(texts)

    cached = ablations.CachedEmbedder(Counting())
    first = cached.embed(["a", "b", "a"])
    again = cached.embed(["b", "c"])
    assert calls == [["a", "b"], ["c"]]
    np.testing.assert_array_equal(first[1], again[0])
    assert cached.embed([]).shape == (0, cached.dim)


@pytest.mark.parametrize(("keep", "trajectory", "feedback"), [
    ("both", "Answer given: blue", "Wrong. The expected answer is: grey."),
    ("answer", "Answer given: blue", "(not kept)"),
    ("feedback", "(not kept)", "Wrong. The expected answer is: grey."),
])  # fmt: skip
def test_a_failure_memory_keeps_what_the_knob_says_and_a_success_keeps_all(
    tmp_path: Path, keep: str, trajectory: str, feedback: str
) -> None:
    config = ablations.Point(failure_memory=keep).config()
    with MemoryStore(f"sqlite:///{tmp_path}/m.db", embedder=HashEmbedder(), config=config) as store:
        failed, solved = store.write_many([
            WriteEntry("Badge colour at Quartz?", trajectory="Answer given: blue",
                       feedback="Wrong. The expected answer is: grey.", success=False),
            WriteEntry("Badge colour at Ash?", trajectory="Answer given: red", feedback="Correct.", success=True),
        ])  # fmt: skip
        text = store.get(failed.id).experience
        assert trajectory in text and feedback in text
        assert "Answer given: red" in store.get(solved.id).experience


def test_every_knob_value_is_a_point_and_k1_below_k2_is_skipped() -> None:
    points = ablations.points_of(list(ablations.KNOBS))
    assert len(points) == sum(len(v) for v in ablations.KNOBS.values())
    assert ("lam", 0.0, ablations.BASE.__class__(lam=0.0)) in points
    k2 = [(v, p) for knob, v, p in points if knob == "k2"]
    assert [p.config().retrieval.k2 for _, p in k2] == [1, 2, 3, 5]


def test_a_small_run_reports_every_point_over_seeds(tmp_path: Path) -> None:
    result = ablations.run(
        ["lookalikes"], ["lam", "reward"], 2,
        chat=ChatClient(ScriptedChat(ablations.oracle_reply)), embedder=HashEmbedder(), reader="oracle", progress=False,
    )  # fmt: skip
    knobs = result["families"]["lookalikes"]["knobs"]
    assert list(knobs) == ["lam", "reward"] and list(knobs["reward"]) == ["centred", "raw"]
    assert knobs["lam"]["0.5"] is knobs["reward"]["centred"]  # the bundled setting ran once
    cell = knobs["lam"]["0.0"]
    assert len(cell["last_per_seed"]) == 2 and cell["last_ci"][0] <= cell["last"] <= cell["last_ci"][1]
    assert cell["cum"] > 0  # the oracle copies a revealed colour: some task is solved
    from bench.ablations_report import markdown, summary_keys

    assert "| λ (weight of Q) | 0.5 (base) |" in markdown(result)
    keys = summary_keys(result)
    assert {"ablation_lookalikes_lam_0_0_last_mean", "ablation_lookalikes_reward_raw_cum_mean"} <= set(keys)
    json.dumps(result)


def test_settings_from_the_command_line_are_typed_and_checked() -> None:
    assert ablations.parse_setting("lam=0,0.5") == ("lam", (0.0, 0.5))
    assert ablations.parse_setting("k1=3") == ("k1", (3,))
    assert ablations.parse_setting("failure_memory=feedback") == ("failure_memory", ("feedback",))
    for bad in ("lam", "gamma=1", "k1=three", "reward=clipped", "failure_memory=all"):
        with pytest.raises(ValueError):
            ablations.parse_setting(bad)
    moved = ablations.BASE.__class__(lam=0.0)
    points = ablations.points_of(["failure_memory"], base=moved, ladder={"failure_memory": ("feedback",)})
    assert points == [("failure_memory", "feedback", ablations.BASE.__class__(lam=0.0, failure_memory="feedback"))]
