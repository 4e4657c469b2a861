"""``[serve] memory = "base"``: what ``evolve run`` trained is what ``evolve serve`` answers from, and the
ratings reinforce it; a key of a second tenant is refused, since its ratings would move the first's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.cli import main
from connectors import ConfigError, Message
from evolve.serve.deployment import Deployment
from evolve.serve.protocols.openai_http import create_app
from evolve.spec import load_spec

TENANT = "Nordlicht-Logistik_Filiale-Zürich"  # 33 characters, as real tenant names are
TASKS = [
    {"id": "harbor-door", "prompt": "What is the door code of the Harbor warehouse?", "answer": "4471"},
    {"id": "quarry-gate", "prompt": "What is the door code of the Quarry gate?", "answer": "7730"},
]


def write_spec(folder: Path, memory: str) -> Path:
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    spec = folder / "spec.toml"
    spec.write_text(
        f"""
[run]
name = "codes of the night shift at Zürich"
database = "sqlite:///{folder / "runs.db"}"
rounds = 2

[model]
chat = "fake/scripted"
options = {{ replies = {{ "Harbor" = "4471", "Quarry" = "1111" }} }}

[embedder]
name = "hash"

[environment]
tasks = "tasks.jsonl"
paraphrase = false

[serve]
memory = "{memory}"
"""
    )
    return spec


def test_the_trained_run_is_served_and_its_memories_are_reinforced(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "base")
    assert main(["run", str(spec), "--quiet"]) == 0
    deployment = Deployment(load_spec(spec))
    try:
        trained = {it.id: it.q for it in deployment.store.items("codes of the night shift at Zürich/solver")}  # type: ignore[union-attr]
        assert trained  # the run wrote memories

        answer = deployment.answer([Message("user", "Door code of the Harbor warehouse?")], tenant=TENANT)
        [step] = answer.steps
        assert step.recall_namespace == "codes of the night shift at Zürich/solver" and answer.recall_ids
        receipt = deployment.feedback(answer.id, 0.0, tenant=TENANT, comment="It was wrong.")
        assert receipt.reinforced > 0

        after = {it.id: it.q for it in deployment.store.items("codes of the night shift at Zürich/solver")}  # type: ignore[union-attr]
        assert [k for k in trained if after[k] < trained[k]]  # the served run's own memories learned
    finally:
        deployment.close()


def test_with_memory_tenant_a_tenant_starts_from_its_own_empty_memory(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "tenant")
    assert main(["run", str(spec), "--quiet"]) == 0
    deployment = Deployment(load_spec(spec))
    try:
        answer = deployment.answer([Message("user", "Door code of the Harbor warehouse?")], tenant=TENANT)
        assert answer.steps[0].recall_namespace == f"codes of the night shift at Zürich@{TENANT}/solver"
        assert deployment.feedback(answer.id, 1.0, tenant=TENANT).reinforced == 0  # nothing there to reinforce
    finally:
        deployment.close()


def test_serving_the_base_run_to_two_tenants_is_refused(tmp_path: Path) -> None:
    deployment = Deployment(load_spec(write_spec(tmp_path, "base")))
    try:
        create_app(deployment, {"sk-one-0001": TENANT, "sk-two-0002": TENANT})  # two keys, one tenant: fine
        with pytest.raises(ConfigError, match='memory = "base" serves the trained run to every key'):
            create_app(deployment, {"sk-one-0001": TENANT, "sk-two-0002": "Another_tenant-Ltd"})
    finally:
        deployment.close()
