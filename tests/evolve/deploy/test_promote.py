"""``[serve] promote``: ``evolve job --tenant`` moves a tenant's well-rated memories into the trained run's
shared memory, where every tenant recalls them, once; a spec cannot ask for it without shared memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.cli import main
from connectors import ConfigError, Message
from evolve.deploy.feedback import promote
from evolve.deploy.serving import Deployment
from evolve.spec import load_spec

RUN = "Harbor and Quarry codes — pilot 2026"
ALICE = "Nordlicht-Logistik_Filiale-Zürich"
BOB = "Ärztekammer-Westfalen-Lippe-Münster"
QUESTION = "What is the door code of the Harbor warehouse?"


def write_spec(folder: Path, serve: str) -> Path:
    (folder / "tasks.jsonl").write_text(json.dumps({"id": "harbor", "prompt": QUESTION, "answer": "4471"}) + "\n")
    spec = folder / "spec.toml"
    spec.write_text(
        f"""
[run]
name = "{RUN}"
database = "sqlite:///{folder / "runs.db"}"

[model]
chat = "fake/scripted"
options = {{ replies = {{ "Harbor" = "4471" }} }}

[embedder]
name = "hash"

[environment]
tasks = "tasks.jsonl"
paraphrase = false

[memory]
k1 = 10
k2 = 2
alpha = 0.5

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
