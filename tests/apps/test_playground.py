"""The Streamlit playground, driven through Streamlit's AppTest on a fast spec (scripted model, hash
embedder, SQLite in tmp_path): chat, thumbs feedback, why-these-memories, memory filters, rollback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the playground extra (pip install -e '.[playground]') is not installed")

import streamlit as st  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from connectors import make_engine  # noqa: E402
from evolve import PromptGraph, RoundMetrics  # noqa: E402
from evolve.run_log import RunLog  # noqa: E402
from evolve.serve.deployment import Deployment  # noqa: E402
from evolve.spec import load_spec  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "apps" / "playground.py"
QUESTION = "What is the door code of the Harbor warehouse?"
SEED_PROMPT = "Reply with the code only."
NEW_PROMPT = "Newer prompt."

# The scripted model says which system prompt it was given: the seed's gives "4471", the newer one not.
SPEC = """
[run]
name = "play"
database = "sqlite:///{db}"

[model]
chat = "fake/scripted"
options = {{ match = "all", default = "no idea", replies = {{ "{new}" = "from the newer prompt", "{seed}" = "4471" }} }}

[embedder]
name = "hash"

[environment]
tasks = "unused.jsonl"

[memory]
k1 = 10
k2 = 2

[[agents]]
name = "solver"
system = "{seed}"
"""


def write_spec(folder: Path) -> Path:
    """A playground spec answering from a scripted model, with its database in ``folder``."""
    path = folder / "playground.toml"
    path.write_text(SPEC.format(db=folder / "play.db", new=NEW_PROMPT, seed=SEED_PROMPT), encoding="utf-8")
    return path


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = write_spec(tmp_path)
    monkeypatch.setenv("EVOLVE_PLAYGROUND_SPEC", str(path))
    yield path
    st.cache_resource.clear()  # the app's Deployment is cached per spec path; drop this test's


def deployment(spec: Path) -> Deployment:
    """A second Deployment on the app's database: how the tests seed and inspect what the app did."""
    return Deployment(load_spec(spec))


def start() -> AppTest:
    at = AppTest.from_file(str(SCRIPT), default_timeout=30)
    at.run()
    assert not at.exception
    return at


def ask(at: AppTest, question: str = QUESTION) -> AppTest:
    at.chat_input(key="chat-input").set_value(question).run()
    assert not at.exception
    return at


def answers(at: AppTest) -> list[str]:
    return [m.markdown[0].value for m in at.chat_message if m.name == "assistant"]


def last_answer(at: AppTest):  # noqa: ANN201 - evolve.serve.answers.Answer
    return at.session_state["turns"][""][-1]["answer"]


def seed_memories(spec: Path) -> list[str]:
    """Five memories in the run's solver namespace: three near the question, two far from it."""
    d = deployment(spec)
    assert d.store is not None
    intents = [QUESTION, "Door code of the Harbor warehouse?", "harbor warehouse door", "summit alarm", "lunch menu"]
    ids = [d.store.add(text, f"lesson {i}", namespace="play/solver").id for i, text in enumerate(intents)]
    d.close()
    return ids


def q_values(spec: Path, ids: list[str]) -> dict[str, tuple[float, int]]:
    d = deployment(spec)
    assert d.store is not None
    every = {m.id: (m.q, m.visits) for m in d.store.items()}
    out = {i: every[i] for i in ids}
    d.close()
    return out


def test_a_question_gets_the_agents_answer_and_it_is_recorded(spec: Path) -> None:
    at = ask(start())
    assert [m.markdown[0].value for m in at.chat_message] == [QUESTION, "4471"]
    answer = last_answer(at)
    recorded = deployment(spec).response(answer.id)
    assert recorded["answer"] == "4471" and recorded["query"] == QUESTION
    ask(at, "And the alarm code?")
    assert answers(at) == ["4471", "4471"]  # the history stays on the page
    assert not at.error


def test_thumbs_up_reinforces_exactly_the_recalled_memories_once(spec: Path) -> None:
    ids = seed_memories(spec)
    at = ask(start())
    why = at.dataframe[0].value  # the first table on the page: why these memories
    selected = set(why[why["verdict"].str.startswith("selected")]["id"])
    assert len(selected) == 2 and len(why) == 5  # k2 = 2 of five candidates
    before = q_values(spec, ids)

    next(b for b in at.button if b.key.startswith("up-")).click().run()

    assert not at.exception
    assert "reinforced 2 memories" in " ".join(m.value for m in at.markdown)
    after = q_values(spec, ids)
    assert {i for i in ids if after[i] != before[i]} == selected
    assert all(after[i] == pytest.approx((0.3, 1)) for i in selected)  # Q <- 0 + 0.3 * (1 - 0)
    why = at.dataframe[0].value
    assert sorted(why[why["id"].isin(selected)]["Q now"]) == pytest.approx([0.3, 0.3])
    assert set(why[why["id"].isin(selected)]["Q"]) == {0.0}  # the Q that scored them at recall time

    next(b for b in at.button if b.key.startswith("down-")).click().run()  # a second rating of the same answer
    assert "already rated" in " ".join(m.value for m in at.markdown)
    assert q_values(spec, ids) == after


def test_rollback_moves_head_and_the_next_answer_uses_the_old_prompt(spec: Path) -> None:
    d = deployment(spec)
    graph = d.graph(None)
    seed = graph.head().id
    newer = graph.commit({"solver.system": NEW_PROMPT, "solver.library": ""}, parents=[seed], message="newer").id
    d.close()

    at = ask(start())
    assert answers(at) == ["from the newer prompt"] and last_answer(at).prompt_version == newer
    picker = at.selectbox(key="prompt-version:play")
    assert picker.value == newer and at.button(key="rollback").disabled  # HEAD is selected first
    picker.set_value(seed).run()
    diff = at.tabs[2].code[0].value  # the chosen version against HEAD
    assert f"-{SEED_PROMPT}" in diff and f"+{NEW_PROMPT}" in diff
    at.button(key="rollback").click().run()

    assert not at.exception
    assert PromptGraph(make_engine(f"sqlite:///{spec.parent / 'play.db'}"), "play").head().id == seed
    assert any("HEAD moved" in s.value for s in at.success)
    ask(at)
    assert answers(at) == ["from the newer prompt", "4471"]
    assert deployment(spec).response(last_answer(at).id)["prompt_version"] == seed


def test_memory_table_filters_by_text_q_outcome_and_namespace(spec: Path) -> None:
    d = deployment(spec)
    assert d.store is not None
    d.store.add("harbor door code", "4471 worked", namespace="play/solver", success=True, q=0.6)
    d.store.add("summit alarm code", "9310 was wrong", namespace="play/solver", success=False, q=-0.4)
    d.store.add("lunch menu", "ask the canteen", namespace="play/solver", q=0.1)
    d.store.add("someone else's", "not ours", namespace="other/solver", success=True, q=0.9)
    d.close()
    at = start()

    def shown() -> list[str]:
        table = at.tabs[1].dataframe[0].value
        return list(table["intent"])

    assert shown() == ["harbor door code", "lunch menu", "summit alarm code"]  # highest Q first, only this run's
    at.text_input(key="mem-search").input("CODE").run()
    assert shown() == ["harbor door code", "summit alarm code"]  # case-insensitive, intent or experience
    at.radio(key="mem-outcome").set_value("failures").run()
    assert shown() == ["summit alarm code"]
    at.radio(key="mem-outcome").set_value("all").run()
    at.slider(key="mem-min-q").set_value(0.0).run()
    assert shown() == ["harbor door code"]
    at.selectbox(key="mem-namespace:play").set_value("play/solver").run()
    assert shown() == ["harbor door code"]
    assert not at.exception


def test_tenants_see_only_their_own_memories(spec: Path) -> None:
    d = deployment(spec)
    assert d.store is not None
    d.store.add("alice's lesson", "a", namespace="play@alice/solver")
    d.close()
    at = start()
    at.sidebar.text_input(key="tenant").input("alice").run()
    table = at.tabs[1].dataframe[0].value
    assert list(table["intent"]) == ["alice's lesson"]
    ask(at)
    assert at.session_state["turns"]["alice"][-1]["answer"].run == "play@alice"
    at.sidebar.text_input(key="tenant").input("no spaces allowed").run()
    assert any("tenant name" in e.value for e in at.sidebar.error) and not at.exception


def test_learning_tab_shows_the_round_table(spec: Path) -> None:
    log = RunLog(make_engine(f"sqlite:///{spec.parent / 'play.db'}"), "play")
    for r, rate in ((1, 0.25), (2, 0.5)):
        log.record_round(RoundMetrics(r, 4, rate, rate, 0, 100, 0.0, 1.0, memory_size=4 * r))
    at = start()
    rounds = at.tabs[3].dataframe[0].value
    assert list(rounds["round"]) == [1, 2] and list(rounds["success_rate"]) == [0.25, 0.5]
    assert at.multiselect(key="runs").value == ["play"]


def test_a_missing_spec_is_a_clear_error_on_the_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOLVE_PLAYGROUND_SPEC", str(tmp_path / "nope.toml"))
    at = AppTest.from_file(str(SCRIPT), default_timeout=30)
    at.run()
    assert not at.exception
    assert "does not exist" in at.error[0].value


def test_team_tab_diagnoses_the_pool_and_shows_recompositions(spec: Path) -> None:
    tasks = [{"id": "harbor-door", "prompt": QUESTION, "answer": "4471"},
             {"id": "summit-alarm", "prompt": "What is the alarm code of the Summit lab?", "answer": "9902"}]  # fmt: skip
    (spec.parent / "unused.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    log = RunLog(make_engine(f"sqlite:///{spec.parent / 'play.db'}"), "play")
    log.record_round(RoundMetrics(1, 2, 0.5, 0.5, 0, 10, 0.0, 1.0, team=["solver"], team_note="now solver: vote 0.500"))
    at = start()
    team = at.tabs[4]
    assert "**Chain**: solver" in team.markdown[0].value
    assert "No diagnosis yet" in team.info[0].value
    assert list(team.dataframe[0].value["why"]) == ["now solver: vote 0.500"]
    at.button(key="diagnose").click().run()
    assert not at.exception and not at.tabs[4].error
    shown = at.tabs[4]
    assert (
        "K* **1.00** of at most 1" in shown.markdown[1].value and "team accuracy **0.500**" in shown.markdown[1].value
    )
    members = shown.dataframe[0].value
    assert list(members["member"]) == ["solver"] and list(members["accuracy"]) == [0.5]
    assert any("A team of one" in c.value for c in shown.caption)
    assert shown.get("image")  # the heat map


def test_team_tab_draws_a_learned_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain that learns its order: the tab says so, then shows each task group's served order and the
    agents' priorities once a run has learned them."""
    from evolve.build import build

    draft, review = "Entwurf · Zürcher Nachtschicht", "Prüfung · Qualitätssicherung Süd"
    tasks = [{"id": f"tor-{i}", "prompt": f"Welcher Code öffnet Tor {i}?", "answer": "4471"} for i in range(4)]
    (tmp_path / "tore.jsonl").write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks), "utf-8")
    path = tmp_path / "tore.toml"
    path.write_text(f"""
[run]
name = "tore"
database = "sqlite:///{tmp_path / 'play.db'}"
batch_size = 2

[model]
chat = "fake/scripted"
options = {{ replies = {{ "<output of {draft}>" = "4471" }}, default = "ENTWURF" }}

[embedder]
name = "hash"

[environment]
tasks = "tore.jsonl"

[team]
order = "learned"
order_lr = 1.0

[[agents]]
name = "{review}"

[[agents]]
name = "{draft}"
""", encoding="utf-8")  # fmt: skip
    monkeypatch.setenv("EVOLVE_PLAYGROUND_SPEC", str(path))
    try:
        shown = start().tabs[4]
        assert "Chain that learns its order" in shown.markdown[0].value
        assert "No order learned yet" in shown.info[0].value
        build(load_spec(path), progress=False).run(4)
        shown = start().tabs[4]
        rows = shown.dataframe[0].value
        assert set(rows["served order"]) == {f"{draft} → {review}"}
        assert f"priority · {draft}" in rows.columns and (rows[f"priority · {draft}"] > 0).all()
    finally:
        st.cache_resource.clear()
