"""From serving to the job: what users rate through ``evolve serve`` is learned by the tenant's next job."""

from __future__ import annotations

import json
from pathlib import Path

from apps.cli import main
from connectors import Message
from evolve.jobs.job import job_history
from evolve.serve.deployment import Deployment
from evolve.spec import load_spec

TASKS = [{"id": "harbor-door", "prompt": "What is the door code of the Harbor warehouse?", "answer": "4471"}]


def write_spec(folder: Path) -> Path:
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    spec = folder / "spec.toml"
    spec.write_text(
        f"""
[run]
name = "codes"
database = "sqlite:///{folder / "runs.db"}"

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
"""
    )
    return spec


def test_the_tenants_job_writes_its_rated_answers_into_its_memory_once(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    deployment = Deployment(load_spec(spec))
    answer = deployment.answer([Message("user", "Door code of the Quarry gate?")], tenant="alice")
    deployment.feedback(answer.id, 0.0, tenant="alice", comment="The Quarry gate code is 7730.")
    deployment.close()

    assert main(["job", str(spec), "--once", "--quiet", "--tenant", "alice"]) == 0
    assert main(["job", str(spec), "--once", "--quiet", "--tenant", "alice"]) == 0

    deployment = Deployment(load_spec(spec))
    store = deployment.store
    assert store is not None
    alice = store.items("codes@alice/solver")
    served = [it for it in alice if it.id.startswith("served:")]
    assert len(served) == 1 and served[0].success is False  # learned once, by the first job
    assert "The Quarry gate code is 7730." in served[0].experience
    assert len(alice) == 1 + 2  # and one experience per task attempt of each round
    assert store.items("codes/solver") == []  # the spec's own run (no tenant) learned nothing from alice
    assert [j.status for j in job_history(deployment.engine, "codes@alice")] == ["done", "done"]
    deployment.close()
