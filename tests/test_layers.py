"""The architecture holds as ARCHITECTURE.md draws it: its tree names what exists and every folder of code,
every import points down its layer map and takes a public name from where it lives, no files import each
other in a circle, tests never import benchmarks, heavy packages load only when used, the package faces
are lazy and complete, and no file outgrows a reader."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
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
MAX_MEMORY_DEPTH = 8  # memory/: the longest chain of imports between its modules, in modules
# ARCHITECTURE.md: heavy packages imported inside functions, except at the top of these two modules
HEAVY = ("torch", "transformers", "sentence_transformers", "peft", "vllm", "faiss", "streamlit", "langchain")
HEAVY += ("langchain_core", "langgraph", "ray", "psycopg", "onnxruntime", "onnx", "onnxscript")
HEAVY_AT_TOP = {"optimizers.marft.maths": {"torch"}, "apps.playground": {"streamlit"}}
NOT_CODE = {"build", "dist", "site", "node_modules", "__pycache__"}  # folders the tree never lists


# ---- the import graph ---------------------------------------------------------------------------------
def module_name(path: Path) -> str:
    """``evolve/serve/deployment.py`` → ``evolve.serve.deployment``; a package's face is ``<pkg>.__init__``."""
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


# ---- what an import takes from another package -------------------------------------------------------
@cache
def bound_names(module: str) -> frozenset[str]:
    """The names ``module`` binds itself when imported (defines or assigns), not those it imports."""
    bound: set[str] = set()
    for node in top_level(ast.parse(modules()[module].read_text(encoding="utf-8")).body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound |= {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
    return frozenset(bound)


def exported_names(face: str) -> frozenset[str] | None:
    """A face's ``__all__`` (faces are light to import: ``test_importing_the_library_loads_no_heavy_package``);
    None when it has none."""
    exported = getattr(importlib.import_module(face.removesuffix(".__init__")), "__all__", None)
    return None if exported is None else frozenset(exported)


def top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run when a module is imported: its body and the bodies of its top-level ``if``
    and ``try`` blocks, ``if TYPE_CHECKING:`` excluded (never at run time); not functions' or classes'."""
    for node in body:
        yield node
        if isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            yield from top_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from top_level(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])


@pytest.mark.parametrize("package", LIBRARY)
def test_imports_from_another_package_take_public_names_from_where_they_live(package: str) -> None:
    """From another library package: no private name or module; from a module only what it binds (or a
    submodule), not what it imports; from a face only what its ``__all__`` lists (or a submodule)."""
    wrong = []
    for module, path in modules().items():
        if module.split(".")[0] != package:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                taken = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                taken = [(node.module, a.name) for a in node.names]
            else:
                continue
            for source, name in taken:
                if source.split(".")[0] not in LIBRARY or source.split(".")[0] == package:
                    continue
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                if any(part.startswith("_") for part in source.split(".") + [name or ""]):
                    wrong.append(f"{where} takes a private name: {source} {name or ''}".rstrip())
                    continue
                target = resolve(source)
                if name is None or target is None or resolve(f"{source}.{name}") == f"{source}.{name}":
                    continue  # ``import pkg.module``, or a submodule
                exported = exported_names(target) if target.endswith(".__init__") else None
                if exported is not None:
                    if name not in exported:
                        wrong.append(f"{where} takes {name} from {source}, whose __all__ does not list it")
                elif name not in bound_names(target):
                    wrong.append(f"{where} takes {name} from {source}, which only imports it: take it where it lives")
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


def test_heavy_packages_are_imported_where_the_map_says() -> None:
    """Inside functions; at a module's top only in ``try: ... except ImportError: raise ConfigError(...)`` (the
    error names the extra), or plainly in the modules ``HEAVY_AT_TOP`` names."""
    wrong = []
    for module, path in modules().items():
        if module.split(".")[0] not in LIBRARY:
            continue
        body = ast.parse(path.read_text(encoding="utf-8")).body
        guarded = {id(n) for node in body if says_which_extra(node) for n in ast.walk(node)}
        for node in top_level(body):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for top in {n.split(".")[0] for n in names} & set(HEAVY):
                if id(node) not in guarded and top not in HEAVY_AT_TOP.get(module, set()):
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {top} when it is imported")
    assert wrong == []


def says_which_extra(node: ast.stmt) -> bool:
    """A ``try`` whose ``except ImportError`` raises a ``ConfigError`` (whose message names the extra)."""
    if not isinstance(node, ast.Try):
        return False
    for handler in node.handlers:
        caught = handler.type
        names = {n.id for n in ast.walk(caught) if isinstance(n, ast.Name)} if caught is not None else set()
        raises = [
            r
            for r in handler.body
            if isinstance(r, ast.Raise)
            and isinstance(r.exc, ast.Call)
            and isinstance(r.exc.func, ast.Name)
            and r.exc.func.id == "ConfigError"
        ]
        if names & {"ImportError", "ModuleNotFoundError"} and raises:
            return True
    return False


# ---- the tree ARCHITECTURE.md draws -------------------------------------------------------------------
def drawn_tree() -> tuple[set[str], set[str]]:
    """(the folders the tree lists, the ``.py`` files it names), as paths from the repository root.

    An entry starts within six spaces of the margin (deeper lines continue the description above); an
    entry's folder is the nearest folder entry above it that is less indented. A file named anywhere on an
    entry or its description lives in that entry's folder (the entry itself when it is a folder)."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    block = re.search(r"## The tree\n+```\n(.*?)```", text, re.S)
    assert block, "ARCHITECTURE.md has no tree under '## The tree'"
    folders: set[str] = set()
    files: set[str] = set()
    stack: list[tuple[int, str]] = []
    here = ""
    for line in block.group(1).splitlines():
        indent = len(line) - len(line.lstrip())
        if line.strip() and indent <= 6:
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parent = stack[-1][1] if stack else ""
            entry = re.split(r"\s{2,}", line.strip())[0]
            if entry.endswith("/"):
                here = f"{parent}{entry}"
                stack.append((indent, here))
                folders.add(here.rstrip("/"))
            else:
                here = parent
        files |= {f"{here}{name}" for name in re.findall(r"[\w/]+\.py\b", line)}
    return folders, files


def test_the_tree_names_only_files_and_folders_that_exist() -> None:
    folders, files = drawn_tree()
    missing = sorted(p for p in folders | files if not (ROOT / p).exists())
    assert missing == []


def test_the_tree_lists_every_folder_that_holds_code() -> None:
    folders, _ = drawn_tree()
    code = set()
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [s for s in subfolders if not (s.startswith(".") or s in NOT_CODE or s.endswith(".egg-info"))]
        if any(name.endswith(".py") for name in names):
            code.add(Path(folder).relative_to(ROOT).as_posix())
    mirrored = {f for f in code if f.startswith("tests/") and f.removeprefix("tests/") in folders}
    unlisted = sorted(code - folders - mirrored - {"."})
    assert unlisted == []


# ---- sizes --------------------------------------------------------------------------------------------
def test_no_file_outgrows_a_reader() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in modules().values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_evolve_root_holds_the_loop_and_its_vocabulary_only() -> None:
    """Deprecated paths (a ``moved_module`` shim and nothing else, gone in the next release) do not count."""
    root_modules = sorted(
        p.name for p in (ROOT / "evolve").glob("*.py") if "__getattr__ = moved_module(" not in p.read_text("utf-8")
    )
    assert len(root_modules) <= MAX_ROOT_MODULES, root_modules


def test_memory_stacks_at_most_eight_modules_deep() -> None:
    """``memory/`` in rooms: its longest chain of imports run on import (``scripts/import_depth.py``, the same
    measure), counted in modules, stays within ``MAX_MEMORY_DEPTH`` (it was 17 in one flat folder)."""
    spec = importlib.util.spec_from_file_location("import_depth", ROOT / "scripts" / "import_depth.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    depth, chain = script.longest_chain("memory", ROOT)
    print(f"\nmemory import depth {depth}: {' -> '.join(chain)}")
    assert depth <= MAX_MEMORY_DEPTH, chain


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
