"""``--metrics-tenants`` and ``--otel`` on ``evolve serve``, ``mcp`` and ``a2a``: refused where they cannot work,
before anything loads; and the real command scraped and traced (spans to the console exporter)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from apps.cli import main
from tests.support.serve import QUESTION, write_serve_spec


def test_tenant_labels_without_an_operator_key_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = str(write_serve_spec(tmp_path))
    assert main(["serve", spec, "--port", "0", "--key", "sk-cli-alice-0001=alice", "--metrics-tenants"]) == 2
    assert "--metrics-tenants puts tenant names in /metrics" in capsys.readouterr().err
    http = ["mcp", spec, "--transport", "http", "--port", "0", "--key", "sk-cli-alice-0001=alice", "--metrics-tenants"]
    assert main(http) == 2 and "give evolve mcp one (--admin-key KEY" in capsys.readouterr().err
    assert main(["mcp", spec, "--tenant", "alice", "--otel"]) == 2  # stdio has no /metrics and no requests to trace
    assert "--metrics-tenants and --otel are for --transport http" in capsys.readouterr().err


def test_an_unknown_trace_exporter_is_refused_before_the_models_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    assert (
        main(["a2a", str(write_serve_spec(tmp_path)), "--port", "0", "--key", "sk-cli-alice-0001=alice", "--otel"]) == 2
    )
    assert "OTEL_TRACES_EXPORTER must be one of otlp, console, none" in capsys.readouterr().err


def test_evolve_serve_with_otel_serves_metrics_and_sends_its_spans(tmp_path: Path, repo_root: Path) -> None:
    spec = write_serve_spec(tmp_path)
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "codes-gateway"}
    cmd = [sys.executable, "-m", "apps.cli", "serve", str(spec), "--port", "0", "--key", "sk-cli-alice-0001=alice"]
    proc = subprocess.Popen(
        [*cmd, "--otel"], cwd=repo_root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        first = proc.stdout.readline()  # type: ignore[union-attr]
        assert first.startswith("evolve serve: model 'codes' at http://"), first + proc.stdout.read()  # type: ignore[union-attr]
        base = first.rsplit(" ", 1)[1].strip()
        body = {"model": "codes", "messages": [{"role": "user", "content": QUESTION}]}
        headers = {"Authorization": "Bearer sk-cli-alice-0001"}
        answer = httpx.post(f"{base}/chat/completions", json=body, headers=headers, timeout=30).json()
        scraped = httpx.get(f"{base.removesuffix('/v1')}/metrics", timeout=30).text
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=30)
    assert 'evolve_http_requests_total{method="POST",route="/v1/chat/completions",status="200"} 1.0' in scraped
    assert "evolve_answers_total 1.0" in scraped and "alice" not in scraped
    assert '"name": "chat codes"' in output and f'"gen_ai.response.id": "{answer["id"]}"' in output  # flushed on exit
    assert '"service.name": "codes-gateway"' in output and "Traceback" not in output
    assert proc.returncode == 128 + signal.SIGTERM
