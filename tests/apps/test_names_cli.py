"""Realistic names through the command line: long run, task, agent and tenant names, in any script.

Ids the system builds from such names (memory ids, feedback keys, episode ids, tenant runs) must fit
their columns on SQLite and on PostgreSQL, which enforces VARCHAR lengths; a name too long for any
of them is refused up front with its limit, never at the first write.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import update

from apps.cli import main
from connectors import Message
from evolve.jobs.job import job_history
from evolve.serve.deployment import Deployment
from evolve.serve.responses import feedback_rows
from evolve.spec import load_spec
from memory import MemoryItem
from memory.write.checks import MAX_ID

RUN = "heldout-similarity-s7-évaluation nordique"
TENANT = "Zürich-Nordhafen-Logistik-Genossenschaft-ß"
AGENTS = ("réponse-agent-für-die-nordische-Auswertung", "vérificateur des codes d'accès, Nordhafen")
TASKS = [
    {
        "id": "escalation-alderney-harbour-north-gate-ß",
        "prompt": "Door code of the Harbor warehouse?",
        "answer": "4471",
    },
    {
        "id": "escalation-alderney-quarry gate-øst-ĳssel",
        "prompt": "Alarm code of the Summit workshop?",
        "answer": "9310",
    },
]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    return str(request.getfixturevalue("pg_url"))


def write_spec(folder: Path, database: str, *, run: str = RUN, agents: tuple[str, ...] = AGENTS) -> Path:
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in TASKS))
    chain = "".join(
        f"[[agents]]\nname = {json.dumps(a, ensure_ascii=False)}\n"
        + (f"after = [{json.dumps(agents[i - 1], ensure_ascii=False)}]\n" if i else "")
        for i, a in enumerate(agents)
    )
    spec = folder / "spec.toml"
    spec.write_text(
        f"""
[run]
name = {json.dumps(run, ensure_ascii=False)}
rounds = 2
database = "{database}"

[model]
chat = "fake/scripted"
options = {{ replies = ["4471"] }}

[embedder]
name = "hash"

[environment]
tasks = "tasks.jsonl"
paraphrase = false

[memory]
k2 = 1

{chain}""",
        encoding="utf-8",
    )
    return spec


def test_evolve_run_writes_memories_under_long_unicode_names_and_resumes(
    tmp_path: Path, database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_spec(tmp_path, database)
    assert main(["run", str(spec), "--quiet"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [r[4] for r in rows] == ["4", "8"]  # one experience per attempt and agent (two tasks, two agents)
    assert main(["run", str(spec), "--quiet", "--rounds", "3"]) == 0  # resumes: round 3 only
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == ["1", "2", "3"]
    deployment = Deployment(load_spec(spec))
    store = deployment.store
    assert store is not None
    for agent in AGENTS:
        items = store.items(deployment.team(None)[0].agents[agent].memory.namespace)  # type: ignore[union-attr]
        assert len(items) == 3 * len(TASKS)  # three rounds, nothing written twice
        assert all(len(it.id) <= MAX_ID for it in items)
    deployment.close()


def test_the_bundled_names_serve_rate_and_learn_in_the_tenants_job(tmp_path: Path, database: str) -> None:
    """The report: run "facility-codes", tenant "acme": the served memory's id was 67 characters."""
    spec = write_spec(tmp_path, database, run="facility-codes", agents=("solver",))
    served = serve_and_rate(spec, "acme", comments=["The Quarry gate code is 7730."], key=None)
    assert main(["job", str(spec), "--once", "--quiet", "--tenant", "acme"]) == 0
    learned = served_items(spec, "acme")
    assert [response_of(it) for it in learned] == served


def test_a_long_unicode_tenant_serves_rates_and_learns_in_its_job_once(
    tmp_path: Path, database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_spec(tmp_path, database)
    served = serve_and_rate(spec, TENANT, comments=["Der Code ist 7730.", "Código correcto: 4471."])
    assert main(["job", str(spec), "--once", "--quiet", "--tenant", TENANT]) == 0
    assert main(["job", str(spec), "--once", "--quiet", "--tenant", TENANT]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"ran {RUN}@{TENANT} round") for line in lines)
    assert "quarantined" not in "\n".join(lines)
    learned = served_items(spec, TENANT)
    assert sorted(response_of(it) for it in learned) == sorted(served * len(AGENTS))  # once per agent
    deployment = Deployment(load_spec(spec))
    assert [j.status for j in job_history(deployment.engine, f"{RUN}@{TENANT}")] == ["done", "done"]
    deployment.close()


def test_a_job_quarantines_a_poisoned_rating_learns_the_rest_and_says_so(
    tmp_path: Path, database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_spec(tmp_path, database, agents=AGENTS[:1])
    served = serve_and_rate(spec, TENANT, comments=["first", "second", "third"])
    deployment = Deployment(load_spec(spec))
    with deployment.engine.begin() as conn:  # a row cut short by a copy through a tool with a length limit
        conn.execute(update(feedback_rows).where(feedback_rows.c.response_id == served[0]).values(applied=0))
        from evolve.serve.responses import responses

        conn.execute(update(responses).where(responses.c.id == served[0]).values(steps='[{"agent": "réponse'))
    deployment.close()
    assert main(["job", str(spec), "--once", "--quiet", "--tenant", TENANT]) == 0
    assert main(["job", str(spec), "--once", "--quiet", "--tenant", TENANT]) == 0
    first, second = capsys.readouterr().out.splitlines()
    assert first.startswith("ran ") and first.endswith("1 served rating quarantined (Deployment.quarantined says why)")
    assert second.endswith("1 served rating quarantined (Deployment.quarantined says why)")  # still waiting
    assert sorted(response_of(it) for it in served_items(spec, TENANT)) == sorted(served[1:])
    deployment = Deployment(load_spec(spec))
    (held,) = deployment.quarantined(tenant=TENANT)
    assert held.response_id == served[0] and "steps" in held.reason
    deployment.close()


def serve_and_rate(spec: Path, tenant: str, *, comments: list[str], key: str | None = "ü" * 180) -> list[str]:
    """One answer per comment, each rated (bad) with a long idempotency key (default: 200 characters,
    the most a key may have); the response ids."""
    deployment = Deployment(load_spec(spec))
    ids = []
    for i, comment in enumerate(comments):
        answer = deployment.answer([Message("user", f"Door code of gate {i}?")], tenant=tenant)
        rating = deployment.feedback(
            answer.id, 0.0, tenant=tenant, comment=comment, key=None if key is None else f"bewertung-{i}-{key}"
        )
        assert rating.applied
        ids.append(answer.id)
    deployment.close()
    return ids


def response_of(item: MemoryItem) -> str:
    return str(item.meta["provenance"]["response"])


def served_items(spec: Path, tenant: str) -> list[MemoryItem]:
    deployment = Deployment(load_spec(spec))
    store = deployment.store
    assert store is not None
    team, _ = deployment.team(tenant)
    items = [
        it
        for a in team.agents.values()
        if a.memory is not None
        for it in store.items(a.memory.namespace)
        if it.id.startswith("served:")
    ]
    assert all(len(it.id) <= MAX_ID for it in items)
    deployment.close()
    return items
