"""``[serve] promote``: ``evolve job --tenant`` moves a tenant's well-rated memories into the trained run's
shared memory, where every tenant recalls them, once; a spec cannot ask for it without shared memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.cli import main
from connectors import ConfigError, Message
from evolve.jobs.served import learn_from_feedback, promote
from evolve.serve.deployment import Deployment
from evolve.spec import load_spec

RUN = "Harbor and Quarry codes — pilot 2026"
ALICE = "Nordlicht-Logistik_Filiale-Zürich"
BOB = "Ärztekammer-Westfalen-Lippe-Münster"
QUESTION = "What is the door code of the Harbor warehouse?"


def write_spec(folder: Path, serve: str, *, memory: str = "", reply: str = "4471") -> Path:
    (folder / "tasks.jsonl").write_text(json.dumps({"id": "harbor", "prompt": QUESTION, "answer": "4471"}) + "\n")
    spec = folder / "spec.toml"
    spec.write_text(
        f"""
[run]
name = "{RUN}"
database = "sqlite:///{folder / "runs.db"}"

[model]
chat = "fake/scripted"
options = {{ replies = {{ "Harbor" = "{reply}" }} }}

[embedder]
name = "hash"

[environment]
tasks = "tasks.jsonl"
paraphrase = false

[memory]
k1 = 10
k2 = 2
alpha = 0.5
{memory}

[serve]
{serve}
"""
    )
    return spec


def test_a_job_promotes_what_a_tenant_rated_well_and_every_tenant_then_recalls_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_spec(tmp_path, "promote = true\npromote_visits = 1")
    deployment = Deployment(load_spec(spec))
    try:
        store = deployment.store
        assert store is not None
        own = store.add(QUESTION, "ask the night guard for the code", namespace=f"{RUN}@{ALICE}/solver").id
        answer = deployment.answer([Message("user", QUESTION)], tenant=ALICE)
        assert deployment.feedback(answer.id, 1.0, tenant=ALICE).reinforced == 1
        assert store.get(own, namespace=f"{RUN}@{ALICE}/solver").q == 0.5
    finally:
        deployment.close()

    capsys.readouterr()
    assert main(["job", str(spec), "--tenant", ALICE, "--once", "--quiet"]) == 0
    assert f"promoted 1 memories of {RUN}@{ALICE} into {RUN}'s shared memory" in capsys.readouterr().out

    deployment = Deployment(load_spec(spec))
    try:
        store = deployment.store
        assert store is not None
        [moved] = store.items(f"{RUN}/solver")
        assert moved.experience == "ask the night guard for the code" and moved.q == 0.5 and moved.visits == 0
        assert moved.meta["promoted_from"] == f"{RUN}@{ALICE}/solver" and moved.meta["promoted_id"] == own
        assert own not in {m.id for m in store.items(f"{RUN}@{ALICE}/solver")}  # moved, not copied
        bob = deployment.answer([Message("user", QUESTION)], tenant=BOB)
        assert moved.id in store.explain(bob.recall_ids[0], namespace=f"{RUN}@{BOB}/solver")["selected"]
        team, _ = deployment.team(ALICE)
        promote(store, team, min_q=0.5, min_visits=1)  # whatever the job's own round rewarded since
        assert promote(store, team, min_q=0.5, min_visits=1) == 0  # a repeat moves nothing twice
        assert len({m.meta["promoted_id"] for m in store.items(f"{RUN}/solver")}) == len(store.items(f"{RUN}/solver"))
    finally:
        deployment.close()


def test_promote_needs_shared_memory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="promote = true .* needs memory = \"shared\", not 'tenant'"):
        load_spec(write_spec(tmp_path, 'memory = "tenant"\npromote = true'))


def rate_own_wrong_answers_good(deployment: Deployment) -> str:
    """Tenant ALICE's first answer (wrong: 9999) rated good becomes a memory; rating the two answers that recall
    it good too gives it Q 0.75 over 2 visits: enough to be promoted. Returns that memory's id."""
    first = deployment.answer([Message("user", QUESTION)], tenant=ALICE)
    deployment.feedback(first.id, 1.0, tenant=ALICE)
    team, _ = deployment.team(ALICE)
    assert learn_from_feedback(deployment.store, team, deployment.run_name(ALICE)) == 1
    for _ in range(2):
        again = deployment.answer([Message("user", QUESTION)], tenant=ALICE)
        assert deployment.feedback(again.id, 1.0, tenant=ALICE, key="immer gut").reinforced == 1
    assert deployment.store is not None
    [own] = [m for m in deployment.store.items(f"{RUN}@{ALICE}/solver") if m.visits == 2]
    assert (own.q, own.meta["writer"]) == (0.75, f"tenant:{ALICE}")
    return own.id


def bob_recalls(deployment: Deployment) -> list[str]:
    bob = deployment.answer([Message("user", QUESTION)], tenant=BOB)
    assert deployment.store is not None
    return list(deployment.store.explain(bob.recall_ids[0], namespace=f"{RUN}@{BOB}/solver")["selected"])


def test_under_quarantine_a_promoted_memory_reaches_no_tenant_until_released(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_spec(tmp_path, "promote = true\npromote_visits = 2", memory='trust = "quarantine"', reply="9999")
    deployment = Deployment(load_spec(spec))
    try:
        own = rate_own_wrong_answers_good(deployment)
    finally:
        deployment.close()
    assert main(["job", str(spec), "--tenant", ALICE, "--once", "--quiet"]) == 0
    assert f"promoted 1 memories of {RUN}@{ALICE}" in capsys.readouterr().out

    deployment = Deployment(load_spec(spec))
    try:
        store = deployment.store
        assert store is not None
        assert store.items(f"{RUN}/solver") == [] and bob_recalls(deployment) == []
        [held] = store.quarantined(f"{RUN}/solver")
        assert held.meta["promoted_id"] == own and held.meta["writer"] == f"promoted:{ALICE}"
        assert held.meta["promoted_writer"] == f"tenant:{ALICE}" and (held.q, held.visits) == (0.0, 0)
        assert store.release(writer=f"promoted:{ALICE}") == 1
        assert bob_recalls(deployment) == [held.id]
        assert (
            store.get(held.id, namespace=f"{RUN}/solver").q,
            store.get(held.id, namespace=f"{RUN}/solver").visits,
        ) == (0.0, 0)
    finally:
        deployment.close()


def test_under_neutral_trust_a_promoted_memory_starts_at_q_init(tmp_path: Path) -> None:
    deployment = Deployment(load_spec(write_spec(tmp_path, "promote = true", memory='trust = "neutral"', reply="9999")))
    try:
        own = rate_own_wrong_answers_good(deployment)
        team, _ = deployment.team(ALICE)
        assert promote(deployment.store, team, min_q=0.5, min_visits=2, tenant=ALICE) == 1
        assert deployment.store is not None
        [moved] = deployment.store.items(f"{RUN}/solver")
        assert moved.meta["promoted_id"] == own and (moved.q, moved.visits) == (0.0, 0)  # not the tenant's 0.75
        assert moved.meta["writer"] == f"promoted:{ALICE}" and bob_recalls(deployment) == [moved.id]
    finally:
        deployment.close()
