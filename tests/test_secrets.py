"""API keys, serve bearer keys and database passwords never appear in logs, errors, exports or rows."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx2
import openai
import pytest

from connectors import ConfigError, make_engine
from connectors.openai_chat import translate_error
from connectors.redact import redact, redact_url
from tests.reliability.secret_probes import API_KEY, DB_PASSWORD, DB_URL, secrets_probe, upstream
from tests.support.serve import KEYS, serving, write_serve_spec


def test_no_secret_in_logs_errors_exports_or_database_rows(tmp_path: Path) -> None:
    report = secrets_probe(tmp_path)
    assert report["counts"] == {"run": 0, "serve": 0, "database url": 0, "logs": 0}
    texts = report["texts"]
    assert len(texts["logs"]) > 10 and any("DEBUG" in line for line in texts["logs"])  # DEBUG was on
    assert (
        texts["run"][0].startswith("JobResult(status='ran'") and "success_rate=1.0" in texts["run"][0]
    )  # a real round
    assert any("HTTP 500" in t for t in texts["serve"]) and any("HTTP 401" in t for t in texts["serve"])
    assert any('"format": "evolve.memory"' in t or "evolve.memory" in t for t in texts["serve"])  # the export
    assert any("user:***@127.0.0.1" in t for t in texts["database url"])  # named, with the password masked


def test_the_fake_upstream_really_echoes_the_key_so_the_probe_can_fail() -> None:
    client = openai.OpenAI(api_key=API_KEY, base_url="http://upstream.test/v1", max_retries=0,
                           http_client=httpx2.Client(transport=httpx2.MockTransport(upstream)))  # fmt: skip
    for status, word in ((401, "FAIL401"), (500, "FAIL500")):
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="codes", messages=[{"role": "user", "content": word}])
        assert API_KEY in str(caught.value)  # the SDK's own error carries it ...
        ours = translate_error(caught.value, "openai/m", [API_KEY])
        assert API_KEY not in str(ours) and API_KEY not in repr(ours) and f"HTTP {status}" in str(ours)  # ... ours not


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://user:SECRETPW@host/db", "postgresql://user:***@host/db"),
        (
            "postgresql+psycopg://u:p%40ss:w@h:5432/d?sslmode=require",
            "postgresql+psycopg://u:***@h:5432/d?sslmode=require",
        ),
        ("user:SECRETPW@host/db", "user:***@host/db"),
        ("sqlite:////tmp/evolve.db", "sqlite:////tmp/evolve.db"),
        ("postgresql://user@host/db", "postgresql://user@host/db"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ],
)
def test_redact_url_masks_only_the_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_masks_given_secrets_and_bearer_tokens() -> None:
    text = f"key {API_KEY} in Authorization: Bearer sk-serve-abc123 at postgresql://u:{DB_PASSWORD}@h/d"
    out = redact(text, [API_KEY, None, "ab"])
    assert API_KEY not in out and "sk-serve-abc123" not in out and DB_PASSWORD not in out
    assert out.count("***") == 3 and "key *** in" in out


@pytest.mark.parametrize(
    "url",
    [DB_URL.replace("postgresql+psycopg", "nosuchdb"), f"user:{DB_PASSWORD}@host/db", "mysql://u:SECRETPW@h/d"],
)
def test_a_bad_database_url_is_a_config_error_without_its_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make_engine(url)
    assert DB_PASSWORD not in str(caught.value) and DB_PASSWORD not in repr(caught.value)
    assert caught.value.__cause__ is None and "***" in str(caught.value)  # the driver's text is not chained


def test_serve_never_logs_or_echoes_bearer_keys(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    wrong = "sk-wrong-SECRETKEY"
    bodies = []
    with caplog.at_level(logging.DEBUG), serving(write_serve_spec(tmp_path)) as served:
        for key in [*KEYS, wrong]:
            auth = {"Authorization": f"Bearer {key}"}
            question = {"model": "codes", "messages": [{"role": "user", "content": "Harbor door?"}]}
            for path, body in (("/chat/completions", question), ("/feedback", {"response_id": "x", "score": 2})):
                r = httpx2.post(f"{served.url}{path}", content=json.dumps(body), headers=auth, timeout=30)
                bodies.append(r.text)
            lunch = {"model": "codes", "messages": [{"role": "user", "content": "lunch?"}]}  # the model fails: 502
            bodies.append(httpx2.post(f"{served.url}/chat/completions", json=lunch, headers=auth, timeout=30).text)
    assert any('"invalid_api_key"' in b for b in bodies) and any("upstream_error" in b for b in bodies)
    for secret in [*KEYS, wrong]:
        assert secret not in caplog.text and all(secret not in b for b in bodies)
