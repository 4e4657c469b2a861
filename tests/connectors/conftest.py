"""Shared fixtures for the connector tests.

- ``openai_server``: a real OpenAI-compatible HTTP server on 127.0.0.1 (stdlib ``http.server`` in a
  thread) that answers from a script — status codes, headers, bodies and delays per request — and
  records what it received. The real ``openai`` SDK talks to it.
- ``tiny_model_dir`` / ``tiny_adapter_dir``: a tiny Llama (hidden 32, 2 layers) with a tiny byte-level
  BPE tokenizer and a chat template, all built in code; and a LoRA adapter with non-zero weights.
- ``smollm2_dir``: the converted SmolLM2 folder (session-scoped; converts once per machine).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_openai import FakeOpenAIServer


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "what is the capital of france? paris is the capital of france.",
    "open the door, take the key, go north, look around",
    "one two three four five six seven eight nine ten",
    "user assistant system hello world answer question",
] * 20


def build_tiny_tokenizer() -> Any:
    """A byte-level BPE tokenizer trained in code on a few sentences (ASCII only; ~200 tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<pad>", "<|im_start|>", "<|im_end|>"])
    core.train_from_iterator(CORPUS + [CHAT_TEMPLATE], trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<|im_end|>", bos_token="<|im_start|>"
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_tiny_llama(tokenizer: Any, seed: int = 0) -> Any:
    """A 2-layer Llama with hidden size 32, randomly initialised with a fixed seed."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.5,  # peaked logits: no near-ties for greedy decoding to trip over
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = build_tiny_tokenizer()
    build_tiny_llama(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_adapter_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter whose A and B are both random (peft's default leaves B = 0, a no-op)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("tiny-lora")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, local_files_only=True)
    torch.manual_seed(1)
    config = LoraConfig(r=4, lora_alpha=32, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The converted SmolLM2 folder in the shared model cache (converted once per machine, ~20 s)."""
    from connectors.smollm2 import model_cache_dir, smollm2_path

    return smollm2_path(cache_dir=model_cache_dir())
