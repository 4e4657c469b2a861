"""A tiny word-level tokenizer and a tiny Llama, both built in memory: MARFT's test bed without downloads.

The tokenizer knows exactly the words of a toy task (one token per word, split on whitespace and
punctuation), so "the first token of the response" and "the first word of the response" are the
same thing. The model is a randomly initialised :class:`~transformers.LlamaForCausalLM` small enough
that a PPO step on CPU takes milliseconds; LoRA adapters go on the same projections as on SmolLM2.

torch, tokenizers and transformers are imported inside the functions, never when this module is.

Example:
    >>> from optimizers.marft.tiny import tiny_llama, word_tokenizer
    >>> tok = word_tokenizer(["say", "star", "moon"])
    >>> tok("say star").input_ids
    [4, 5]
    >>> model = tiny_llama(len(tok), hidden=32)
    >>> model.config.vocab_size, model.training
    (7, False)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from connectors.errors import ConfigError
from connectors.local_chat import LOCAL_HINT, require_local

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    from optimizers.marft.policy import AgentPolicies

log = logging.getLogger(__name__)

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
"""Special tokens, in id order: ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3."""
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(len(SPECIALS))
INIT_STD = 0.1
"""Initial weight std of :func:`tiny_llama`. Not transformers' 0.02: LoRA leaves the LM head and the final
norm alone, and with std 0.02 a 64-wide model's logits stay within about ±1.3, so no adapter can push one
of 14 tokens past p ≈ 0.28 (measured: REINFORCE on the target task plateaus there; with 0.1 it reaches 0.99)."""


def vocabulary_table(words: Sequence[str]) -> dict[str, int]:
    """Token ids for ``words``: the specials first (0-3), then each word in the given order.

    A repeated word keeps its first id. Pure: no tokenizer is built.

    Raises:
        ConfigError: a word is empty, contains whitespace or punctuation next to letters (the
            whitespace pre-tokenizer would split it, so it could never be produced whole), or is a
            special token.

    Example:
        >>> vocabulary_table(["say", "star", "say"])
        {'<pad>': 0, '<bos>': 1, '<eos>': 2, '<unk>': 3, 'say': 4, 'star': 5}
    """
    table = {token: i for i, token in enumerate(SPECIALS)}
    for word in words:
        if not isinstance(word, str) or not _is_one_piece(word):
            raise ConfigError(
                f"word_tokenizer words must be single words (letters/digits/_ only, or punctuation only), got {word!r}"
            )
        if word in SPECIALS:
            raise ConfigError(f"word_tokenizer: {word!r} is a special token; pass ordinary words only")
        table.setdefault(word, len(table))
    return table


def _is_one_piece(word: str) -> bool:
    """True when the ``Whitespace`` pre-tokenizer (``\\w+|[^\\w\\s]+``) keeps ``word`` as one piece."""
    if not word or any(c.isspace() for c in word):
        return False
    word_chars = [c.isalnum() or c == "_" for c in word]
    return all(word_chars) or not any(word_chars)


def word_tokenizer(words: Sequence[str]) -> PreTrainedTokenizerFast:
    """A word-level fast tokenizer over ``words`` with ``<pad>``, ``<bos>``, ``<eos>`` and ``<unk>``.

    Text is split on whitespace and punctuation (``tokenizers``' ``Whitespace`` pre-tokenizer); each
    known word is one token, anything else is ``<unk>``. Encoding adds no special tokens (callers add
    ``<bos>`` themselves); decoding joins words with single spaces. There is no chat template.

    Args:
        words: the vocabulary, ids assigned in this order after the four specials (see
            :func:`vocabulary_table`).

    Raises:
        ConfigError: a word the pre-tokenizer would split, or the ``local`` extra is missing.
    """
    table = vocabulary_table(words)
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast
    except ImportError as e:
        raise ConfigError(
            f"word_tokenizer needs tokenizers and transformers from the 'local' extra: {LOCAL_HINT}"
        ) from e
    core = Tokenizer(models.WordLevel(vocab=table, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK)


def _tiny_config(
    vocab_size: int,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    max_positions: int = 512,
    init_std: float = INIT_STD,
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> Any:
    """The :class:`~transformers.LlamaConfig` of :func:`tiny_llama` (intermediate size 4 × hidden, untied head)."""
    _check_sizes(vocab_size=vocab_size, hidden=hidden, layers=layers, heads=heads, max_positions=max_positions)
    if hidden % heads or (hidden // heads) % 2:
        raise ConfigError(f"tiny_llama: hidden ({hidden}) must split into {heads} heads of an even size (rotary)")
    if not init_std > 0:
        raise ConfigError(f"tiny_llama: init_std must be > 0, got {init_std}")
    for name, token_id in (("pad_id", pad_id), ("bos_id", bos_id), ("eos_id", eos_id)):
        if not 0 <= token_id < vocab_size:
            raise ConfigError(f"tiny_llama: {name} must be a token id below vocab_size {vocab_size}, got {token_id}")
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
        initializer_range=init_std,
        pad_token_id=pad_id,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
    )


def tiny_llama(
    vocab_size: int,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
    max_positions: int = 512,
    init_std: float = INIT_STD,
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> LlamaForCausalLM:
    """A randomly initialised Llama built from a config in code: float32, eval mode, same seed → same weights.

    The global torch RNG is left as it was (initialisation runs under a forked RNG).

    Args:
        vocab_size: ``len(tokenizer)``.
        hidden: hidden size (the MLP is 4 × hidden wide).
        layers: decoder layers.
        heads: attention heads (as many key/value heads).
        seed: initialisation seed.
        max_positions: longest sequence (prompt + response) the rotary tables cover.
        init_std: initial weight std (see :data:`INIT_STD` for why it is not 0.02).
        pad_id: padding token id (the defaults match :func:`word_tokenizer`).
        bos_id: beginning-of-sequence token id.
        eos_id: end-of-sequence token id; generation stops on it.

    Raises:
        ConfigError: a size that is not a positive integer, heads that do not divide ``hidden``, a
            special id outside the vocabulary, or the ``local`` extra is missing.
    """
    require_local("tiny_llama")
    config = _tiny_config(
        vocab_size,
        hidden=hidden,
        layers=layers,
        heads=heads,
        max_positions=max_positions,
        init_std=init_std,
        pad_id=pad_id,
        bos_id=bos_id,
        eos_id=eos_id,
    )
    import torch
    from transformers import LlamaForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = pad_id
    model.generation_config.eos_token_id = eos_id
    log.debug("built a tiny Llama: vocab %d, hidden %d, %d layers, seed %d", vocab_size, hidden, layers, seed)
    return model.float().eval()


def _check_sizes(**sizes: int) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"tiny_llama: {name} must be a positive integer, got {value!r}")


def tiny_policies(
    words: Sequence[str],
    agents: Sequence[str],
    *,
    hidden: int = 64,
    layers: int = 2,
    model_seed: int = 0,
    **options: Any,
) -> AgentPolicies:
    """:class:`~optimizers.marft.policy.AgentPolicies` on a fresh :func:`tiny_llama` (seeded by ``model_seed``)
    over a :func:`word_tokenizer` of ``words``; ``options`` are the policies' keywords (``seed`` seeds the adapters).

    Example:
        >>> team = tiny_policies(["secret", "red"], ["sender", "receiver"], hidden=32)
        >>> team.adapters
        ('sender', 'receiver', 'critic')
    """
    from optimizers.marft.policy import AgentPolicies

    tokenizer = word_tokenizer(words)
    base = tiny_llama(len(tokenizer), hidden=hidden, layers=layers, seed=model_seed)
    return AgentPolicies(base, tokenizer, agents, **options)
