"""``/metrics`` of ``evolve serve``, ``evolve mcp --transport http`` and ``evolve a2a``, scraped after real calls
through each protocol's own client: requests by route template and status, the latency histograms, tokens,
ratings, memory size and mean Q per namespace with tenant names folded (and shown only to an operator key when
asked for), jobs by status."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from a2a.types import SendMessageRequest
from prometheus_client.parser import text_string_to_metric_families

from connectors import ConfigError
from evolve.jobs.job import job_counts, take_lease
from evolve.serve.deployment import Deployment
from evolve.serve.metrics import Metrics
from evolve.serve.protocols.openai_http import create_app
from evolve.spec import load_spec
from tests.support.a2a import ZURICH as A2A_ZURICH
from tests.support.a2a import serving_a2a, user_message
from tests.support.mcp import ZURICH, call, serving_mcp
from tests.support.serve import KEY_OF, KEYS, QUESTION, running, write_serve_spec

ADMIN = "sk-test-operator-0009"
USER: Any = [{"role": "user", "content": QUESTION}]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(base: str, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(f"{base}/metrics", headers=headers, timeout=30)


def samples(text: str) -> Samples:
    """Every sample of a scrape by name and labels, parsed as Prometheus parses it."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    """A scripted team with one memory in a tenant's namespace and one in the trained run's."""
    served = Deployment(load_spec(write_serve_spec(tmp_path)))
    assert served.store is not None
    served.store.add("Harbor door code?", "Alice's site plan: 4471.", namespace="codes@alice/solver", q=0.6)
    served.store.add("Harbor door code?", "The trained run's note.", namespace="codes/solver", q=0.2)
    yield served
    served.close()


def post(base: str, tenant: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{base}{path}", json=body, headers={"Authorization": f"Bearer {KEY_OF[tenant]}"}, timeout=30)


def test_evolve_serve_counts_requests_latency_tokens_and_ratings(deployment: Deployment) -> None:
    jobs = partial(job_counts, deployment.engine)
    metrics = Metrics(store=deployment.store, engine=deployment.engine, jobs=jobs)
    assert take_lease(deployment.engine, "codes", holder="cron-a") is not None
    take_lease(deployment.engine, "codes", holder="cron-b")  # the lease is held: this job is skipped
    with running(lambda _: create_app(deployment, KEYS, admin_keys=[ADMIN], metrics=metrics)) as base:
        alice = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY_OF["alice"], max_retries=0)
        bob = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY_OF["bob"], max_retries=0)
        chats = [alice.chat.completions.create(model="codes", messages=USER) for _ in range(2)]
        response = bob.responses.create(model="codes", input=QUESTION)
        rating = {"response_id": chats[0].id, "score": 1.0}
        assert post(base, "alice", "/v1/feedback", rating).json()["applied"]
        assert not post(base, "alice", "/v1/feedback", rating).json()["applied"]  # the same key again
        assert httpx.get(f"{base}/v1/responses/resp_0f1e2d3c", headers={"Authorization": f"Bearer {KEY_OF['bob']}"}).status_code == 404  # fmt: skip
        assert httpx.get(f"{base}/v1/models").status_code == 401
        assert httpx.get(f"{base}/no/such/path-7b1c").status_code == 404
        scraped = scrape(base)  # no key: nothing in it names a tenant
    assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
    found, text = samples(scraped.text), scraped.text
    requests = partial(value, found, "evolve_http_requests_total")
    assert requests(route="/v1/chat/completions", method="POST", status="200") == 2
    assert requests(route="/v1/responses", method="POST", status="200") == 1
    assert requests(route="/v1/feedback", method="POST", status="200") == 2
    assert requests(route="/v1/responses/{response_id}", method="GET", status="404") == 1
    assert requests(route="/v1/models", method="GET", status="401") == 1
    assert requests(route="other", method="GET", status="404") == 1
    assert "resp_0f1e2d3c" not in text and "path-7b1c" not in text  # raw paths never become labels
    assert value(found, "evolve_http_request_seconds_count", route="/v1/chat/completions", method="POST") == 2
    assert value(found, "evolve_answers_total") == 3
    assert value(found, "evolve_recall_seconds_count") == 3 and value(found, "evolve_model_call_seconds_count") == 3
    usage = [c.usage for c in chats]
    assert response.usage is not None and all(u is not None for u in usage)
    prompt = sum(u.prompt_tokens for u in usage if u) + response.usage.input_tokens
    completion = sum(u.completion_tokens for u in usage if u) + response.usage.output_tokens
    assert value(found, "evolve_tokens_total", kind="prompt") == prompt > 0
    assert value(found, "evolve_tokens_total", kind="completion") == completion > 0
    assert value(found, "evolve_ratings_total", outcome="received") == 2
    assert value(found, "evolve_ratings_total", outcome="applied") == 1
    assert value(found, "evolve_ratings_quarantined") == 0
    assert value(found, "evolve_memories", namespace="codes@*/solver") == 1
    assert value(found, "evolve_memories", namespace="codes/solver") == 1
    assert value(found, "evolve_memory_q_mean", namespace="codes/solver") == pytest.approx(0.2)
    assert value(found, "evolve_jobs", status="skipped") == 1
    assert not any(tenant in text for tenant in ("alice", "bob", "carol"))


def test_tenant_labels_are_shown_to_an_operator_key_only(deployment: Deployment) -> None:
    metrics = Metrics(store=deployment.store, tenants=True)
    with running(lambda _: create_app(deployment, KEYS, admin_keys=[ADMIN], metrics=metrics)) as base:
        anyone, tenant, operator = scrape(base), scrape(base, KEY_OF["alice"]), scrape(base, ADMIN)
    assert anyone.status_code == tenant.status_code == 401 and "alice" not in anyone.text + tenant.text
    assert anyone.headers["www-authenticate"].startswith("Bearer")
    assert operator.status_code == 200
    assert value(samples(operator.text), "evolve_memories", namespace="codes@alice/solver") == 1
    with pytest.raises(ConfigError, match="operator key"):  # nobody could scrape them
        create_app(deployment, KEYS, metrics=Metrics(store=deployment.store, tenants=True))


async def test_evolve_mcp_counts_its_requests_recalls_memories_and_ratings(tmp_path: Path) -> None:
    with serving_mcp(write_serve_spec(tmp_path)) as served:
        async with served.session(ZURICH) as session:
            await call(session, "remember", task=QUESTION, outcome="success", what_worked="Site plan: 4471.")
            found = await call(session, "recall", query=QUESTION, k=1)
            await call(session, "feedback", recall_id=found["recall_id"], success=True)
        base = served.url.removesuffix("/mcp")
        denied = httpx.post(f"{base}/mcp", json={})  # no key: a 401, counted under the route
        scraped = scrape(base)
    found_ = samples(scraped.text)
    assert denied.status_code == 401 and scraped.status_code == 200
    assert value(found_, "evolve_http_requests_total", route="/mcp", method="POST", status="200") >= 4
    assert value(found_, "evolve_http_requests_total", route="/mcp", method="POST", status="401") == 1
    assert value(found_, "evolve_recall_seconds_count") == 1
    assert value(found_, "evolve_memories_remembered_total") == 1
    assert value(found_, "evolve_ratings_total", outcome="received") == 1
    assert value(found_, "evolve_ratings_total", outcome="applied") == 1
    assert value(found_, "evolve_memories", namespace="codes@*/solver") == 1
    assert "Zürich" not in scraped.text


async def test_evolve_a2a_counts_its_requests_answers_and_ratings(tmp_path: Path) -> None:
    with serving_a2a(write_serve_spec(tmp_path)) as served:
        async with served.client(A2A_ZURICH) as client:
            (event,) = [e async for e in client.send_message(SendMessageRequest(message=user_message(QUESTION)))]
            task = event.task
            rating = user_message(data={"rating": 1.0}, reference_task_ids=[task.id], context_id=task.context_id)
            [e async for e in client.send_message(SendMessageRequest(message=rating))]
        scraped = scrape(served.url)  # public, as the card is
    found = samples(scraped.text)
    assert scraped.status_code == 200
    assert value(found, "evolve_http_requests_total", route="/", method="POST", status="200") == 2
    assert value(found, "evolve_answers_total") == 1
    assert value(found, "evolve_recall_seconds_count") == 1 and value(found, "evolve_model_call_seconds_count") == 1
    assert value(found, "evolve_tokens_total", kind="completion") > 0
    assert value(found, "evolve_ratings_total", outcome="applied") == 1
    assert "Zürich" not in scraped.text
