"""Spec files and server bodies: the rest of the bad-input harness (``tests.reliability.hostile_input``).

``spec_property`` feeds ``load_spec`` generated TOML documents (one field given a wrong type, an
out-of-range or non-finite number, odd Unicode, an unknown key, or bytes that are not TOML at all):
each loads, or raises ``ConfigError`` naming the field. ``server_property`` posts generated bodies to
``/v1/chat/completions`` and ``/v1/feedback``: each is answered, or refused with a 4xx in OpenAI's
error shape, and a refused body leaves the store unchanged. ``tests/evolve/test_spec_properties.py`` and
``tests/evolve/serve/protocols/test_openai_http_properties.py`` assert on them; ``bench/reliability_input.py``
counts them.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.errors import ConfigError
from evolve.spec import RunSpec, load_spec
from tests.reliability.hostile_input import HOSTILE, SURROGATES, Tally, snapshot

BASE_SPEC = {
    "run": {"name": "props", "rounds": 1},
    "model": {"chat": "fake/scripted", "max_tokens": 12},
    "embedder": {"name": "hash"},
    "environment": {"tasks": "unused.jsonl"},
    "memory": {"k1": 10, "k2": 2},
    "agents": [{"name": "solver", "system": "Reply with the code only."}],
}
FIELDS = [(section, name) for section, model in RunSpec.model_fields.items()
          if hasattr(model.annotation, "model_fields") for name in model.annotation.model_fields]  # fmt: skip
ODD = st.one_of(
    st.text(max_size=12), st.sampled_from(HOSTILE[:-2] + SURROGATES), st.integers(), st.booleans(),
    st.sampled_from([math.nan, math.inf, -math.inf, -1, 0, 10**30, 1e308]), st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(), max_size=1), st.floats(),
)  # fmt: skip


def toml_value(value: Any) -> str:
    """A TOML literal for ``value`` (JSON strings are TOML basic strings; a surrogate makes the file invalid)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (int, float, str)):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_document(spec: dict[str, Any]) -> str:
    lines = []
    for section, body in spec.items():
        for table in body if isinstance(body, list) else [body]:
            lines.append(f"[[{section}]]" if isinstance(body, list) else f"[{section}]")
            lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


@st.composite
def spec_files(draw: st.DrawFn) -> tuple[bytes, str | None]:
    """A spec file's bytes and the field it got wrong (None: the whole file is garbage)."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.one_of(st.binary(max_size=40), st.just(b"\xff\xfe[run]\n"))), None
    spec = json.loads(json.dumps(BASE_SPEC))
    section, name = draw(st.one_of(st.sampled_from(FIELDS), st.tuples(st.sampled_from(list(BASE_SPEC)), st.text(
        st.characters(codec="utf-8"), min_size=1, max_size=8))))  # fmt: skip
    target = spec.setdefault(section, {})
    (target[0] if isinstance(target, list) else target)[name] = draw(ODD)
    return toml_document(spec).encode("utf-8", "surrogatepass"), name


def check_spec(raw: bytes, field: str | None, folder: Path, tally: Tally) -> None:
    path = folder / "spec.toml"
    path.write_bytes(raw)
    try:
        load_spec(path)
        tally.ok += 1
    except ConfigError as e:
        tally.refused += 1
        message = str(e)
        if str(path) not in message or ("not valid TOML" not in message and field is not None and field not in message):
            tally.unnamed.append(f"spec field {field!r}: {message[:200]}")
    except Exception as e:  # the property under test
        tally.foreign.append(f"spec field {field!r}: {type(e).__name__}: {str(e)[:200]}")


def spec_property(max_examples: int, tally: Tally) -> None:
    with tempfile.TemporaryDirectory() as folder:

        @settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(case=spec_files())
        def prop(case: tuple[bytes, str | None]) -> None:
            check_spec(case[0], case[1], Path(folder), tally)

        prop()


def spec_tally(max_examples: int) -> Tally:
    tally = Tally()
    spec_property(max_examples, tally)
    return tally


# ---- server bodies ------------------------------------------------------------------------------------

KEY = "sk-props-0001"
CHAT = {"model": "props", "messages": [{"role": "user", "content": "What is the Harbor door code?"}]}
FEEDBACK = {"response_id": "chatcmpl-unknown", "score": 1.0}
RAW = [b"", b"{", b"\xff\xfe{}", b"null", b"[]", b'"text"', b'{"response_id": "x", "score": NaN}',
       b'{"response_id": "x", "score": Infinity}', b'{"response_id": "x", "score": 1e999}']  # fmt: skip


@contextmanager
def served_app(folder: Path) -> Iterator[Any]:
    """A TestClient over ``evolve serve``'s app for a scripted team (it answers anything)."""
    from starlette.testclient import TestClient

    from evolve.serve.deployment import Deployment
    from evolve.serve.protocols.openai_http import create_app

    spec = json.loads(json.dumps(BASE_SPEC))
    spec["run"]["database"] = f"sqlite:///{folder / 'serve.db'}"
    spec["model"]["options"] = {"replies": {"Harbor": "4471"}, "default": "ok"}
    (folder / "serve.toml").write_text(toml_document(spec))
    deployment = Deployment(load_spec(folder / "serve.toml"))
    with TestClient(create_app(deployment, {KEY: "alice"}), raise_server_exceptions=False) as client:
        yield client, deployment


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    """A path and a body: a valid one with one field replaced or added, or raw bytes."""
    path = draw(st.sampled_from(["/v1/chat/completions", "/v1/feedback"]))
    if draw(st.integers(0, 4)) == 0:
        return path, draw(st.one_of(st.sampled_from(RAW), st.binary(max_size=30)))
    body = json.loads(json.dumps(CHAT if path.endswith("completions") else FEEDBACK))
    keys = ["model", "messages", "temperature", "max_tokens", "n", "stream"] if "messages" in body else list(body)
    value = draw(st.one_of(ODD, st.just("x" * 30_000), st.just([{"role": "user"}]), st.just([{"role": 5}])))
    body[draw(st.sampled_from([*keys, "comment", "key", "unknown"]))] = value
    text = json.dumps(body, ensure_ascii=draw(st.booleans()))  # NaN and Infinity literals included
    return path, text.encode("utf-8", "surrogatepass")


def check_body(client: Any, deployment: Any, path: str, raw: bytes, tally: Tally) -> None:
    before = snapshot(deployment.store)
    response = client.post(path, content=raw, headers={"Authorization": f"Bearer {KEY}"})
    where = f"{path} {raw[:80]!r}"
    if response.status_code >= 500:
        tally.foreign.append(f"{where}: {response.status_code} {response.text[:200]}")
    elif response.status_code >= 400:
        tally.refused += 1
        error = response.json().get("error", {})
        if set(error) != {"message", "type", "param", "code"} or not error["message"]:
            tally.unnamed.append(f"{where}: {response.status_code} {response.text[:200]}")
        if snapshot(deployment.store) != before:
            tally.changed.append(f"{where}: refused with {response.status_code} but changed the store")
    else:
        tally.ok += 1


def server_property(max_examples: int, tally: Tally) -> None:
    with tempfile.TemporaryDirectory() as folder, served_app(Path(folder)) as (client, deployment):

        @settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(case=bodies())
        def prop(case: tuple[str, bytes]) -> None:
            check_body(client, deployment, case[0], case[1], tally)

        prop()


def server_tally(max_examples: int) -> Tally:
    tally = Tally()
    server_property(max_examples, tally)
    return tally
