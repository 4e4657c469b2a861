"""The Responses API's state in ``evolve_responses``: a database made before it gains the ``api_state`` column and
keeps its responses and their feedback; a response's state is kept, read and forgotten per run only."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from connectors import Message
from evolve.serve.deployment import Deployment
from evolve.serve.responses import forget, keep_state, open_tables, stored_state
from evolve.spec import RunSpec


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'responses.db'}"
    return str(request.getfixturevalue("pg_url"))


def deployment(database: str) -> Deployment:
    spec = {"environment": {"tasks": "unused.jsonl"}, "run": {"name": "codes", "database": database},
            "model": {"chat": "fake/scripted", "options": {"replies": ["4471"]}}, "embedder": {"name": "hash"}}  # fmt: skip
    return Deployment(RunSpec.model_validate(spec))


def columns(served: Deployment) -> set[str]:
    return {c["name"] for c in inspect(served.engine).get_columns("evolve_responses")}


def test_a_database_from_before_the_responses_api_gains_its_column_and_keeps_its_responses(database: str) -> None:
    served = deployment(database)
    answer = served.answer([Message("user", "Harbor door code?")], tenant="acme")
    with served.engine.begin() as conn:
        conn.execute(text("ALTER TABLE evolve_responses DROP COLUMN api_state"))
    assert "api_state" not in columns(served)
    served.close()
    again = deployment(database)  # opening it adds the column
    open_tables(again.engine)  # and opening it again changes nothing
    assert "api_state" in columns(again)
    assert again.response(answer.id, tenant="acme")["answer"] == "4471"
    assert stored_state(again.engine, answer.id, again.run_name("acme")) is None  # a chat completion: none kept
    assert again.feedback(answer.id, 1.0, tenant="acme").applied
    again.close()


def test_a_kept_state_is_read_and_forgotten_by_its_run_only(database: str) -> None:
    served = deployment(database)
    answer = served.answer([Message("user", "Harbor door code?")], tenant="acme", id_prefix="resp_")
    acme, globex = served.run_name("acme"), served.run_name("globex")
    assert answer.id.startswith("resp_")
    keep_state(served.engine, answer.id, {"response": {"id": answer.id}, "conversation": []})
    assert stored_state(served.engine, answer.id, acme) == {"response": {"id": answer.id}, "conversation": []}
    assert stored_state(served.engine, answer.id, globex) is None
    served.feedback(answer.id, 1.0, tenant="acme")
    assert not forget(served.engine, answer.id, globex)  # another run's: nothing deleted
    assert forget(served.engine, answer.id, acme) and stored_state(served.engine, answer.id, acme) is None
    with served.engine.connect() as conn:  # its record and its ratings are gone
        left = conn.execute(text("SELECT COUNT(*) FROM evolve_feedback WHERE response_id = :i"), {"i": answer.id})
        assert left.scalar_one() == 0
    assert not forget(served.engine, answer.id, acme)
    served.close()
