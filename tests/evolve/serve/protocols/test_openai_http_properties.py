"""Property-based: generated bodies for ``evolve serve`` get an answer or a 4xx in OpenAI's shape, never a 5xx."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.hostile_input import Tally, snapshot
from tests.reliability.spec_and_server import KEY, served_app, server_property


def test_generated_bodies_are_answered_or_refused_with_a_4xx() -> None:
    tally = Tally()
    server_property(120, tally)
    assert tally.foreign == [], "5xx answers"
    assert tally.unnamed == [] and tally.changed == []
    assert tally.ok > 0 and tally.refused > 0


@pytest.mark.parametrize(
    ("raw", "status", "param"),
    [
        (b'{"response_id": "x", "score": NaN}', 400, "score"),
        (b'{"response_id": "x", "score": Infinity}', 400, "score"),
        (b'{"response_id": "chatcmpl-nope", "score": 1}', 404, "response_id"),
        (b'{"response_id": 5, "score": 1}', 400, "response_id"),
        (b"\xff\xfe{}", 400, None),
    ],
)
def test_bad_feedback_bodies_name_the_field_and_leave_the_store(
    tmp_path: Path, raw: bytes, status: int, param: str | None
) -> None:
    with served_app(tmp_path) as (client, deployment):
        before = snapshot(deployment.store)
        response = client.post("/v1/feedback", content=raw, headers={"Authorization": f"Bearer {KEY}"})
        assert response.status_code == status, response.text
        assert response.json()["error"]["param"] == param
        assert snapshot(deployment.store) == before
