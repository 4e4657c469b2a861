"""``Deployment.answer`` gives ``response_format`` to a model that generates under it (a local model's grammar,
``takes_response_format``) as to an OpenAI-compatible server, and to no other: that one is told and checked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from connectors import ChatClient, Message
from connectors.fakes import ScriptedChat
from evolve.serve.deployment import Deployment
from evolve.spec import RunSpec

FORMAT = {"type": "json_schema", "json_schema": {"name": "code", "schema": {"type": "object"}}}


def spec(tmp_path: Path) -> RunSpec:
    return RunSpec.model_validate(
        {
            "run": {"name": "codes", "database": f"sqlite:///{tmp_path / 'serve.db'}"},
            "model": {"chat": "fake/scripted"},
            "embedder": {"name": "hash"},
            "environment": {"tasks": "unused.jsonl"},
            "agents": [{"name": "solver", "system": "Reply with the code only."}],
        }
    )


@pytest.fixture(params=[True, False], ids=["grammar", "prompted"])
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Deployment, ScriptedChat, bool]]:
    model = ScriptedChat(['{"code": "4471"}'], cycle=True)
    if request.param:
        model.takes_response_format = True  # type: ignore[attr-defined]  # as LocalChat and VLLMChat say
    deployment = Deployment(spec(tmp_path), chat=ChatClient(model))
    yield deployment, model, request.param
    deployment.close()


def test_the_format_reaches_a_model_that_generates_under_it_and_no_other(
    served: tuple[Deployment, ScriptedChat, bool],
) -> None:
    deployment, model, grammar = served
    answer = deployment.answer([Message("user", "The door code?")], response_format=FORMAT)
    assert answer.text == '{"code": "4471"}' and len(model.calls) == 1
    messages, params = model.calls[-1]
    assert ("response_format" in params) is grammar
    if grammar:
        assert params["response_format"] == FORMAT
    assert "JSON Schema" in messages[-1].content  # told all the same, and checked all the same
