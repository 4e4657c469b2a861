"""Names users choose: ids built from them fit their columns, names too long are refused up front, and one
rating that cannot be learned is quarantined instead of blocking every later job.

Every database test runs on SQLite and on PostgreSQL, which enforces VARCHAR lengths (SQLite does not).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect, text, update

from connectors import ConfigError, HashEmbedder, Message, RateLimited, load_chat
from evolve import Agent, Evolver, MemoryView, Task, Team
from evolve.build import agent_namespace
from evolve.envs.tasks import MAX_TASK_ID, TaskEnv, load_tasks
from evolve.executors import Rollout
from evolve.jobs.job import run_job
from evolve.jobs.served import learn_from_feedback, learn_served
from evolve.run_log import MAX_EPISODE_ID, RunLog, episode_from_row
from evolve.serve.answers import UnknownResponse
from evolve.serve.deployment import Deployment
from evolve.serve.responses import feedback_rows, open_tables
from evolve.spec import RunSpec, check_tenant
from memory import MemoryStore
from memory.write.checks import MAX_FEEDBACK_ID, MAX_ID

RUN = "heldout-similarity-s7-évaluation nordique"
AGENT = "réponse-agent für die nordische Auswertung"
TASK_IDS = ["escalation-alderney-harbour-north-gate-ß", "escalation-alderney-quarry gate-øst-ĳssel"]
LONGEST_RUN = "évaluation nordique " * 6  # 120 characters, the most a spec's run name may have
LONGEST_TENANT = "Zürich-Nordhafen-Logistik-Genossenschaft-ß-" + "ü" * 21  # 64 characters


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'names.db'}"
    return str(request.getfixturevalue("pg_url"))


def tasks() -> list[Task]:
    return [Task(id=t, prompt=f"What is the door code of gate {i}?", answer="4471") for i, t in enumerate(TASK_IDS)]


def feedback_ids(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return [r[0] for r in conn.execute(text("SELECT id FROM memory_feedback"))]


# -- ids the loop builds ------------------------------------------------------------------------------
def test_episode_ids_fit_the_run_log_and_stay_the_same() -> None:
    task = Task(id="ß" * MAX_TASK_ID, prompt="Door code?", answer="4471")
    team = Team([Agent(AGENT, load_chat("fake/scripted", replies=["4471"]))])
    rollout = Rollout(team, lambda: TaskEnv([task]), run="é" * 200, round=12)
    first, again = rollout([task])[0].id, rollout([task])[0].id
    assert len(first) == MAX_EPISODE_ID and first == again and first.startswith("é" * 200 + ":12:")
    short = Rollout(team, lambda: TaskEnv([task]), run="r", round=1)
    assert short([Task(id="t1", prompt="p", answer="4")])[0].id == "r:1:t1"  # ids that fit are kept as they are


def test_a_task_id_longer_than_the_run_log_keeps_is_refused_where_it_is_written(tmp_path: Path) -> None:
    file = tmp_path / "tasks.jsonl"
    ok = {"id": "escalation alderney — ß" * 8, "prompt": "Door code?", "answer": "4471"}  # 184 characters
    file.write_text(json.dumps(ok) + "\n" + json.dumps({**ok, "id": "x" * (MAX_TASK_ID + 1)}) + "\n")
    with pytest.raises(ConfigError, match=rf"tasks.jsonl:2: task 'id' must be at most {MAX_TASK_ID} characters"):
        load_tasks(file)
    with pytest.raises(ConfigError, match="NUL"):
        Task(id="gate\x00", prompt="Door code?", answer="4471")


def test_a_run_name_longer_than_its_columns_is_refused_before_anything_is_written(database: str) -> None:
    store = MemoryStore(database, embedder=HashEmbedder())
    team = Team([Agent(AGENT, load_chat("fake/scripted", replies=["4471"]))])
    with pytest.raises(ConfigError, match="a run name is a non-empty string of at most 200 characters"):
        Evolver(team, tasks(), memory=store, run="é" * 201, progress=False)
    assert RunLog(store.engine, "é" * 200).run == "é" * 200  # the longest that fits
    store.close()


def test_the_loop_learns_and_resumes_under_names_longer_than_ids_may_be(database: str) -> None:
    store = MemoryStore(database, embedder=HashEmbedder())
    run = "é" * 200  # an episode id of 300 characters: every memory id and feedback key is shortened
    agents = [
        Agent(name, load_chat("fake/scripted", replies=["4471"]), memory=MemoryView(store, agent_namespace(run, name)))
        for name in (AGENT, AGENT + " (zweiter)")
    ]
    evolver = Evolver(Team(agents), tasks(), memory=store, run=run, progress=False)
    assert [m.success_rate for m in evolver.run(rounds=2)] == [1.0, 1.0]
    items = store.items()
    assert len(items) == 2 * 2 * len(TASK_IDS) and all(len(it.id) <= MAX_ID for it in items)
    keys = feedback_ids(store.engine)
    assert keys and all(len(k) <= MAX_FEEDBACK_ID for k in keys)  # round 2 recalled round 1's memories
    q_before = {it.id: (it.q, it.visits) for it in items}
    episodes = [episode_from_row(row) for r in (1, 2) for row in evolver.log.round_rows(r)]
    evolver.apply(episodes)  # a run killed before marking its batches learned learns them again
    assert {it.id: (it.q, it.visits) for it in store.items()} == q_before  # no reward twice, no memory twice
    assert sorted(feedback_ids(store.engine)) == sorted(keys)
    store.close()


# -- tenants ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name", ["Zürich-Nordhafen-Logistik-Genossenschaft-ß", LONGEST_TENANT, "東京-ロジスティクス", "αθήνα_2"]
)
def test_tenant_names_may_be_long_and_in_any_script(name: str) -> None:
    assert check_tenant(name) == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        (LONGEST_TENANT + "x", "(65 characters)"),
        ("e\u0301cole-nordhafen", "composed: NFC"),  # the same name as "école-nordhafen", decomposed
        ("\u0430cme-logistics", "of one script"),  # a Cyrillic "а": a lookalike of "acme-logistics"
        ("Zürich Nordhafen", "letters"),
    ],
)
def test_a_tenant_name_that_cannot_be_one_says_what_a_tenant_name_is(name: str, why: str) -> None:
    with pytest.raises(ConfigError, match="a tenant name is 1-64 letters") as e:
        check_tenant(name)
    assert why in str(e.value)


# -- serving under the longest names ------------------------------------------------------------------
def spec(database: str, *, run: str = RUN, agents: tuple[str, ...] = (AGENT,)) -> RunSpec:
    return RunSpec.model_validate(
        {
            "run": {"name": run, "database": database},
            "model": {"chat": "fake/scripted", "options": {"replies": ["4471"]}},
            "embedder": {"name": "hash"},
            "environment": {"tasks": "unused.jsonl"},
            "memory": {"k2": 1},
            "agents": [{"name": a} for a in agents],
        }
    )


def test_the_longest_run_and_tenant_names_serve_rate_and_learn_in_a_job(database: str) -> None:
    deployment = Deployment(spec(database, run=LONGEST_RUN, agents=("ß" * 300,)))
    for i in range(2):  # the second answer recalls the memory the first one's job wrote
        answer = deployment.answer([Message("user", "Door code of the north gate?")], tenant=LONGEST_TENANT)
        receipt = deployment.feedback(answer.id, 0.0, tenant=LONGEST_TENANT, comment="It is 7730.", key="ü" * 200)
        assert receipt.applied and receipt.reinforced == i
        team, _ = deployment.team(LONGEST_TENANT)
        run = deployment.run_name(LONGEST_TENANT)
        evolver = Evolver(team, tasks(), memory=deployment.store, run=run, progress=False)
        result = run_job(evolver, before_round=lambda ev=evolver: learn_served(ev))
        assert result.status == "ran" and result.metrics is not None
    assert deployment.store is not None
    served = [it for it in deployment.store.items() if it.id.startswith("served:")]
    assert len(served) == 2 and all(len(it.id) <= MAX_ID for it in served)
    assert all(len(k) <= MAX_FEEDBACK_ID for k in feedback_ids(deployment.engine))
    deployment.close()


def test_feedback_refuses_text_no_database_can_store_instead_of_queueing_it(database: str) -> None:
    deployment = Deployment(spec(database))
    answer = deployment.answer([Message("user", "Door code of the north gate?")], tenant="acme")
    with pytest.raises(ConfigError, match="comment must not contain NUL"):
        deployment.feedback(answer.id, 0.0, tenant="acme", comment="It is\x00 7730.")
    with pytest.raises(ConfigError, match="key must not contain NUL"):
        deployment.feedback(answer.id, 0.0, tenant="acme", key="k\x00")
    with pytest.raises(ConfigError, match=r"messages\[0\].content must not contain NUL"):
        deployment.answer([Message("user", "Door\x00 code?")], tenant="acme")
    with pytest.raises(UnknownResponse):
        deployment.feedback("chatcmpl-\x00", 0.0, tenant="acme")
    with deployment.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM evolve_feedback")).scalar_one() == 0
    deployment.close()


# -- quarantine ---------------------------------------------------------------------------------------
def rate(deployment: Deployment, tenant: str, comments: list[str]) -> list[str]:
    ids = []
    for i, comment in enumerate(comments):
        answer = deployment.answer([Message("user", f"Door code of gate {i}?")], tenant=tenant)
        deployment.feedback(answer.id, 0.0, tenant=tenant, comment=comment)
        ids.append(answer.id)
    return ids


def served_responses(deployment: Deployment, tenant: str) -> list[str]:
    assert deployment.store is not None
    ns = agent_namespace(deployment.run_name(tenant), AGENT)
    return sorted(it.meta["provenance"]["response"] for it in deployment.store.items(ns) if it.id.startswith("served:"))


def test_a_rating_an_earlier_server_stored_with_a_nul_is_quarantined_and_the_rest_are_learned(tmp_path: Path) -> None:
    deployment = Deployment(spec(f"sqlite:///{tmp_path / 'old.db'}"))  # PostgreSQL never stored a NUL
    ids = rate(deployment, "acme", ["first", "second", "third"])
    with deployment.engine.begin() as conn:  # as the server stored it before comments were checked
        conn.execute(update(feedback_rows).where(feedback_rows.c.response_id == ids[1]).values(comment="It is\x007730"))
    team, _ = deployment.team("acme")
    run = deployment.run_name("acme")
    assert learn_from_feedback(deployment.store, team, run) == 2
    assert learn_from_feedback(deployment.store, team, run) == 0  # not retried
    assert served_responses(deployment, "acme") == sorted([ids[0], ids[2]])
    (held,) = deployment.quarantined(tenant="acme")
    assert held.response_id == ids[1] and "NUL" in held.reason and held.comment == "It is\x007730"
    with deployment.engine.begin() as conn:  # fixed by hand; then queued again
        conn.execute(update(feedback_rows).where(feedback_rows.c.id == held.feedback_id).values(comment="It is 7730"))
    assert deployment.retry_quarantined(tenant="acme") == 1
    assert learn_from_feedback(deployment.store, team, run) == 1
    assert served_responses(deployment, "acme") == sorted(ids) and deployment.quarantined(tenant="acme") == []
    deployment.close()


def test_a_model_that_may_answer_later_leaves_the_rating_queued(database: str) -> None:
    class Throttled(HashEmbedder):
        def embed(self, texts: object) -> object:
            raise RateLimited("429 from the embedder", retry_after=1.0)

    deployment = Deployment(spec(database))
    rate(deployment, "acme", ["first"])
    team, _ = deployment.team("acme")
    throttled = MemoryStore(database, embedder=Throttled())
    with pytest.raises(RateLimited):
        learn_from_feedback(throttled, team, deployment.run_name("acme"))
    throttled.close()
    assert deployment.quarantined(tenant="acme") == []
    assert learn_from_feedback(deployment.store, team, deployment.run_name("acme")) == 1  # the next job learns it
    deployment.close()


def test_a_database_from_before_quarantine_gains_the_column_and_keeps_its_queue(database: str) -> None:
    deployment = Deployment(spec(database))
    ids = rate(deployment, "acme", ["first"])
    with deployment.engine.begin() as conn:
        conn.execute(text("ALTER TABLE evolve_feedback DROP COLUMN quarantined"))
    assert "quarantined" not in {c["name"] for c in inspect(deployment.engine).get_columns("evolve_feedback")}
    deployment.close()
    again = Deployment(spec(database))  # opening it adds the column
    open_tables(again.engine)  # and opening it again changes nothing
    assert "quarantined" in {c["name"] for c in inspect(again.engine).get_columns("evolve_feedback")}
    team, _ = again.team("acme")
    assert learn_from_feedback(again.store, team, again.run_name("acme")) == 1
    assert served_responses(again, "acme") == ids
    again.close()
