"""Versioned LoRA adapters: content ids, HEAD moves, rollback, verification and all-or-nothing copies."""

from __future__ import annotations

import doctest
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

import evolve.weights.files as adapter_files
import evolve.weights.registry as adapter_versions
from connectors import ConfigError, StoreError, make_engine
from evolve.weights.registry import (
    AdapterRegistry,
    AdapterVersion,
    adapter_head_moves,
    check_adapter_folder,
    content_id,
)


def fake_adapter(folder: Path, weights: bytes, **extra: bytes) -> Path:
    """A folder shaped like peft's save_pretrained output, with a few bytes for weights."""
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text('{"r": 8, "lora_alpha": 16}')
    (folder / "adapter_model.safetensors").write_bytes(weights)
    for name, data in extra.items():
        (folder / name).write_bytes(data)
    return folder


@pytest.fixture(params=["file", "memory"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    return make_engine(f"sqlite:///{tmp_path / 'evolve.db'}" if request.param == "file" else "sqlite://")


@pytest.fixture
def registry(engine: Engine, tmp_path: Path) -> AdapterRegistry:
    return AdapterRegistry(engine, "run1", root=tmp_path / "adapters")


def count_versions(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(adapter_versions.adapter_versions)).scalar_one())


def test_an_agent_without_adapters_runs_on_the_base_model(registry: AdapterRegistry) -> None:
    assert registry.head("solver") is None
    assert registry.path("solver") is None
    assert registry.log("solver") == []
    assert registry.agents() == []


def test_commit_copies_the_files_and_moves_head(registry: AdapterRegistry, tmp_path: Path) -> None:
    src = fake_adapter(tmp_path / "trained", b"w1", **{"tokenizer.json": b"{}"})
    (src / "sub").mkdir()
    (src / "sub" / "value_head.bin").write_bytes(b"vh")
    v = registry.commit("solver", src, metrics={"reward": 0.5, "kl": 0.01}, message="MARFT step 1")

    assert isinstance(v, AdapterVersion) and len(v.id) == 16 and set(v.id) <= set("0123456789abcdef")
    assert v.path == tmp_path / "adapters" / "run1" / "solver" / v.id
    assert (v.run, v.agent, v.parent, v.message) == ("run1", "solver", None, "MARFT step 1")
    assert dict(v.metrics) == {"reward": 0.5, "kl": 0.01}
    copied = sorted(p.relative_to(v.path).as_posix() for p in v.path.rglob("*") if p.is_file())
    assert copied == ["adapter_config.json", "adapter_model.safetensors", "sub/value_head.bin", "tokenizer.json"]
    assert (v.path / "adapter_model.safetensors").read_bytes() == b"w1"
    assert registry.head("solver") == v and registry.path("solver") == v.path
    assert registry.log("solver") == [v] and registry.agents() == ["solver"]
    shutil.rmtree(src)  # the stored copy does not depend on the trainer's folder
    assert registry.verify(v.id) == v


def test_log_is_newest_first_and_parent_prefixes_resolve(registry: AdapterRegistry, tmp_path: Path) -> None:
    first = registry.commit("solver", fake_adapter(tmp_path / "s1", b"w1"))
    second = registry.commit("solver", fake_adapter(tmp_path / "s2", b"w2"), parent=first.id[:6])
    third = registry.commit("solver", fake_adapter(tmp_path / "s3", b"w3"), parent=second.id)
    assert second.parent == first.id  # the full id is stored
    assert [v.id for v in registry.log("solver")] == [third.id, second.id, first.id]
    assert [v.id for v in registry.log("solver", limit=2)] == [third.id, second.id]
    assert registry.get(second.id[:7]) == second
    with pytest.raises(ConfigError, match="limit"):
        registry.log("solver", limit=-1)


def test_the_id_is_the_content_names_and_bytes_only(tmp_path: Path) -> None:
    a = check_adapter_folder(fake_adapter(tmp_path / "a", b"same"))
    b = check_adapter_folder(fake_adapter(tmp_path / "b", b"same"))
    c = check_adapter_folder(fake_adapter(tmp_path / "c", b"other"))
    d = check_adapter_folder(fake_adapter(tmp_path / "d", b"same", **{"notes.txt": b""}))
    assert content_id(a) == content_id(b)  # another folder, other mtimes: the same version
    assert len({content_id(a), content_id(c), content_id(d)}) == 3  # bytes and file names both count


def test_committing_identical_bytes_again_returns_the_stored_version(
    registry: AdapterRegistry, engine: Engine, tmp_path: Path
) -> None:
    first = registry.commit("solver", fake_adapter(tmp_path / "s1", b"w1"), metrics={"reward": 0.5}, message="one")
    second = registry.commit("solver", fake_adapter(tmp_path / "s2", b"w2"), parent=first.id)
    again = registry.commit("solver", fake_adapter(tmp_path / "copy", b"w1"), metrics={"reward": 0.9}, message="x")
    assert again == first  # same row: the stored metrics, message and created_at stay
    assert dict(again.metrics) == {"reward": 0.5} and again.created_at == first.created_at
    assert registry.head("solver") == first  # ... but HEAD moved to it
    assert count_versions(engine) == 2
    assert [(m["from"], m["to"], m["reason"]) for m in registry.history("solver")] == [
        (second.id, first.id, "commit"),
        (first.id, second.id, "commit"),
        (None, first.id, "commit"),
    ]
    registry.commit("solver", tmp_path / "copy")  # HEAD already there: no move is logged
    assert len(registry.history("solver")) == 3


def test_rollback_goes_to_the_parent_then_to_base(registry: AdapterRegistry, tmp_path: Path) -> None:
    first = registry.commit("solver", fake_adapter(tmp_path / "s1", b"w1"))
    second = registry.commit("solver", fake_adapter(tmp_path / "s2", b"w2"), parent=first.id)
    assert registry.rollback("solver") == first
    assert registry.path("solver") == first.path
    assert registry.rollback("solver", reason="reward dropped") is None  # first was trained from base
    assert registry.head("solver") is None and registry.path("solver") is None
    with pytest.raises(StoreError, match="base model"):
        registry.rollback("solver")
    assert [v.id for v in registry.log("solver")] == [second.id, first.id]  # nothing was deleted
    assert second.path.is_dir()
    moves = registry.history("solver")
    assert (moves[0]["from"], moves[0]["to"], moves[0]["reason"]) == (first.id, None, "reward dropped")


def test_rollback_to_an_id_prefix_to_base_and_back(registry: AdapterRegistry, tmp_path: Path) -> None:
    first = registry.commit("solver", fake_adapter(tmp_path / "s1", b"w1"))
    second = registry.commit("solver", fake_adapter(tmp_path / "s2", b"w2"), parent=first.id)
    assert registry.rollback("solver", to="base") is None
    assert registry.rollback("solver", to=second.id[:5].upper()) == second  # prefixes, any case
    assert registry.rollback("solver", to=first.id) == first
    moves = len(registry.history("solver"))
    assert registry.rollback("solver", to=first.id) == first  # already there: no move is logged
    assert len(registry.history("solver")) == moves


def two_ids_sharing_a_first_digit(tmp_path: Path) -> tuple[bytes, bytes, str]:
    """Weights for two adapters whose ids start with the same hex digit (17 tries suffice: pigeonhole)."""
    seen: dict[str, bytes] = {}
    for i in range(17):
        weights = f"w{i}".encode()
        vid = content_id(check_adapter_folder(fake_adapter(tmp_path / f"probe{i}", weights)))
        if vid[0] in seen:
            return seen[vid[0]], weights, vid[0]
        seen[vid[0]] = weights
    raise AssertionError("unreachable: 17 ids over 16 first digits")


def test_ambiguous_and_unknown_references_list_the_candidates(registry: AdapterRegistry, tmp_path: Path) -> None:
    w1, w2, digit = two_ids_sharing_a_first_digit(tmp_path)
    a = registry.commit("solver", fake_adapter(tmp_path / "a", w1))
    b = registry.commit("solver", fake_adapter(tmp_path / "b", w2), parent=a.id)
    with pytest.raises(ConfigError, match="ambiguous") as err:
        registry.rollback("solver", to=digit)
    assert a.id in str(err.value) and b.id in str(err.value)
    for ref in ("ffffffffffffffff", "nonsense", ""):
        with pytest.raises(ConfigError, match="unknown adapter version") as err:
            registry.rollback("solver", to=ref)
        assert a.id in str(err.value) and b.id in str(err.value) and "'base'" in str(err.value)
    assert registry.head("solver") == b  # a failed rollback moves nothing
    c = fake_adapter(tmp_path / "c", b"never committed")
    with pytest.raises(ConfigError, match="unknown adapter version"):
        registry.commit("solver", c, parent="ffffffffffffffff")
    assert not (tmp_path / "adapters" / "run1" / "solver" / content_id(check_adapter_folder(c))).exists()


def test_verify_notices_changed_removed_and_missing_files(registry: AdapterRegistry, tmp_path: Path) -> None:
    v = registry.commit("solver", fake_adapter(tmp_path / "s1", b"w1", **{"notes.txt": b"n"}))
    assert registry.verify(v.id[:6]) == v
    (v.path / "adapter_model.safetensors").write_bytes(b"tampered")
    with pytest.raises(StoreError, match=r"changed \['adapter_model.safetensors'\]"):
        registry.verify(v.id)
    (v.path / "adapter_model.safetensors").write_bytes(b"w1")
    (v.path / "notes.txt").unlink()
    with pytest.raises(StoreError, match=r"removed \['notes.txt'\]"):
        registry.verify(v.id)
    shutil.rmtree(v.path)
    with pytest.raises(StoreError, match="gone"):
        registry.verify(v.id, agent="solver")


def test_a_copy_that_fails_midway_leaves_no_version(
    registry: AdapterRegistry, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = fake_adapter(tmp_path / "s1", b"w1", **{"tokenizer.json": b"{}"})
    real_copy, copied = shutil.copyfile, []

    def copy_then_fail(source: Path, dest: Path) -> Path:
        if copied:
            raise OSError(28, "No space left on device")
        copied.append(dest)
        return Path(real_copy(source, dest))

    monkeypatch.setattr(adapter_files.shutil, "copyfile", copy_then_fail)
    with pytest.raises(OSError, match="No space"):
        registry.commit("solver", src)
    home = tmp_path / "adapters" / "run1" / "solver"
    assert copied and list(home.iterdir()) == []  # neither a version folder nor a temporary one is left
    assert registry.head("solver") is None and count_versions(engine) == 0

    monkeypatch.setattr(adapter_files.shutil, "copyfile", real_copy)
    v = registry.commit("solver", src)  # the same commit succeeds once the disk has room
    assert registry.verify(v.id) == v and [p.name for p in home.iterdir()] == [v.id]


def test_a_source_that_changes_during_the_copy_is_refused(
    registry: AdapterRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = fake_adapter(tmp_path / "s1", b"w1")
    real_copy = shutil.copyfile

    def copy_while_training_writes(source: Path, dest: Path) -> Path:
        Path(source).write_bytes(b"still being written")
        return Path(real_copy(source, dest))

    monkeypatch.setattr(adapter_files.shutil, "copyfile", copy_while_training_writes)
    with pytest.raises(StoreError, match="changed while it was being copied"):
        registry.commit("solver", src)
    assert registry.head("solver") is None and list((tmp_path / "adapters" / "run1" / "solver").iterdir()) == []


def test_a_stored_folder_changed_by_hand_is_not_reused(registry: AdapterRegistry, tmp_path: Path) -> None:
    v = registry.commit("solver", fake_adapter(tmp_path / "s1", b"w1"))
    registry.rollback("solver")
    (v.path / "adapter_model.safetensors").write_bytes(b"edited")
    with pytest.raises(StoreError, match="move it away"):
        registry.commit("solver", tmp_path / "s1")
    assert registry.head("solver") is None


def test_runs_and_agents_do_not_see_each_other(engine: Engine, tmp_path: Path) -> None:
    one = AdapterRegistry(engine, "run-a", root=tmp_path / "adapters")
    two = AdapterRegistry(engine, "run-b", root=tmp_path / "adapters")
    v = one.commit("solver", fake_adapter(tmp_path / "s1", b"w1"))
    planner = one.commit("planner", fake_adapter(tmp_path / "p1", b"w1"))  # same bytes, another agent
    assert planner.id == v.id and planner.path != v.path
    assert two.head("solver") is None and two.log("solver") == [] and two.agents() == []
    with pytest.raises(ConfigError, match="unknown adapter version"):
        two.get(v.id)
    with pytest.raises(ConfigError, match="ambiguous"):  # two agents hold this id: say which one
        one.get(v.id)
    assert one.get(v.id, agent="planner") == planner
    assert one.agents() == ["planner", "solver"]
    assert one.rollback("planner") is None and one.head("solver") == v


def test_a_new_registry_on_the_same_database_sees_heads(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'evolve.db'}"
    v = AdapterRegistry(make_engine(url), "run1", root=tmp_path / "adapters").commit(
        "solver", fake_adapter(tmp_path / "s1", b"w1")
    )
    reopened = AdapterRegistry(make_engine(url), "run1", root=tmp_path / "elsewhere")
    assert reopened.head("solver") == v and reopened.path("solver") == v.path


def broken_adapter(tmp_path: Path, kind: str) -> Path:
    if kind == "missing":
        return tmp_path / "missing"
    folder = fake_adapter(tmp_path / "a", b"w")
    if kind == "a file":
        return folder / "adapter_model.safetensors"
    (folder / {"no config": "adapter_config.json", "no weights": "adapter_model.safetensors"}[kind]).unlink()
    return folder


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("missing", "not a folder"),
        ("a file", "not a folder"),
        ("no config", "lacks \\['adapter_config.json'\\]"),
        ("no weights", "adapter_model.safetensors or adapter_model.bin"),
    ],
)
def test_folders_peft_could_not_load_are_refused(
    registry: AdapterRegistry, tmp_path: Path, kind: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        registry.commit("solver", broken_adapter(tmp_path, kind))
    assert registry.head("solver") is None and not (tmp_path / "adapters").exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"agent": "../escape"}, "folder-safe"),
        ({"agent": ".hidden"}, "folder-safe"),
        ({"agent": ""}, "folder-safe"),
        ({"metrics": {"reward": math.nan}}, "finite"),
        ({"metrics": {"reward": True}}, "finite"),
        ({"metrics": [0.5]}, "map names"),
        ({"message": 3}, "message must be a str"),
    ],
)
def test_bad_arguments_get_clear_errors(registry: AdapterRegistry, tmp_path: Path, kwargs: dict, message: str) -> None:
    src = fake_adapter(tmp_path / "s1", b"w1")
    kwargs = dict(kwargs)  # the parameter dict is shared by both engines
    agent = kwargs.pop("agent", "solver")
    with pytest.raises(ConfigError, match=message):
        registry.commit(agent, src, **kwargs)
    assert not (tmp_path / "adapters").exists()  # refused before any file was copied


def test_run_names_must_be_folder_safe(engine: Engine, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="run name"):
        AdapterRegistry(engine, "a/b", root=tmp_path)


def test_every_head_move_is_a_row(registry: AdapterRegistry, engine: Engine, tmp_path: Path) -> None:
    first = registry.commit("solver", fake_adapter(tmp_path / "s1", b"w1"))
    registry.rollback("solver", to="base")
    registry.rollback("solver", to=first.id)
    with engine.connect() as conn:
        rows = conn.execute(select(adapter_head_moves.c.from_version, adapter_head_moves.c.to_version)).all()
    assert [tuple(r) for r in rows] == [(None, first.id), (first.id, None), (None, first.id)]


def test_docstring_examples_run() -> None:
    result = doctest.testmod(adapter_versions)
    assert result.attempted > 0 and result.failed == 0


def test_the_module_never_imports_torch_or_peft(repo_root: Path) -> None:
    code = "import sys, evolve.weights.registry; print(sorted({'torch', 'peft'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_long_unicode_run_and_agent_names_get_folders_every_filesystem_allows(engine: Engine, tmp_path: Path) -> None:
    run, agent = "évaluation nordique — 北海道の夜勤チーム " * 6, "rédacteur «principal» " * 9  # 180 and 198 chars
    assert len(run.encode("utf-8")) > 255 and len(agent.encode("utf-8")) > 200
    registry = AdapterRegistry(engine, run.strip(), root=tmp_path / "adapters")
    v = registry.commit(agent.strip(), fake_adapter(tmp_path / "trained", b"w1"), message="step 1")
    assert all(len(part.encode("utf-8")) <= 200 for part in v.path.relative_to(tmp_path / "adapters").parts)
    assert v.path.parts[-3].startswith("évaluation nordique") and registry.verify(v.id) == v
    assert registry.path(agent.strip()) == v.path and (v.path / "adapter_model.safetensors").read_bytes() == b"w1"
