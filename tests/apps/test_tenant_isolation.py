"""Two tenants (alice, bob) on one deployment try to read and reinforce each other's memories, through
the live ``evolve serve`` (the real openai SDK), ``Deployment`` directly, ``evolve memory export``, the
playground's data layer and ``evolve job --tenant``; crafted tenant names try to reach alice's run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx2
import openai
import pytest

from apps import playground_data as data
from apps.cli import main
from connectors import ConfigError, Message, StoreError
from evolve.run_log import list_runs
from evolve.serve.deployment import Deployment
from evolve.serve.protocols.keys import check_keys
from evolve.spec import RunSpec, check_tenant, load_spec
from tests.reliability.security_probes import CRAFTED, QUESTION, DeploymentSurface, isolation_probe, q_state, seed
from tests.support.serve import KEY_OF, Served, serving, write_serve_spec

SPEC = RunSpec.model_validate({"run": {"name": "codes"}, "environment": {"tasks": "unused.jsonl"}})


class HttpSurface:
    """The isolation probe's view of a live ``evolve serve``: the openai SDK with each tenant's key."""

    def __init__(self, served: Served) -> None:
        self.served = served

    def answer(self, tenant: str) -> tuple[str, str, list[str]]:
        completion = self.served.client(tenant).chat.completions.create(
            model="codes", messages=[{"role": "user", "content": QUESTION}]
        )
        extension = completion.model_extra["evolve"]  # type: ignore[index]
        return completion.id, completion.choices[0].message.content or "", extension["recall_ids"]

    def feedback(self, tenant: str, response_id: str) -> str | None:
        response = httpx2.post(
            f"{self.served.url}/feedback",
            json={"response_id": response_id, "score": 0.0, "key": f"probe-{tenant}"},
            headers={"Authorization": f"Bearer {KEY_OF[tenant]}"},
            timeout=30,
        )
        if response.status_code == 200:
            return None
        return f"{response.status_code} {response.text.replace(response_id, '<id>')}"

    def response(self, tenant: str, response_id: str) -> str | None:
        """The server exposes no read of a response by id: the only way in is feedback, probed above;
        the recorded responses are checked through the deployment, as an operator would."""
        try:
            self.served.deployment.response(response_id, tenant=tenant)
        except Exception as e:  # UnknownResponse
            return str(e).replace(response_id, "<id>")
        return None


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with serving(write_serve_spec(tmp_path)) as live:
        yield live


def test_two_tenants_on_a_live_server_cannot_read_or_reinforce_each_other(served: Served) -> None:
    report = isolation_probe(HttpSurface(served), served.deployment)
    assert report.problems == []
    assert report.reads_attempted >= 8 and report.reads_succeeded == 0
    assert report.reinforcements_attempted >= 4 and report.reinforcements_changed_q == 0
    assert report.names_tried == len(CRAFTED) and report.names_reaching == 0


def test_feedback_on_another_tenants_response_is_the_same_404_as_an_unknown_id(served: Served) -> None:
    alice = served.client("alice").chat.completions.create(
        model="codes", messages=[{"role": "user", "content": QUESTION}]
    )
    bob = openai.OpenAI(base_url=served.url, api_key=KEY_OF["bob"], max_retries=0)
    errors = []
    for response_id in (alice.id, "chatcmpl-000000000000000000000000"):
        with pytest.raises(openai.NotFoundError) as caught:
            bob.post("/feedback", body={"response_id": response_id, "score": 1}, cast_to=object)
        errors.append(json.dumps(caught.value.body).replace(response_id, "<id>"))
    assert errors[0] == errors[1]  # nothing tells bob that alice's id exists


def test_two_tenants_on_a_deployment_cannot_read_or_reinforce_each_other(tmp_path: Path) -> None:
    deployment = Deployment(load_spec(write_serve_spec(tmp_path)))
    try:
        report = isolation_probe(DeploymentSurface(deployment), deployment, rounds=3)
    finally:
        deployment.close()
    assert report.problems == [] and report.reads_attempted == 12 and report.reinforcements_attempted == 6


def test_bobs_recall_log_shows_only_his_namespace(tmp_path: Path) -> None:
    deployment = Deployment(load_spec(write_serve_spec(tmp_path)))
    store = deployment.store
    assert store is not None
    alice_ids, bob_ids = seed(deployment, "alice"), seed(deployment, "bob")
    answer = deployment.answer([Message("user", QUESTION)], tenant="bob")
    (recall_id,) = answer.recall_ids
    logged = store.explain(recall_id, namespace="codes@bob/solver")
    assert logged["namespace"] == "codes@bob/solver"
    with pytest.raises(StoreError, match="unknown recall id"):  # alice cannot read bob's recall log by its id
        store.explain(recall_id, namespace="codes@alice/solver")
    assert {c["id"] for c in logged["candidates"]} <= set(bob_ids) and not set(logged["selected"]) & set(alice_ids)
    prompt = deployment.chat.backend.calls[-1][0][-1].content  # type: ignore[attr-defined]
    assert "BOB-SECRET" in prompt and "ALICE-SECRET" not in prompt
    deployment.close()


@pytest.mark.parametrize("name", CRAFTED)
def test_a_crafted_tenant_name_is_refused_or_isolated(name: str) -> None:
    try:
        run = SPEC.for_tenant(name).run.name
    except ConfigError as e:
        assert "tenant name" in str(e)
        return
    assert run != "codes@alice" and "/" not in run and run.count("@") == 1


@pytest.mark.parametrize("name", ["alice@x", "a/b", "..", "../x", " a", "a b", "a\n", "", "a" * 65, "\u0430lice"])
def test_unsafe_tenant_names_get_a_clear_error(name: str) -> None:
    with pytest.raises(ConfigError, match="a tenant name is 1-64 letters"):
        check_tenant(name)


def test_tenants_that_differ_only_in_case_are_refused() -> None:
    with pytest.raises(ConfigError, match="differ only in case"):
        check_keys({"sk-one-000001": "alice", "sk-two-000002": "Alice"})
    assert check_keys({"sk-one-000001": "alice", "sk-two-000002": "bob"}) == {
        "sk-one-000001": "alice",
        "sk-two-000002": "bob",
    }


def test_memory_export_of_a_namespace_holds_only_that_tenants_memories(tmp_path: Path) -> None:
    spec = write_serve_spec(tmp_path)
    deployment = Deployment(load_spec(spec))
    alice_ids, bob_ids = seed(deployment, "alice"), seed(deployment, "bob")
    deployment.close()
    out = tmp_path / "alice.jsonl"
    db = f"sqlite:///{tmp_path / 'serve.db'}"
    args = ["memory", "export", str(out), "--db", db, "--embedder", "hash", "--namespace", "codes@alice/solver"]
    assert main(args) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    assert {r["id"] for r in records} == set(alice_ids) and {r["namespace"] for r in records} == {"codes@alice/solver"}
    assert "BOB-SECRET" not in out.read_text() and not set(bob_ids) & {r["id"] for r in records}


def test_the_playground_shows_a_tenant_its_own_run_only() -> None:
    names = ["codes", "codes@alice", "codes@bob"]
    assert data.visible_runs(names, "codes@bob", tenant=True) == ["codes@bob"]
    assert data.visible_runs(names, "codes@carol", tenant=True) == []
    assert data.visible_runs(names, "codes", tenant=False) == names  # the operator sees every run
    rows = data.memory_rows([])
    assert data.filter_rows(rows, data.MemoryFilter(namespace="codes@bob/solver")) == []


def test_a_tenants_job_touches_only_its_own_run_and_memories(tmp_path: Path) -> None:
    spec = write_job_spec(tmp_path)
    deployment = Deployment(load_spec(spec))
    alice_ids = seed(deployment, "alice")
    alice_answer = deployment.answer([Message("user", QUESTION)], tenant="alice")
    deployment.feedback(alice_answer.id, 1.0, tenant="alice", comment="alice's lesson")
    before = q_state(deployment, alice_ids)
    deployment.close()

    assert main(["job", str(spec), "--once", "--quiet", "--tenant", "bob"]) == 0

    deployment = Deployment(load_spec(spec))
    store = deployment.store
    assert store is not None
    assert q_state(deployment, alice_ids) == before  # bob's round recalled and reinforced none of alice's
    assert not [it for it in store.items("codes@alice/solver") if it.id.startswith("served:")]  # queue untouched
    assert all("alice's lesson" not in it.experience for it in store.items("codes@bob/solver"))
    assert set(list_runs(deployment.engine)) == {"codes@bob"}
    deployment.close()


def write_job_spec(folder: Path) -> Path:
    task = {"id": "harbor-door", "prompt": QUESTION, "answer": "4471"}
    (folder / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    spec = write_serve_spec(folder)
    spec.write_text(spec.read_text().replace('tasks = "unused.jsonl"', 'tasks = "tasks.jsonl"\nparaphrase = false'))
    return spec
