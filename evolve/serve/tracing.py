"""OpenTelemetry traces of served requests: off unless a server is given a ``Tracing`` (``--otel``; the ``otel``
extra installs OpenTelemetry's SDK and OTLP exporter).

Each request gets a span (``evolve.serve.protocols.telemetry`` opens it, named ``{method} {route}``, kind SERVER).
A chat completion or a Responses API request renames it ``chat {model}`` and gives it the request's GenAI
semantic-convention attributes (``describe_chat``: ``gen_ai.operation.name``, ``gen_ai.request.model``,
``gen_ai.request.temperature``, ``max_tokens``, ``top_p``, ``seed``...). Once the answer is recorded, the span
gets ``gen_ai.response.id``, ``gen_ai.usage.input_tokens`` and ``output_tokens`` and
``gen_ai.response.finish_reasons``, and one child per piece of the answer's work (``evolve.serve.timing``), with
its real start and end: ``retrieval {namespace}`` for each recall, ``chat {model}`` (kind CLIENT) for each call to
the team's model, and ``record`` for writing the answer down. As on ``/metrics``, a tenant's namespace is
``<run>@*/<agent>`` unless ``tenants`` (``evolve.serve.metrics.namespace_label``).

``Tracing.from_environment`` configures the SDK the standard way: ``OTEL_TRACES_EXPORTER`` (``otlp``, the
default, ``console`` or ``none``), ``OTEL_EXPORTER_OTLP_ENDPOINT`` and the exporter's other variables,
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``; ``OTEL_SDK_DISABLED=true`` turns it off.

Example:
    >>> from opentelemetry.sdk.trace import TracerProvider
    >>> from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    >>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    >>> spans, provider = InMemorySpanExporter(), TracerProvider()
    >>> provider.add_span_processor(SimpleSpanProcessor(spans))
    >>> tracing = Tracing(provider.get_tracer("evolve"))
    >>> with tracing.request("POST", "/v1/chat/completions"):
    ...     describe_chat("codes", {"temperature": 0.2}, stream=False)
    >>> [(s.name, s.attributes["gen_ai.request.temperature"]) for s in spans.get_finished_spans()]
    [('chat codes', 0.2)]
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from connectors import ConfigError
from connectors.install import extra_hint
from evolve.serve.answers import Answer
from evolve.serve.metrics import namespace_label
from evolve.serve.timing import Timed

INSTALL_HINT = f"--otel needs OpenTelemetry's SDK: {extra_hint('otel')}"
EXPORTERS = ("otlp", "console", "none")
REQUEST_ATTRIBUTES = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "max_tokens": "gen_ai.request.max_tokens",
    "seed": "gen_ai.request.seed",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "stop": "gen_ai.request.stop_sequences",
}
"""A request's sampling parameters (``evolve.serve.chat_requests.REQUEST_PARAMS``) as GenAI span attributes."""


def recording_span() -> Any:
    """The current span when one is recording (a traced request's), else None (OpenTelemetry not installed, or
    nothing traced)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    span = trace.get_current_span()
    return span if span.is_recording() else None


def describe_chat(model: str, params: Mapping[str, Any], *, stream: bool) -> None:
    """Name the traced request's span ``chat {model}`` and give it the request's GenAI attributes (nothing
    when the request is not traced)."""
    span = recording_span()
    if span is None:
        return
    span.update_name(f"chat {model}")
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
    attributes["gen_ai.request.stream"] = stream
    for name, attribute in REQUEST_ATTRIBUTES.items():
        value = params.get(name)
        if value is not None:
            attributes[attribute] = [value] if isinstance(value, str) else list(value) if name == "stop" else value
    span.set_attributes(attributes)


def child(work: Timed, *, tenants: bool) -> tuple[str, str, dict[str, Any]]:
    """A piece of an answer's work as a child span: its name, kind (``client`` or ``internal``) and attributes."""
    d = work.detail
    if work.kind == "recall":
        source = namespace_label(str(d.get("namespace", "")), tenants=tenants)
        recall: dict[str, Any] = {
            "gen_ai.operation.name": "retrieval",
            "gen_ai.data_source.id": source,
            "evolve.recall_ids": list(d.get("recall_ids", [])),
            "evolve.memories": d.get("memories", 0),
        }
        return f"retrieval {source}", "internal", recall
    if work.kind == "model":
        call: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": d["model"],
            "gen_ai.agent.name": d.get("caller", ""),
            "gen_ai.response.finish_reasons": list(d.get("finish_reasons", [])),
            "gen_ai.usage.input_tokens": d.get("prompt_tokens", 0),
            "gen_ai.usage.output_tokens": d.get("completion_tokens", 0),
        }
        return f"chat {d['model']}", "client", call
    return work.kind, "internal", {"gen_ai.response.id": d.get("response_id", "")}


class Tracing:
    """Spans of served requests through ``tracer`` (an OpenTelemetry tracer); a ``Deployment`` watcher.

    Args:
        tracer: where spans go (``TracerProvider.get_tracer(...)``).
        tenants: recall spans name tenants' namespaces as they are (default: ``<run>@*/<agent>``).
        provider: the tracer's provider when this object owns it: ``close()`` flushes and shuts it down.

    Example:
        >>> # tracing = Tracing.from_environment("evolve serve")   # OTEL_* configure the exporter
        >>> # app = create_app(deployment, keys, tracing=tracing)
    """

    def __init__(self, tracer: Any, *, tenants: bool = False, provider: Any = None) -> None:
        self.tracer, self.tenants, self.provider = tracer, tenants, provider

    @classmethod
    def from_environment(
        cls, service: str, *, tenants: bool = False, environ: Mapping[str, str] = os.environ
    ) -> Tracing:
        """Tracing through the SDK, configured by the ``OTEL_*`` variables (see the module), service ``service``
        unless ``OTEL_SERVICE_NAME`` names it.

        Raises:
            ConfigError: OpenTelemetry's SDK (or, for ``otlp``, its OTLP exporter) is not installed, or
                ``OTEL_TRACES_EXPORTER`` names an exporter other than ``otlp``, ``console`` or ``none``.
        """
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as e:
            raise ConfigError(INSTALL_HINT) from e
        exporter = span_exporter(environ.get("OTEL_TRACES_EXPORTER", "otlp"))
        provider = TracerProvider(
            resource=Resource.create({} if environ.get("OTEL_SERVICE_NAME") else {"service.name": service})
        )
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider.get_tracer("evolve.serve"), tenants=tenants, provider=provider)

    @contextmanager
    def request(self, method: str, route: str) -> Iterator[Any]:
        """The span of one request, current while the block runs (its children attach to it)."""
        from opentelemetry.trace import SpanKind

        attributes = {"http.request.method": method, "http.route": route}
        with self.tracer.start_as_current_span(
            f"{method} {route}", kind=SpanKind.SERVER, attributes=attributes
        ) as span:
            yield span

    def answered(self, answer: Answer) -> None:
        """The recorded answer's response id, usage and finish reason on the request's span, and its work as
        children (a ``Deployment`` watcher; nothing outside a traced request)."""
        from opentelemetry.trace import SpanKind, Status, StatusCode

        span = recording_span()
        if span is None:
            return
        span.set_attributes({
            "gen_ai.response.id": answer.id,
            "gen_ai.usage.input_tokens": answer.usage.prompt_tokens,
            "gen_ai.usage.output_tokens": answer.usage.completion_tokens,
            "gen_ai.response.finish_reasons": [answer.finish_reason],
            "evolve.prompt_version": answer.prompt_version,
        })  # fmt: skip
        kinds = {"client": SpanKind.CLIENT, "internal": SpanKind.INTERNAL}
        for work in answer.work:
            name, kind, attributes = child(work, tenants=self.tenants)
            start = int(work.started * 1e9)
            piece = self.tracer.start_span(name, kind=kinds[kind], attributes=attributes, start_time=start)
            if "error" in work.detail:
                piece.set_status(Status(StatusCode.ERROR, str(work.detail["error"])))
            piece.end(end_time=start + int(work.seconds * 1e9))

    def rated(self, applied: bool) -> None:
        """A rating taken during the request: ``evolve.rating.applied`` on its span."""
        span = recording_span()
        if span is not None:
            span.set_attribute("evolve.rating.applied", applied)

    def close(self) -> None:
        """Send the spans still buffered and shut the provider down, when this object made it."""
        if self.provider is not None:
            self.provider.shutdown()


def span_exporter(name: str) -> Any:
    """The SDK exporter ``OTEL_TRACES_EXPORTER`` names (None for ``none``)."""
    chosen = name.strip().lower()
    if chosen not in EXPORTERS:
        raise ConfigError(f"OTEL_TRACES_EXPORTER must be one of {', '.join(EXPORTERS)}, got {name!r:.40}")
    if chosen == "none":
        return None
    if chosen == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as e:
        raise ConfigError(f"OTEL_TRACES_EXPORTER=otlp needs OpenTelemetry's OTLP exporter: {extra_hint('otel')} "
                          "(or OTEL_TRACES_EXPORTER=console)") from e  # fmt: skip
    return OTLPSpanExporter()


__all__ = ["EXPORTERS", "INSTALL_HINT", "Tracing", "child", "describe_chat", "recording_span", "span_exporter"]
