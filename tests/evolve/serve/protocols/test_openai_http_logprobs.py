"""``logprobs: true`` through ``evolve serve`` to an OpenAI-compatible model: the upstream is asked for them
and the app gets the answering agent's tokens and log-probabilities back in OpenAI's shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.fake_openai import FakeOpenAIServer, Reply, chat_body
from tests.support.serve import QUESTION, serving, write_serve_spec


def test_logprobs_are_asked_of_the_upstream_and_passed_back(tmp_path: Path) -> None:
    def answer(request: dict[str, Any]) -> Reply:
        return Reply(200, chat_body("4471", logprobs=[-0.25, -1.5] if request.get("logprobs") else None))

    with FakeOpenAIServer(answer) as upstream:
        model = f'chat = "openai/upstream-model"\nbase_url = "{upstream.url}"\noptions = {{ retries = 0 }}'
        with serving(write_serve_spec(tmp_path, model=model)) as live:
            client = live.client("alice")
            messages: Any = [{"role": "user", "content": QUESTION}]
            scored = client.chat.completions.create(model="codes", messages=messages, logprobs=True)
            plain = client.chat.completions.create(model="codes", messages=messages)
    assert [r["json"].get("logprobs") for r in upstream.requests] == [True, None]
    content = scored.choices[0].logprobs.content  # type: ignore[union-attr]
    assert [(t.token, t.logprob) for t in content or []] == [("t0", -0.25), ("t1", -1.5)]
    assert plain.choices[0].logprobs is None
