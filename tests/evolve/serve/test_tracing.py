"""OpenTelemetry traces of ``evolve serve``, caught with the SDK's in-memory exporter: a span per request named as
the GenAI conventions name a chat, with the request's and the answer's ``gen_ai.*`` attributes, and the recall,
the model call and the recording as its children; configured from ``OTEL_*`` when asked for, a clear error when the
SDK is missing."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from connectors import ConfigError
from evolve.serve.deployment import Deployment
from evolve.serve.protocols.openai_http import create_app
from evolve.serve.tracing import Tracing
from evolve.spec import load_spec
from tests.support.serve import KEY_OF, KEYS, QUESTION, running, write_serve_spec

USER: Any = [{"role": "user", "content": QUESTION}]


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[tuple[openai.OpenAI, InMemorySpanExporter]]:
    """A client of ``evolve serve`` whose every request is traced into the returned exporter."""
    deployment = Deployment(load_spec(write_serve_spec(tmp_path)))
    assert deployment.store is not None
    deployment.store.add("Harbor door code?", "Site plan: 4471.", namespace="codes@alice/solver")
    spans, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracing = Tracing(provider.get_tracer("test"))
    try:
        with running(lambda _: create_app(deployment, KEYS, tracing=tracing)) as base:
            yield openai.OpenAI(base_url=f"{base}/v1", api_key=KEY_OF["alice"], max_retries=0), spans
    finally:
        deployment.close()


def tree(spans: InMemorySpanExporter, name: str) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The one request span called ``name`` and its children, by start time. A streamed request's span ends just
    after the client read the last event: it is waited for."""
    deadline = time.monotonic() + 10
    while not [s for s in spans.get_finished_spans() if s.name == name] and time.monotonic() < deadline:
        time.sleep(0.01)
    finished = spans.get_finished_spans()
    (root,) = [s for s in finished if s.name == name and s.parent is None]
    assert root.context is not None
    children = [s for s in finished if s.parent is not None and s.parent.span_id == root.context.span_id]
    return root, sorted(children, key=lambda s: s.start_time or 0)


def test_a_chat_is_a_span_with_genai_attributes_and_its_recall_model_call_and_recording_as_children(
    traced: tuple[openai.OpenAI, InMemorySpanExporter],
) -> None:
    client, spans = traced
    completion = client.chat.completions.create(model="codes", messages=USER, temperature=0.2, max_tokens=12, seed=7)
    root, children = tree(spans, "chat codes")
    a = root.attributes or {}
    assert root.kind == SpanKind.SERVER and a["http.route"] == "/v1/chat/completions"
    assert a["http.response.status_code"] == 200 and a["http.request.method"] == "POST"
    assert (a["gen_ai.operation.name"], a["gen_ai.request.model"], a["gen_ai.request.stream"]) == (
        "chat",
        "codes",
        False,
    )
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.max_tokens"], a["gen_ai.request.seed"]) == (0.2, 12, 7)
    assert a["gen_ai.response.id"] == completion.id and a["gen_ai.response.finish_reasons"] == ("stop",)
    assert completion.usage is not None
    assert a["gen_ai.usage.input_tokens"] == completion.usage.prompt_tokens > 0
    assert a["gen_ai.usage.output_tokens"] == completion.usage.completion_tokens > 0
    assert [c.name for c in children] == ["retrieval codes@*/solver", "chat scripted", "record"]
    recall, model, record = children
    assert recall.attributes is not None and recall.attributes["gen_ai.operation.name"] == "retrieval"
    assert recall.attributes["evolve.memories"] == 1 and len(recall.attributes["evolve.recall_ids"]) == 1
    assert model.kind == SpanKind.CLIENT and model.attributes is not None
    assert model.attributes["gen_ai.usage.output_tokens"] == completion.usage.completion_tokens
    assert model.attributes["gen_ai.agent.name"] == "solver"
    assert record.attributes is not None and record.attributes["gen_ai.response.id"] == completion.id
    assert all(
        (root.start_time or 0) <= (c.start_time or 0) <= (c.end_time or 0) <= (root.end_time or 0) for c in children
    )
    assert not any("alice" in s.name or "alice" in str(s.attributes) for s in spans.get_finished_spans())


def test_a_streamed_answer_and_a_failed_request_are_traced_too(
    traced: tuple[openai.OpenAI, InMemorySpanExporter],
) -> None:
    client, spans = traced
    chunks = list(client.chat.completions.create(model="codes", messages=USER, stream=True))
    root, children = tree(spans, "chat codes")
    assert (root.attributes or {})["gen_ai.request.stream"] is True
    assert (root.attributes or {})["gen_ai.response.id"] == chunks[0].id
    assert [c.name for c in children] == ["retrieval codes@*/solver", "chat scripted", "record"]
    spans.clear()
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_unknown")
    span, children = tree(spans, "GET /v1/responses/{response_id}")
    assert (span.attributes or {})["http.response.status_code"] == 404 and children == []
    assert span.status.status_code != StatusCode.ERROR  # a client's mistake is no server failure


def test_tracing_from_the_environment_picks_the_exporter_and_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tracing = Tracing.from_environment("evolve serve", environ={"OTEL_TRACES_EXPORTER": "none"})
    assert tracing.provider is not None and tracing.provider.resource.attributes["service.name"] == "evolve serve"
    tracing.close()
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER must be one of otlp, console, none"):
        Tracing.from_environment("evolve serve", environ={"OTEL_TRACES_EXPORTER": "zipkin"})
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if the otel extra were not installed
    with pytest.raises(ConfigError, match=r"--otel needs OpenTelemetry's SDK: pip install .*\[otel\]"):
        Tracing.from_environment("evolve serve", environ={})
