"""LocalChat on a tiny Llama built in code (fast), and on the real SmolLM2 (slow)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from connectors import ConfigError, load_chat
from connectors.local_chat import LocalChat
from connectors.sampling import Penalties, nucleus_probs, penalize, truncate_at_stop
from connectors.types import Message

PROMPTS = [
    [Message("user", "open the door")],
    [Message("system", "answer briefly"), Message("user", "what is the capital of france?")],
    [Message("user", "one two three four five six seven eight nine ten")],
    [Message("user", "hello")],
    [Message("user", "the quick brown fox jumps over the lazy dog and the key")],
]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> LocalChat:
    return LocalChat(str(tiny_model_dir), max_new_tokens=12, batch_size=2)


def test_batched_greedy_equals_one_at_a_time(tiny: LocalChat) -> None:
    batched = tiny.complete_batch(PROMPTS)  # 5 prompts of different lengths, chunks of 2: padding in play
    single = [tiny.complete(p) for p in PROMPTS]
    assert [c.text for c in batched] == [c.text for c in single]
    assert [c.usage for c in batched] == [c.usage for c in single]
    for b, s in zip(batched, single, strict=True):
        assert b.logprobs is not None and s.logprobs is not None
        assert b.logprobs == pytest.approx(s.logprobs, abs=1e-4)


def test_completion_fields(tiny: LocalChat) -> None:
    c = tiny.complete(PROMPTS[0], max_tokens=5)
    assert c.model == tiny.name == f"local/{tiny.model}"
    assert c.usage.completion_tokens <= 5 and c.usage.prompt_tokens > 0 and c.usage.cost == 0.0
    assert c.finish_reason in ("stop", "length")
    assert c.logprobs is not None and len(c.logprobs) == c.usage.completion_tokens
    assert all(lp <= 0.0 and math.isfinite(lp) for lp in c.logprobs)
    if c.finish_reason == "length":
        assert c.usage.completion_tokens == 5


def test_same_seed_same_text_other_seed_differs(tiny: LocalChat) -> None:
    def sample(seed: int) -> list[str]:
        return [c.text for c in tiny.complete_batch(PROMPTS, temperature=1.5, seed=seed, max_tokens=16)]

    first = sample(1)
    assert sample(1) == first
    assert any(sample(s) != first for s in (2, 3, 4))
    assert first != [c.text for c in tiny.complete_batch(PROMPTS, max_tokens=16)]  # sampled, not greedy


def test_stop_strings_truncate(tiny: LocalChat) -> None:
    full = tiny.complete(PROMPTS[1], max_tokens=12).text
    assert len(full) > 6, full
    stop = full[4:6]
    cut = full.find(stop)
    c = tiny.complete(PROMPTS[1], max_tokens=12, stop=[stop, "never-generated-string"])
    assert c.text == full[:cut]
    assert c.finish_reason == "stop"
    assert tiny.complete(PROMPTS[1], max_tokens=12, stop=stop).text == full[:cut]  # a single string works too


def test_adapter_switching(tiny_model_dir: Path, tiny_adapter_dir: Path, tiny: LocalChat) -> None:
    chat = LocalChat(str(tiny_model_dir), max_new_tokens=12, adapters={"critic": str(tiny_adapter_dir)})
    base = [c.text for c in tiny.complete_batch(PROMPTS)]

    adapted = [c.text for c in chat.complete_batch(PROMPTS, adapter="critic")]
    restored = [c.text for c in chat.complete_batch(PROMPTS)]

    assert adapted != base
    assert restored == base
    with pytest.raises(ConfigError, match="unknown adapter"):
        chat.complete(PROMPTS[0], adapter="nope")


def test_an_adapter_loaded_after_the_model_serves_the_next_call(
    tiny_model_dir: Path, tiny_adapter_dir: Path, tiny: LocalChat
) -> None:
    chat = LocalChat(str(tiny_model_dir), max_new_tokens=12)
    base = [c.text for c in chat.complete_batch(PROMPTS)]  # the model is loaded, with no adapter yet
    reference = LocalChat(str(tiny_model_dir), max_new_tokens=12, adapters={"critic": str(tiny_adapter_dir)})

    chat.load_adapter("solver@v1", tiny_adapter_dir)
    chat.load_adapter("editor@v1", tiny_adapter_dir)  # a second adapter on the same base
    adapted = [c.text for c in chat.complete_batch(PROMPTS, adapter="solver@v1")]

    assert adapted == [c.text for c in reference.complete_batch(PROMPTS, adapter="critic")]
    assert adapted != base
    assert [c.text for c in chat.complete_batch(PROMPTS)] == base  # no adapter named: the bare base
    chat.load_adapter("solver@v1", tiny_adapter_dir)  # replacing one by name works too
    assert [c.text for c in chat.complete_batch(PROMPTS, adapter="solver@v1")] == adapted


def test_an_adapter_added_before_loading_is_picked_up(tiny_model_dir: Path, tiny_adapter_dir: Path) -> None:
    chat = LocalChat(str(tiny_model_dir), max_new_tokens=12)
    chat.load_adapter("solver@v1", tiny_adapter_dir)
    reference = LocalChat(str(tiny_model_dir), max_new_tokens=12, adapters={"critic": str(tiny_adapter_dir)})
    assert chat.complete(PROMPTS[0], adapter="solver@v1").text == reference.complete(PROMPTS[0], adapter="critic").text


def test_loading_a_folder_without_an_adapter_is_a_config_error(tiny_model_dir: Path, tmp_path: Path) -> None:
    chat = LocalChat(str(tiny_model_dir), max_new_tokens=4)
    with pytest.raises(ConfigError, match="holds no peft adapter"):
        chat.load_adapter("solver@v1", tmp_path)
    assert chat.adapters == {}


def test_load_chat_local_prefix(tiny_model_dir: Path) -> None:
    chat = load_chat(f"local/{tiny_model_dir}", max_new_tokens=4)
    answers = chat.complete_batch(["hello", "open the door"], caller="t")
    assert len(answers) == 2 and chat.usage_by_caller["t"].completion_tokens > 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dtype": "int3"}, "dtype"),
        ({"batch_size": 0}, "batch_size"),
        ({"max_new_tokens": -1}, "max_new_tokens"),
    ],
)
def test_bad_construction_is_config_error(tiny_model_dir: Path, kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        LocalChat(str(tiny_model_dir), **kwargs)  # type: ignore[arg-type]


def test_missing_folder_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a local model folder"):
        LocalChat(str(tmp_path / "nope"))


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"frequency_penalty": "high"}, "frequency_penalty"),
    ],
)
def test_bad_call_params_are_config_errors(tiny: LocalChat, params: dict[str, float], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        tiny.complete(PROMPTS[0], **params)


def test_nucleus_probs() -> None:
    import torch

    logits = torch.tensor([[3.0, 2.0, 1.0, -5.0]])
    full = nucleus_probs(logits, 1.0, 1.0)
    assert torch.allclose(full, torch.softmax(logits, -1))
    kept = nucleus_probs(logits, 1.0, 0.7)  # the top token has ~0.66: the second is needed to reach 0.7
    assert (kept[0, :2] > 0).all() and (kept[0, 2:] == 0).all()
    assert float(kept.sum()) == pytest.approx(1.0)
    assert float(nucleus_probs(logits, 1.0, 1e-6)[0, 0]) == pytest.approx(1.0)  # the top token always stays
    cold = nucleus_probs(logits, 0.1, 1.0)
    assert float(cold[0, 0]) > float(full[0, 0])


def test_penalize_is_openais_formula_token_by_token() -> None:
    import torch

    logits = torch.randn(2, 7, generator=torch.Generator().manual_seed(0))
    generated = torch.tensor([[3, 3, 5, 0], [6, 6, 6, 1]])
    out = penalize(logits, generated, presence=0.5, frequency=0.25)
    for row in range(2):
        for j in range(7):
            c = generated[row].tolist().count(j)
            assert float(out[row, j]) == pytest.approx(float(logits[row, j]) - c * 0.25 - (c > 0) * 0.5)


def test_the_penalties_count_the_answers_tokens_not_the_prompts() -> None:
    import torch

    out = Penalties(presence=1.0, frequency=0.5, prompt_length=3)(torch.tensor([[4, 4, 4, 2, 2]]), torch.zeros(1, 5))
    assert out.tolist() == [[0.0, 0.0, -2.0, 0.0, 0.0]]  # token 2 twice in the answer; token 4 only in the prompt


def test_penalties_change_what_a_local_model_generates(tiny: LocalChat) -> None:
    def repeats(**penalties: float) -> list[int]:
        answers = tiny.complete_batch(PROMPTS, max_tokens=12, **penalties)
        return [len(c.tokens or ()) - len(set(c.tokens or ())) for c in answers]

    plain = repeats()
    assert sum(plain) > 0 and repeats(presence_penalty=2.0, frequency_penalty=2.0) == [0] * len(PROMPTS)
    assert sum(repeats(presence_penalty=-2.0, frequency_penalty=-2.0)) > sum(plain)
    assert repeats(presence_penalty=0.0, frequency_penalty=None) == plain  # 0 and None: no penalty


def test_truncate_at_stop() -> None:
    assert truncate_at_stop("a. b. c", [". c", "."]) == ("a", True)
    assert truncate_at_stop("abc", ["x", ""]) == ("abc", False)


def test_importing_connectors_loads_no_torch() -> None:
    code = "import sys, connectors, connectors.local_chat, connectors.smollm2; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


@pytest.mark.slow
def test_smollm2_knows_paris_and_batches(smollm2_dir: Path) -> None:
    chat = load_chat("local/smollm2", max_new_tokens=24)
    assert "Paris" in chat.complete("What is the capital of France?").text

    questions = [f"What is {a} plus {a}?" for a in range(1, 8)] + ["Name a primary color."]
    answers = chat.complete_batch(questions, max_tokens=12)
    assert len(answers) == 8
    assert all(a.text.strip() and a.usage.completion_tokens > 0 for a in answers)
    assert all(a.finish_reason in ("stop", "length") for a in answers)


def test_none_parameters_mean_defaults(tiny: LocalChat) -> None:
    forwarded = tiny.complete(PROMPTS[2], max_tokens=None, temperature=None, top_p=None)
    assert forwarded.text == tiny.complete(PROMPTS[2]).text
    assert forwarded.usage.completion_tokens <= tiny.max_new_tokens


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"temperature": 1.5, "seed": 3},
        {"stop": ["e", "th"]},
        {"max_tokens": 3},
        {"temperature": 0.9, "top_p": 0.5, "seed": 1},
        {"presence_penalty": 1.5, "frequency_penalty": 0.5},
    ],
)
def test_a_stream_sends_the_text_complete_gives_token_by_token(tiny: LocalChat, params: dict) -> None:
    counts = []
    for prompt in PROMPTS[:3]:
        whole = tiny.complete(prompt, **params)
        stream = tiny.stream(prompt, **params)
        deltas = list(stream)
        assert "".join(deltas) == whole.text
        assert stream.completion == whole  # usage, finish_reason and logprobs too
        counts.append(len(deltas))
    assert max(counts) > 1  # sent in pieces, not at the end


def test_closing_a_local_stream_stops_the_generation(tiny: LocalChat) -> None:
    stream = tiny.stream(PROMPTS[0], max_tokens=12)
    first = next(stream)
    stream.close()
    assert stream.completion is not None and stream.completion.text == first
    assert stream.completion.finish_reason == "cancelled" and stream.completion.usage.completion_tokens < 12
    assert tiny.complete(PROMPTS[0], max_tokens=2).usage.completion_tokens <= 2  # the model is free again


def test_a_local_stream_takes_no_tools_and_refuses_unknown_adapters(tiny: LocalChat) -> None:
    from connectors import Tool

    with pytest.raises(ConfigError, match="without tools"):
        tiny.stream(PROMPTS[0], tools=[Tool("door", "a door", {"type": "object", "properties": {}})])
    with pytest.raises(ConfigError, match="unknown adapter"):
        tiny.stream(PROMPTS[0], adapter="nope")


@pytest.mark.slow
def test_smollm2_streams_what_it_completes(smollm2_dir: Path) -> None:
    chat = load_chat("local/smollm2", max_new_tokens=24)
    question = "What is the capital of France?"
    for params in ({"temperature": 0.0, "seed": 5}, {"temperature": 0.8, "top_p": 0.9, "seed": 5}):
        whole = chat.complete(question, **params)
        stream = chat.stream(question, **params)
        deltas = list(stream)
        assert "".join(deltas) == whole.text and len(deltas) > 3
        assert stream.completion is not None and stream.completion.usage == whole.usage
        assert stream.completion.finish_reason == whole.finish_reason
    cut = chat.stream("Write a long story about a lighthouse keeper.", max_tokens=5)
    assert "".join(cut) and cut.completion is not None
    assert cut.completion.finish_reason == "length" and cut.completion.usage.completion_tokens == 5
