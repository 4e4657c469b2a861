"""How deep a package's modules stack: the longest chain of imports between its own modules.

Only imports that run when a module is imported count (its top level, and the top-level ``if`` and ``try``
blocks, ``if TYPE_CHECKING:`` left out); an import inside a function is a call's cost, not a level. An
import of ``pkg.sub.mod`` is an arrow to that module (the packages above it are not counted), so the arrows
form a DAG (``tests/test_layers.py`` refuses circles) and the depth is its longest path, counted in modules:
a module that imports none of its package's modules is one level deep.

Usage:
    python scripts/import_depth.py [package]      # default: memory

Example:
    >>> depth, chain = longest_chain("memory")
    >>> depth == len(chain) and chain[-1].startswith("memory.")
    True
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_modules(package: str, root: Path = ROOT) -> dict[str, Path]:
    """Every module of ``package`` (its subpackages too) by dotted name; a package's face is ``pkg.__init__``."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts)] = path
    return found


def run_time_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run on import: the body, and the bodies of top-level ``if`` (not ``if
    TYPE_CHECKING:``) and ``try`` blocks."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                yield from run_time_statements(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            handlers = [s for h in node.handlers for s in h.body]
            yield from run_time_statements(node.body + node.orelse + node.finalbody + handlers)


def module_imports(module: str, modules: dict[str, Path]) -> set[str]:
    """The modules of the same package that ``module`` imports when it is imported."""
    package = module.removesuffix(".__init__") if module.endswith(".__init__") else module.rpartition(".")[0]

    def resolve(name: str) -> str | None:
        if name in modules:
            return name
        return f"{name}.__init__" if f"{name}.__init__" in modules else None

    found: set[str] = set()
    tree = ast.parse(modules[module].read_text(encoding="utf-8"))
    for node in run_time_statements(tree.body):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            # ``from pkg import submodule`` points at the submodule, anything else at the module it names
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            hit = resolve(target)
            if hit is not None and hit != module:
                found.add(hit)
    return found


def longest_chain(package: str = "memory", root: Path = ROOT) -> tuple[int, list[str]]:
    """(depth, chain): the longest import chain among ``package``'s modules, importer first."""
    modules = package_modules(package, root)
    graph = {m: module_imports(m, modules) for m in modules}

    @cache
    def deepest(module: str) -> tuple[str, ...]:
        below = [deepest(t) for t in sorted(graph[module])]
        return (module, *max(below, key=len, default=()))

    best = max((deepest(m) for m in sorted(graph)), key=len, default=())
    return len(best), list(best)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", nargs="?", default="memory", help="a top-level package (default: memory)")
    args = parser.parse_args(argv)
    depth, chain = longest_chain(args.package)
    print(f"{args.package}: import depth {depth}")
    for level, module in enumerate(chain, 1):
        print(f"  {level:2d}  {module}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
