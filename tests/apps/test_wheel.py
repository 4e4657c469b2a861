"""Installable as users install it (issue 41, item 7): a wheel built from the repository carries the bundled
task sets and specs, and the unpacked package finds them through ``importlib.resources`` from any folder.

The wheel is built from a copy of what it is made of (``pip wheel`` in place would write ``build/`` and an
``.egg-info`` into the checkout), without build isolation: the venv's setuptools, no index needed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from evolve.envs.bundled import CHECKOUT, bundled_root, bundled_specs, database_folder, spec_file
from evolve.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("apps", "connectors", "evolve", "memory", "optimizers")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "runs", "*.db", "*.db-*", "*.faiss")
    for folder in (*PACKAGES, "data"):
        shutil.copytree(ROOT / folder, src / folder, ignore=skip)
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [built] = out.glob("evolve-*.whl")
    return built


def test_the_wheel_carries_the_bundled_data_and_every_module(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {p.name for p in CHECKOUT.iterdir() if p.suffix in (".jsonl", ".toml")}
    assert shipped >= {"facility_codes.jsonl", "facility_codes.toml", "format_rules_team.toml"}
    assert {f"evolve/data/{name}" for name in shipped} <= names
    # pyproject lists the packages (so that data/ can be evolve.data): a package left off that list fails here
    modules = {p.relative_to(ROOT).as_posix() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    assert modules - names == set()
    assert not any(name.startswith(("data/", "tests/", "bench/")) for name in names)  # no top-level strays


def test_the_unpacked_wheel_finds_its_specs_from_any_folder(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "Zürich Tests" / "leer"  # a folder with no data/ in it
    elsewhere.mkdir(parents=True)
    home = tmp_path / "évolve home"
    env = {**os.environ, "PYTHONPATH": str(site), "EVOLVE_HOME": str(home)}
    probe = (
        "import json, evolve; from evolve.envs.bundled import bundled_root, spec_file; "
        "from evolve.spec import load_spec; from evolve import load_tasks; s = load_spec('data/facility_codes.toml'); "
        "print(json.dumps({'package': evolve.__file__, 'root': str(bundled_root()), 'bare': str(spec_file('facility_codes')), "
        "'spec': str(s.path), 'db': s.run.database, 'tasks': len(load_tasks(s.resolve(s.environment.tasks)))}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    data = site / "evolve" / "data"
    assert Path(found["package"]).parent == site / "evolve"  # the unpacked wheel, not the checkout
    assert Path(found["root"]) == data
    assert Path(found["bare"]) == Path(found["spec"]) == data / "facility_codes.toml"
    assert found["db"] == f"sqlite:///{home / 'runs' / 'evolve.db'}"  # not inside the installed package
    assert found["tasks"] == len((CHECKOUT / "facility_codes.jsonl").read_text(encoding="utf-8").splitlines())

    missing = subprocess.run(
        [sys.executable, "-m", "apps.cli", "run", "facility_kodes"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2
    assert "spec file facility_kodes does not exist" in missing.stderr
    assert ", ".join(bundled_specs()) in missing.stderr  # the bundled specs, by name
    assert not home.exists()  # a failed command creates nothing


def test_in_a_checkout_the_helper_reads_data_and_keeps_runs_beside_the_spec(tmp_path: Path) -> None:
    assert bundled_root() == CHECKOUT == ROOT / "data"
    assert spec_file("facility_codes") == spec_file("data/facility_codes.toml") == CHECKOUT / "facility_codes.toml"
    assert database_folder(CHECKOUT / "facility_codes.toml") == CHECKOUT  # data/runs/, as the README says
    assert load_spec("lookalikes").run.database == f"sqlite:///{CHECKOUT / 'runs' / 'lookalikes.db'}"
    own = tmp_path / "facility_codes.toml"  # a file that exists wins over the bundled spec of that name
    own.write_text((CHECKOUT / "facility_codes.toml").read_text(encoding="utf-8"), encoding="utf-8")
    assert spec_file(own) == own and database_folder(own) == tmp_path
