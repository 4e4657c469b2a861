"""``diagnose``: accuracy per member, K* per task, pairwise similarity, the team's vote, and plain reports
for a team of one, failed and empty answers, unchecked tasks."""

from __future__ import annotations

import doctest
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import evolve.teams.diagnose
from connectors import ConfigError, ConnectorError, HashEmbedder, Message, SentenceTransformerEmbedder, load_chat
from evolve import Agent, Task, Team
from evolve.teams.diagnose import diagnose, heat_map
from evolve.teams.parallel import ParallelTeam

TASKS = [
    Task(
        id="rolltor-süd", prompt="Welcher Code öffnet das Rolltor am Zürich-Nordhafen-Depot, Halle Süd?", answer="4471"
    ),
    Task(
        id="rolltor-nord",
        prompt="Welcher Code öffnet das Rolltor am Zürich-Nordhafen-Depot, Halle Nord?",
        answer="9902",
    ),
    Task(id="kran-7", prompt="Wer wartet Kran 7 in der Halle Süd?", answer="Müller"),
]


def answering(name: str, replies: dict[str, str]) -> Agent:
    """An agent that answers each task by a word of its prompt."""
    return Agent(name, load_chat("fake/scripted", replies=replies, default="weiß nicht"))


def test_accuracy_kstar_and_the_vote_on_a_pool() -> None:
    right = {"Depot, Halle Süd": "4471", "Depot, Halle Nord": "9902", "Kran 7": "Müller"}
    pool = [
        answering("Gleis Nord · Schicht A", right),
        answering("Gleis Süd · Schicht B", {**right, "Kran 7": "Meier"}),
        answering("Kran 7 — Halle Süd", {"Depot, Halle Süd": "4471", "Depot, Halle Nord": "4471", "Kran 7": "Müller"}),
    ]
    d = diagnose(pool, TASKS, embedder=HashEmbedder(64))
    assert d.accuracy == pytest.approx(
        {"Gleis Nord · Schicht A": 1.0, "Gleis Süd · Schicht B": 2 / 3, "Kran 7 — Halle Süd": 2 / 3}
    )
    assert d.team_accuracy == 1.0  # each wrong answer is outvoted by the two right ones
    assert d.kstar[0] == pytest.approx(1.0)  # all three said 4471
    assert 1.0 < d.kstar[1] < 3.0 and 1.0 < d.kstar[2] < 3.0  # one of three differs
    assert d.agreement.tolist() == pytest.approx([1.0, 1 / 3, 1 / 3])
    assert d.similarity.shape == (3, 3) and np.diag(d.similarity) == pytest.approx(1.0)
    corr = d.correctness_correlation
    assert corr is not None and np.isnan(corr[0]).all()  # right on every task: no variation
    report = d.to_dict()
    json.dumps(report)  # JSON-ready, NaN included
    assert report["members"][2] == "Kran 7 — Halle Süd" and report["kstar_per_task"]["rolltor-süd"] == 1.0
    assert "| Gleis Süd · Schicht B | 0.667 |" in d.markdown()


def test_failed_and_empty_answers_are_counted_and_said() -> None:
    def down(messages: Sequence[Message]) -> str:
        raise ConnectorError("backend down")

    pool = [
        answering("a", {"Depot, Halle Süd": "4471", "Depot, Halle Nord": "9902", "Kran 7": "Müller"}),
        Agent("kaputt", load_chat("fake/scripted", replies=down)),
        answering("stumm", {"Depot, Halle Süd": "", "Depot, Halle Nord": "9902", "Kran 7": "  "}),
    ]
    d = diagnose(pool, TASKS, embedder=HashEmbedder(64))
    assert d.accuracy == pytest.approx({"a": 1.0, "kaputt": 0.0, "stumm": 1 / 3})
    assert d.failures == 3 and d.empty == 2
    assert d.kstar[0] == pytest.approx(1.0)  # only "a" answered: one channel
    assert np.isnan(d.similarity[1]).all()  # a member that never answered is like no one
    assert "kaputt: backend down" in str(d.errors[0][1]) and d.answers[0][1] is None
    notes = " ".join(d.notes())
    assert "3 answers failed" in notes and "2 answers were empty" in notes


def test_a_team_of_one_and_unchecked_tasks_are_said_plainly() -> None:
    unlabelled = [t.prompt for t in TASKS]  # prompts alone: nothing to check against
    d = diagnose([answering("allein", {"Depot, Halle Süd": "4471"})], unlabelled, embedder=HashEmbedder(64))
    assert d.kstar.tolist() == [1.0, 1.0, 1.0] and d.accuracy is None and d.team_accuracy is None
    assert d.notes()[0].startswith("A team of one: K* is 1 by definition")
    assert any("carry no answers" in n for n in d.notes())


def test_every_member_failing_is_a_report_not_a_crash() -> None:
    def down(messages: Sequence[Message]) -> str:
        raise ConnectorError("backend down")

    d = diagnose([Agent(n, load_chat("fake/scripted", replies=down)) for n in "ab"], TASKS, embedder=HashEmbedder(64))
    assert math.isnan(d.kstar_mean) and d.team_accuracy == 0.0 and d.failures == 6
    assert "nan" not in json.dumps(d.to_dict()).lower()


def test_a_chain_is_refused_with_a_reason() -> None:
    chain = Team([answering("a", {}), answering("b", {})])
    with pytest.raises(ConfigError, match="not a chain"):
        diagnose(chain, TASKS, embedder=HashEmbedder(64))
    with pytest.raises(ConfigError, match="at least one task"):
        diagnose([answering("a", {})], [], embedder=HashEmbedder(64))


def test_paraphrases_are_fewer_channels_than_different_answers_under_minilm(tmp_path: Path) -> None:
    """With the real embedder, K* counts meanings: three phrasings of one answer are about one channel,
    three different answers about three; the heat map is a PNG."""
    task = ["Wie sichere ich die Palette?"]
    same = [
        "Secure the pallet with two straps.",
        "Use two straps to secure the pallet.",
        "Two straps secure the pallet.",
    ]
    different = ["Secure the pallet with two straps.", "The invoice is due on Friday.", "Crane 7 needs new oil."]
    embedder = SentenceTransformerEmbedder()
    k = [
        diagnose(
            [answering(f"m{i}", {"Palette": a}) for i, a in enumerate(answers)], task, embedder=embedder
        ).kstar_mean
        for answers in (same, different)
    ]
    assert 1.0 < k[0] < 1.6 < 2.4 < k[1] <= 3.0
    d = diagnose(
        ParallelTeam([answering(f"m{i}", {"Palette": a}) for i, a in enumerate(different)]), task, embedder=embedder
    )
    png = heat_map(d, tmp_path / "Zürich Teams" / "heat map.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_module_examples_run() -> None:
    assert doctest.testmod(evolve.teams.diagnose).failed == 0
