"""SQL text built by string formatting: a scan of the library for values formatted into SQL.

``sql_from_values`` finds ``text(...)``, ``exec_driver_sql(...)``, ``execute(...)`` and
``executescript(...)`` calls whose SQL is an f-string, ``%`` or ``.format`` of anything but the constants
allowlisted in ``SQL_ALLOWED`` (each with why it is safe). ``tests/test_sql_safety.py`` asserts none
are found; ``bench/reliability_input.py`` counts them.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("connectors", "memory", "optimizers", "evolve", "apps")
SQL_ALLOWED = {
    ("connectors/pglock.py", "_THE_LOCK"): "a constant predicate naming the advisory lock's fixed key",
    ("memory/mirror/pgvector.py", "vector({int(dim)})"): "the embedder's dimension, forced to int",
    ("memory/mirror/pgvector.py", "INTENT_ID_INDEX"): "a constant index name",
    ("memory/mirror/pgvector.py", "embedding_new {typed}"): "a column type built from the int dimension",
    ("memory/mirror/pgvector.py", "format(ef=ef)"): "SET of the HNSW ef_search, an int computed from k",
    ("memory/mirror/pgvector.py", "HNSW_INDEX"): "a constant index name and the int HNSW parameters",
    ("connectors/db.py", "BUSY_TIMEOUT_MS"): "PRAGMA takes no bound parameters; an int constant",
    ("connectors/db.py", "POLL_BUSY_MS"): "PRAGMA takes no bound parameters; an int constant",
    ("connectors/db.py", "PRAGMA {pragma}"): "the engine's own pragma list: constants and a checked durability level",
    ("connectors/db.py", "BEGIN {mode}"): "the begin mode, checked against BEGIN_MODES just before",
    ("memory/storage/database.py", "SQLITE_CACHE_KIB"): "PRAGMA takes no bound parameters; an int constant",
    ("evolve/backup/database.py", "quote(n)"): "table names read from the schema, quoted by the dialect's preparer",
}
"""Formatted SQL that interpolates trusted constants, never a caller's value: (file, snippet) -> why."""


def formatted(node: ast.expr) -> bool:
    """Whether an expression builds a string by formatting (f-string, ``%`` or ``.format``)."""
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.FormattedValue) for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"


def sql_from_values(root: Path = ROOT) -> list[str]:
    """``text(...)``, ``exec_driver_sql(...)`` and ``execute(...)`` calls whose SQL is formatted from
    anything but the allowlisted constants, as ``file:line: code``."""
    found = []
    for package in PACKAGES:
        for file in sorted((root / package).rglob("*.py")):
            source = file.read_text(encoding="utf-8")
            rel = file.relative_to(root).as_posix()
            for node in ast.walk(ast.parse(source)):
                if not (isinstance(node, ast.Call) and node.args and formatted(node.args[0])):
                    continue
                name = getattr(node.func, "attr", getattr(node.func, "id", ""))
                if name not in ("text", "exec_driver_sql", "execute", "executescript"):
                    continue
                code = ast.get_source_segment(source, node) or ""
                if not any(f == rel and snippet in code for f, snippet in SQL_ALLOWED):
                    found.append(f"{rel}:{node.lineno}: {code[:120]}")
    return found
