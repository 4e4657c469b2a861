"""No library module builds SQL text from values: every value travels as a bound parameter.

The scan (``tests.reliability.sql_scan.sql_from_values``) finds ``text(...)``, ``exec_driver_sql(...)`` and
``execute(...)`` calls whose SQL is an f-string, ``%``, ``+`` or ``.format``; the few that interpolate
trusted constants (PRAGMA values, index names, the embedder's int dimension) are allowlisted with why.
"""

from __future__ import annotations

from pathlib import Path

from tests.reliability.sql_scan import SQL_ALLOWED, sql_from_values


def test_no_sql_is_built_from_values() -> None:
    assert sql_from_values() == []


def test_the_scan_catches_formatted_sql(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "bad.py").write_text(
        "def f(conn, name):\n    conn.execute(text(f\"SELECT * FROM t WHERE n = '{name}'\"))\n"
        '    conn.exec_driver_sql("DELETE FROM t WHERE n = %s" % name)\n'
        '    conn.execute(text("SELECT * FROM t WHERE n = :n"), {"n": name})\n'
    )
    found = sql_from_values(tmp_path)
    assert sorted(f.split(":")[1] for f in found) == ["2", "3"]


def test_every_allowlist_entry_still_matches_code() -> None:
    root = Path(__file__).resolve().parent.parent
    for (file, snippet), why in SQL_ALLOWED.items():
        assert why and snippet in (root / file).read_text(encoding="utf-8"), (file, snippet)


PLAIN_CONNECT_ALLOWED = {
    "evolve/backup/postgres.py": "PostgreSQL only: the SQLite begin hook never runs",
    "evolve/backup/database.py": "a plain engine of its own on a backup file, without connectors.db's hook",
    "connectors/db.py": "server_read_only: PostgreSQL only",
    "evolve/ledger.py": "a docstring example",
    "connectors/pglock.py": "a PostgreSQL advisory lock on an AUTOCOMMIT connection",
}


def test_reads_go_through_for_reads_not_a_plain_connect() -> None:
    """``engine.connect()`` autobegins IMMEDIATE on SQLite (connectors.db's begin hook): a read that way takes
    the write lock and queues behind every writer. Reads say ``for_reads(engine).connect()``."""
    root = Path(__file__).resolve().parents[1]
    plain = [
        f"{path.relative_to(root)}:{n}"
        for package in ("apps", "connectors", "evolve", "memory", "optimizers")
        for path in sorted((root / package).rglob("*.py"))
        if path.relative_to(root).as_posix() not in PLAIN_CONNECT_ALLOWED
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "engine.connect()" in line and "for_reads(" not in line and "self._conn = " not in line
    ]
    assert plain == [], "read through connectors.db.for_reads(engine).connect(), or allowlist with why"
