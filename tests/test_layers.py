"""The architecture holds: imports only point down `apps → evolve → optimizers → memory → connectors`,
and importing the library loads no heavy optional package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

LAYERS = ["connectors", "memory", "optimizers", "evolve", "apps"]


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


@pytest.mark.parametrize("package", LAYERS)
def test_imports_point_down_the_layers(package: str, repo_root: Path) -> None:
    rank = LAYERS.index(package)
    upward = [
        f"{path.relative_to(repo_root)}:{line} imports {module}"
        for path in sorted((repo_root / package).rglob("*.py"))
        for line, module in imports_of(path)
        if module.split(".")[0] in LAYERS and LAYERS.index(module.split(".")[0]) > rank
    ]
    assert upward == []


def test_importing_the_library_loads_no_heavy_package(repo_root: Path) -> None:
    code = (
        "import sys, connectors, memory, optimizers, evolve; "
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers', 'faiss', 'peft') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=repo_root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
