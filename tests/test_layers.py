"""The architecture holds as ARCHITECTURE.md draws it: every import points down its layer map, no files
import each other in a circle, tests never import benchmarks, the package faces are lazy and complete,
and no file outgrows a reader."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("connectors", "memory", "optimizers", "evolve", "apps", "bench", "tests")
LIBRARY = ("connectors", "memory", "optimizers", "evolve", "apps")
MAX_LINES = 450
MAX_ROOT_MODULES = 12  # evolve/ root: the loop and its vocabulary; concepts get their own folders


# ---- the import graph ---------------------------------------------------------------------------------
def module_name(path: Path) -> str:
    """``evolve/deploy/serving.py`` → ``evolve.deploy.serving``; a package's face is ``<pkg>.__init__``."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


@cache
def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def resolve(name: str) -> str | None:
    """The file an imported name lives in: a module, or the face of the package it names."""
    known = modules()
    while name:
        if name in known:
            return name
        if f"{name}.__init__" in known:
            return f"{name}.__init__"
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str) -> Iterator[tuple[int, str]]:
    """(line, imported file) for every project import of ``module``, TYPE_CHECKING ones and those inside
    functions included: an import anywhere is an arrow a reader has to follow."""
    path = modules()[module]
    package = module.rsplit(".", 1)[0] if not module.endswith(".__init__") else module[: -len(".__init__")]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            # ``from pkg import submodule`` points at the submodule, anything else at pkg's file
            targets = [
                f"{base}.{a.name}" if resolve(f"{base}.{a.name}") == f"{base}.{a.name}" else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            found = resolve(target)
            if found is not None and found != module:
                yield node.lineno, found


# ---- the layer map ------------------------------------------------------------------------------------
def layer_map() -> list[list[list[str]]]:
    """ARCHITECTURE.md's map: lines top to bottom; on a line, sibling groups split by ``|``; a group is
    module prefixes (``evolve.prompts`` is the folder, ``evolve.__init__`` the face)."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "ARCHITECTURE.md has no ```layers block"
    lines = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    return [[group.split() for group in line.split("|")] for line in lines if line]


def place(module: str, layers: list[list[list[str]]]) -> tuple[int, int] | None:
    """(line, group) of the longest prefix that names ``module``; None when the map does not place it."""
    best: tuple[int, int, int] | None = None
    for i, line in enumerate(layers):
        for j, group in enumerate(line):
            for prefix in group:
                if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[2]):
                    best = (i, j, len(prefix))
    return None if best is None else best[:2]


def test_the_layer_map_places_every_library_module() -> None:
    layers = layer_map()
    unplaced = [m for m in modules() if m.split(".")[0] in LIBRARY and place(m, layers) is None]
    assert unplaced == []


@pytest.mark.parametrize("package", LIBRARY)
def test_imports_point_down_the_layer_map(package: str) -> None:
    """A module imports its own group or a line below it; never a line above, a sibling group, tests or bench."""
    layers = layer_map()
    wrong = []
    for module in modules():
        if module.split(".")[0] != package:
            continue
        here = place(module, layers)
        for line, target in imports_of(module):
            there = place(target, layers)
            if there is None or there[0] < here[0] or (there[0] == here[0] and there[1] != here[1]):  # type: ignore[index]
                wrong.append(f"{modules()[module].relative_to(ROOT)}:{line} imports {target}")
    assert wrong == []


def test_no_files_import_each_other_in_a_circle() -> None:
    graph = {m: {t for _, t in imports_of(m)} for m in modules()}
    circles = [sorted(c) for c in strongly_connected(graph) if len(c) > 1]
    assert circles == []


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components, iteratively (the graph has hundreds of files)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                found.append(component)
    return found


def test_tests_never_import_bench_and_bench_uses_only_test_support() -> None:
    wrong = []
    for module in modules():
        top = module.split(".")[0]
        for line, target in imports_of(module):
            if top == "tests" and target.startswith("bench."):
                wrong.append(f"{module}:{line} imports {target}")
            if (
                top == "bench"
                and target.startswith("tests.")
                and not target.startswith(("tests.support.", "tests.reliability."))
            ):
                wrong.append(f"{module}:{line} imports {target} (bench may use tests.support and tests.reliability)")
    assert wrong == []


# ---- sizes --------------------------------------------------------------------------------------------
def test_no_file_outgrows_a_reader() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in modules().values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_evolve_root_holds_the_loop_and_its_vocabulary_only() -> None:
    root_modules = sorted(p.name for p in (ROOT / "evolve").glob("*.py"))
    assert len(root_modules) <= MAX_ROOT_MODULES, root_modules


# ---- the package faces --------------------------------------------------------------------------------
@pytest.mark.parametrize("package", ["connectors", "memory", "optimizers", "evolve"])
def test_every_exported_name_imports(package: str) -> None:
    face = importlib.import_module(package)
    missing = [name for name in face.__all__ if not hasattr(face, name)]
    assert missing == [] and len(set(face.__all__)) == len(face.__all__)


def test_the_evolve_face_is_lazy_and_its_map_is_its_all() -> None:
    import evolve

    assert sorted(evolve._WHERE) == sorted(evolve.__all__)  # type: ignore[attr-defined]
    code = "import sys, evolve; print(sorted(m for m in sys.modules if m.startswith('evolve.')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    code = "import evolve; evolve.NoSuchThing"
    err = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert "module 'evolve' has no attribute 'NoSuchThing'" in err.stderr


def test_importing_the_library_loads_no_heavy_package() -> None:
    code = (
        "import sys, connectors, memory, optimizers, evolve; "
        "from evolve import Evolver, Deployment, PromptGraph, AdapterRegistry, TextWorldEnv; "
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers', 'faiss', 'peft') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
