"""Every test runs isolated: its own EVOLVE_HOME and working directory, no API keys, no hub access.

The converted SmolLM2 folder is the one cache shared across tests (EVOLVE_MODEL_CACHE, or the user's
cache): it is a pure function of the installed model package, and converting it takes ~20 s.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.isolation import isolated  # noqa: F401  (autouse: every test gets it)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """One PostgreSQL + pgvector server for the whole session (``tests/support/postgres.py``); its admin URL.
    A server that cannot start fails every test that asked for it, with the reason: never a skip."""
    from tests.support.postgres import throwaway_server

    with throwaway_server() as url:
        yield url


_pg_databases = itertools.count(1)


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test (``postgresql+psycopg://…``), dropped after it."""
    from tests.support.postgres import create_database, drop_database

    name = f"evolve_test_{os.getpid()}_{next(_pg_databases)}"
    url = create_database(pg_server, name)
    yield url
    drop_database(pg_server, name)


STAR_WORDS = [
    "system",
    "user",
    "assistant",
    ":",
    "say",
    "the",
    "word",
    "star",
    "moon",
    "sun",
    "tree",
    "Reply",
    "one",
    ".",
]
"""The whole vocabulary of ``tiny_local_model``: enough for "say the word star" tasks and their prompts."""


@pytest.fixture(scope="session")
def tiny_local_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with a word tokenizer, saved as a local model folder (``local/<folder>``).

    The bare model never answers "star"; a MARFT run of a few seconds teaches it to.
    """
    import torch

    from optimizers.marft.tiny import tiny_llama, word_tokenizer

    torch.set_num_threads(1)  # tiny models train fastest on one thread
    folder = tmp_path_factory.mktemp("tiny-local-model")
    tokenizer = word_tokenizer(STAR_WORDS)
    tiny_llama(len(tokenizer), seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``gpu`` tests need CUDA and ``vllm`` tests need vLLM; where they are missing, say so and skip.

    ``make test`` deselects both (CI has neither); ``make test-gpu`` runs them on a GPU machine.
    """
    needs = {
        "gpu": (_cuda, "needs a CUDA GPU (run make test-gpu on a GPU machine)"),
        "vllm": (_vllm, "needs vLLM installed in this environment"),
    }
    have: dict[str, bool] = {}
    for item in items:
        for marker, (probe, why) in needs.items():
            if marker in item.keywords:
                if marker not in have:
                    have[marker] = probe()
                if not have[marker]:
                    item.add_marker(pytest.mark.skip(reason=why))
