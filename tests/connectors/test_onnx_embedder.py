"""MiniLM on ONNX Runtime against sentence-transformers on torch; its export cache; "minilm" choosing between
the two and "onnx" insisting."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from connectors import (
    ConfigError,
    ConnectorError,
    HashEmbedder,
    SentenceTransformerEmbedder,
    load_embedder,
    onnx_embedder,
)
from connectors.embedders import minilm_path
from connectors.onnx_embedder import OnnxEmbedder

WAREHOUSE = (
    "The Harbor warehouse keeps its door code in the night shift's binder; the guard checks every badge at the "
    "gate, logs each pallet of copper wire, and calls the foreman when a truck arrives after midnight. "
)
COOKING = (
    "To bake the rye loaf, proof the starter overnight, fold in caraway seeds and a spoon of molasses, then bake "
    "in a covered cast-iron pot at high heat until the crust sings when tapped. "
)
STARS = (
    "Through the telescope the Andromeda galaxy looks like a faint smudge; astronomers measure its redshift, map "
    "globular clusters around its halo and time the pulsing of its Cepheid variable stars. "
)
# 441 tokens in three topics: cut at 128 (one topic), 256 (sentence-transformers' cut) or 512, its vector moves
# by far more than 0.001 of cosine (0.74 and 0.85 between the cuts), so agreeing means cutting at the same place.
LONG = WAREHOUSE * 3 + COOKING * 3 + STARS * 4
TEXTS = [
    "What is the door code of the Harbor warehouse?",
    "I forgot my password and need to change it before Monday's shift.",
    "Ünïcödé café: naïve façades, Zażółć gęślą jaźń, Привет мир, مرحبا بالعالم, 東京タワーの入口はどこですか？ 🚀",
    "   leading and trailing whitespace around a question about the gate   ",
    "x",
    "",
    LONG,
]


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder holding MiniLM's export, made once per session (about 10 s)."""
    pytest.importorskip("onnxruntime", reason="the onnx embedder needs the 'local' extra")
    folder = tmp_path_factory.mktemp("onnx-cache")
    assert OnnxEmbedder(cache_dir=folder).exported
    return folder


@pytest.fixture(scope="session")
def torch_minilm() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


@pytest.mark.slow
def test_onnx_vectors_agree_with_torch_on_realistic_texts(
    onnx_cache: Path, torch_minilm: SentenceTransformerEmbedder
) -> None:
    e = OnnxEmbedder(cache_dir=onnx_cache)
    got, expected = e.embed(TEXTS), torch_minilm.embed(TEXTS)
    assert (e.name, e.backend, e.dim, got.shape, got.dtype) == ("minilm", "onnx", 384, (len(TEXTS), 384), np.float32)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(got * expected, axis=1)
    assert cosines.min() >= 0.999, dict(zip(TEXTS, cosines.round(5), strict=True))
    alone = np.stack([e.embed([t])[0] for t in TEXTS])  # one at a time, unpadded: the same rows as in a batch
    assert np.allclose(alone, got, atol=1e-5)
    assert np.allclose(e.embed([LONG + " A last sentence, past the cut."]), got[-1], atol=1e-6)  # cut at 256


@pytest.mark.slow
def test_minilm_is_exported_with_each_layers_attention_fused(onnx_cache: Path) -> None:
    onnx = pytest.importorskip("onnx")
    [cached] = onnx_cache.glob("*.onnx")
    ops = [node.op_type for node in onnx.load(str(cached)).graph.node]
    assert ops.count("Attention") == 6 and ops.count("SkipLayerNormalization") == 12 and len(ops) < 80


@pytest.mark.slow
def test_a_fusion_that_fails_leaves_the_plain_graph_which_agrees_with_torch(
    tmp_path: Path, torch_minilm: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    onnx = pytest.importorskip("onnx")
    from onnxruntime.transformers import optimizer

    fuse = optimizer.optimize_model

    def attention_not_fused(*args: Any, **kwargs: Any) -> Any:  # as on a BERT whose graph the fusions miss
        model = fuse(*args, **kwargs)
        model.get_fused_operator_statistics = lambda: {"Attention": 0}
        return model

    monkeypatch.setattr(optimizer, "optimize_model", attention_not_fused)
    with caplog.at_level(logging.INFO, logger="connectors.onnx_embedder"):
        e = OnnxEmbedder(cache_dir=tmp_path)
    assert (
        e.exported and "exporting the plain graph" in caplog.text and "0 attention operators fused of 6" in caplog.text
    )
    assert "Attention" not in {node.op_type for node in onnx.load(str(e.path)).graph.node}
    assert np.sum(e.embed(TEXTS) * torch_minilm.embed(TEXTS), axis=1).min() >= 0.999
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".lock", ".onnx"]  # nothing of the attempt left


@pytest.mark.slow
def test_a_second_load_reads_the_cached_file_and_exports_nothing(
    onnx_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [cached] = onnx_cache.glob("*.onnx")
    stamp = cached.stat().st_mtime_ns

    def no_export(*args: Any) -> None:
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx_embedder, "export_onnx", no_export)
    e = OnnxEmbedder(cache_dir=onnx_cache)
    assert e.exported is False and e.path == cached and cached.stat().st_mtime_ns == stamp
    assert cached.name.startswith("minilm-") and sorted(p.suffix for p in onnx_cache.iterdir()) == [".lock", ".onnx"]
    assert e.embed(["hello"]).shape == (1, 384)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["half", "garbage"])
def test_a_damaged_cache_file_is_exported_again(
    damage: str, onnx_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    [good] = onnx_cache.glob("*.onnx")
    target = tmp_path / "cache" / good.name
    target.parent.mkdir()
    data = good.read_bytes()
    target.write_bytes(data[: len(data) // 2] if damage == "half" else b"not an onnx model" * 100)
    exports = []

    def export_again(folder: Path, path: Path, probe: Any, *, threads: int) -> None:  # the real one: test above
        exports.append(path)
        shutil.copyfile(good, path)

    monkeypatch.setattr(onnx_embedder, "export_checked", export_again)
    with caplog.at_level(logging.WARNING, logger="connectors.onnx_embedder"):
        e = OnnxEmbedder(cache_dir=target.parent)
    assert exports == [target] and e.exported and target.read_bytes() == data
    assert "cannot be read" in caplog.text and "exporting it again" in caplog.text
    assert e.embed(["hello"]).shape == (1, 384)


class FakeTorchEmbedder(HashEmbedder):
    """Stands in for ``SentenceTransformerEmbedder`` where a test is about the choice, not torch."""

    backend = "torch"

    def __init__(self, model: str | None = None, *, device: str = "cpu", batch_size: int = 64) -> None:
        super().__init__(384, name="minilm")
        self.name, self.model, self.device = "minilm", model, device


def test_minilm_falls_back_to_torch_without_onnxruntime_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime raises ImportError
    monkeypatch.setattr(onnx_embedder, "SentenceTransformerEmbedder", FakeTorchEmbedder)
    onnx_embedder._say_torch_fallback.cache_clear()
    with caplog.at_level(logging.INFO, logger="connectors.onnx_embedder"):
        first, second = load_embedder("minilm"), load_embedder("minilm")
    assert isinstance(first, FakeTorchEmbedder) and isinstance(second, FakeTorchEmbedder)
    assert first.name == "minilm" and first.backend == "torch"
    said = [r for r in caplog.records if "runs on torch" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO and "onnxruntime" in said[0].getMessage()


def test_asking_for_onnx_without_onnxruntime_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ConfigError, match=r"onnx embedder needs onnxruntime.*'local' extra"):
        load_embedder("onnx")


def test_a_failed_export_falls_back_for_minilm_and_is_an_error_for_onnx(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("onnxruntime", reason="the onnx embedder needs the 'local' extra")
    monkeypatch.setenv("EVOLVE_MODEL_CACHE", str(tmp_path / "models"))

    def broken(folder: Path, dest: Path, probe: Any) -> Any:
        raise ConnectorError(f"exporting {folder} to ONNX failed: the exporter broke")

    monkeypatch.setattr(onnx_embedder, "export_onnx", broken)
    monkeypatch.setattr(onnx_embedder, "SentenceTransformerEmbedder", FakeTorchEmbedder)
    onnx_embedder._say_torch_fallback.cache_clear()
    with caplog.at_level(logging.INFO, logger="connectors.onnx_embedder"):
        assert isinstance(load_embedder("minilm"), FakeTorchEmbedder)
    assert "the exporter broke" in caplog.text
    with pytest.raises(ConnectorError, match="the exporter broke"):
        load_embedder("onnx")
    assert [p.name for p in (tmp_path / "models" / "onnx").iterdir() if p.suffix != ".lock"] == []  # no temp left


def test_minilm_on_another_device_is_torchs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx_embedder, "SentenceTransformerEmbedder", FakeTorchEmbedder)
    e = load_embedder("minilm", device="cuda")
    assert isinstance(e, FakeTorchEmbedder) and e.device == "cuda"


def test_a_folder_not_pooled_by_the_mean_is_refused_naming_the_torch_spec(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime", reason="the onnx embedder needs the 'local' extra")
    folder = tmp_path / "cls-pooled"
    shutil.copytree(minilm_path(), folder, ignore=shutil.ignore_patterns("*.safetensors"))
    pooling = folder / "1_Pooling" / "config.json"
    pooling.write_text(pooling.read_text().replace('"pooling_mode_cls_token": false', '"pooling_mode_cls_token": true'))
    pooling.write_text(
        pooling.read_text().replace('"pooling_mode_mean_tokens": true', '"pooling_mode_mean_tokens": false')
    )
    with pytest.raises(ConfigError, match=r"mean Pooling.*cls_token.*'sentence-transformers/<folder>'"):
        OnnxEmbedder(str(folder), cache_dir=tmp_path / "cache")


def test_the_cache_key_follows_the_weights_not_the_folders_name(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for folder in (one, two):
        (folder / "1_Pooling").mkdir(parents=True)
        (folder / "config.json").write_text('{"hidden_size": 4}')
        (folder / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
        (folder / "model.safetensors").write_bytes(b"weights")
    assert onnx_embedder.cache_key(one) == onnx_embedder.cache_key(two)
    (two / "model.safetensors").write_bytes(b"other weights")
    assert onnx_embedder.cache_key(one) != onnx_embedder.cache_key(two)
    (one / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    (two / "model.safetensors").write_bytes(b"weights")
    assert onnx_embedder.cache_key(one) != onnx_embedder.cache_key(two)
    (one / "README.md").write_text("a model card changes no weights")
    os.utime(one / "model.safetensors")
    (one / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    assert onnx_embedder.cache_key(one) == onnx_embedder.cache_key(two)
