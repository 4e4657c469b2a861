"""The MARFT test bed: the word tokenizer, the tiny Llama and the toy tasks."""

from __future__ import annotations

import random

import pytest

from connectors.errors import ConfigError
from optimizers.marft.tiny import BOS_ID, EOS_ID, PAD_ID, SPECIALS, UNK_ID, tiny_llama, vocabulary_table, word_tokenizer
from optimizers.marft.toys import RelayEpisode, RelayTask, TargetEpisode, TargetTokenTask, first_word

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("task", [TargetTokenTask(), RelayTask(), RelayTask(k=8)], ids=["target", "relay", "relay8"])
def test_tokenizer_round_trips_the_toy_vocabulary(task: TargetTokenTask | RelayTask) -> None:
    tok = word_tokenizer(task.vocabulary)
    text = " ".join(task.vocabulary)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids == list(range(len(SPECIALS), len(SPECIALS) + len(task.vocabulary)))  # one token per word, in order
    assert tok.decode(ids) == text
    assert len(tok) == len(SPECIALS) + len(task.vocabulary)


def test_tokenizer_specials_come_first_and_unknown_words_are_unk() -> None:
    tok = word_tokenizer(["say", "star"])
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (PAD_ID, BOS_ID, EOS_ID, UNK_ID)
    assert tok("say zebra, star", add_special_tokens=False)["input_ids"] == [4, UNK_ID, UNK_ID, 5]
    assert tok.decode([4, EOS_ID, 5], skip_special_tokens=True) == "say star"
    assert tok.chat_template is None


def test_vocabulary_table_keeps_first_ids_and_rejects_words_that_would_split() -> None:
    assert vocabulary_table(["b", "a", "b"]) == {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3, "b": 4, "a": 5}
    assert vocabulary_table(["?", "x_1"])["?"] == 4  # punctuation alone stays one piece
    for bad in ["two words", "a-b", "", "<eos>"]:
        with pytest.raises(ConfigError):
            vocabulary_table([bad])


def test_tiny_llama_is_seeded_float32_eval_and_leaves_the_global_rng_alone() -> None:
    before = torch.random.get_rng_state()
    a, b, c = tiny_llama(20, hidden=32, seed=3), tiny_llama(20, hidden=32, seed=3), tiny_llama(20, hidden=32, seed=4)
    assert torch.equal(torch.random.get_rng_state(), before)
    pairs = list(zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert all(torch.equal(x, y) for x, y in pairs)
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)
    assert not a.training and a.dtype == torch.float32
    assert a.config.intermediate_size == 4 * 32 and a.config.tie_word_embeddings is False
    assert not torch.equal(a.lm_head.weight, a.model.embed_tokens.weight)
    assert (a.config.pad_token_id, a.config.bos_token_id, a.config.eos_token_id) == (PAD_ID, BOS_ID, EOS_ID)


@pytest.mark.parametrize(
    "kwargs", [{"hidden": 30}, {"heads": 0}, {"layers": -1}, {"eos_id": 99}], ids=["heads", "zero", "neg", "eos"]
)
def test_tiny_llama_rejects_bad_sizes(kwargs: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        tiny_llama(20, **kwargs)


def test_relay_receiver_sees_the_senders_words_and_not_the_secret() -> None:
    task = RelayTask()
    state = RelayEpisode("red")
    assert task.prompt(state, 0, []) == "secret red"
    receiver = task.prompt(state, 1, ["left up"])
    assert receiver == "relay left up"
    assert "red" not in receiver.split() and "secret" not in receiver
    assert task.reward(state, ["left up", "red blue"]) == 1.0
    assert task.reward(state, ["red", "blue red"]) == 0.0  # the first word counts
    assert task.reward(state, ["red", ""]) == 0.0


def test_relay_draws_secrets_from_k_words_reproducibly() -> None:
    task = RelayTask(k=3)
    draws = [task.sample(random.Random(7)) for _ in range(2)]
    assert draws[0] == draws[1]
    seen = {task.sample(rng).secret for rng in [random.Random(0)] for _ in range(200)}
    assert seen == set(task.secrets) == {"red", "green", "blue"}


def test_default_chances_are_documented() -> None:
    relay = RelayTask()
    assert len(relay.vocabulary) == 10 and relay.chance == pytest.approx(0.1) and relay.blind_best == 0.25
    assert TargetTokenTask().chance == pytest.approx(1 / 8)


def test_target_task_rewards_the_target_as_first_word() -> None:
    task = TargetTokenTask()
    state = task.sample(random.Random(1))
    words = task.prompt(state, 0, []).split()
    assert words[0] == "say" and 1 <= len(words) - 1 <= 3 and set(words[1:]) <= set(task.noise)
    assert task.reward(state, ["star"]) == 1.0
    assert task.reward(TargetEpisode(("moon",)), ["moon star"]) == 0.0


def test_tasks_refuse_prompts_and_rewards_out_of_team_order() -> None:
    relay = RelayTask()
    with pytest.raises(ConfigError, match="earlier responses"):
        relay.prompt(RelayEpisode("red"), 1, [])
    with pytest.raises(ConfigError, match="agent_index"):
        relay.prompt(RelayEpisode("red"), 2, ["a", "b"])
    with pytest.raises(ConfigError, match="one response per agent"):
        relay.reward(RelayEpisode("red"), ["red"])
    with pytest.raises(ConfigError):
        TargetTokenTask(target="moon")  # also a noise word
    with pytest.raises(ConfigError):
        RelayTask(k=1)


def test_first_word() -> None:
    assert first_word(" red  blue ") == "red"
    assert first_word(" \n") is None
