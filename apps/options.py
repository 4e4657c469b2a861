"""What the commands share: number options that refuse nonsense where they are parsed (``--rounds 0`` is an
error, not "the spec's rounds"), the line that names a command's database, and install hints; and the one
grammar every command follows:

- a run is found by its spec: ``SPEC`` (a TOML file or a bundled spec's name) as the first word of a command
  about one run (``evolve run SPEC``), ``--spec SPEC`` on a command that reads a database (``evolve memory
  stats --spec SPEC``), where ``--db URL`` names a database without a spec (``add_database``, ``located``);
- ``--host`` wherever an address to listen on is taken;
- ``-v/--verbose`` and ``-q/--quiet`` on ``evolve`` and on every command (``add_verbosity``);
- an old spelling (``--address``, ``--log-level``, ``--graph``) still parses for one release, hidden from the
  help, and says on stderr what to write instead (``Deprecated``).

Each number helper returns an argparse ``type=``: a value out of range exits 2 with argparse's usage line and a
message that says what was expected, before anything is loaded.

Example:
    >>> import argparse
    >>> p = argparse.ArgumentParser(prog="evolve run")
    >>> _ = p.add_argument("--rounds", type=count(1), default=None)
    >>> p.parse_args(["--rounds", "3"]).rounds
    3
    >>> count(1)("0")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: must be an integer >= 1, got '0'
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def count(low: int, high: int | None = None) -> Callable[[str], int]:
    """An integer option in ``[low, high]`` (no upper bound when ``high`` is None)."""
    expected = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}")
        return value

    return parse


def seconds(text: str) -> float:
    """A positive, finite number of seconds (``--lease-ttl``)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


__all__ = ["count", "seconds"]


def add_admin_key(parser: argparse.ArgumentParser, *, only: str = "") -> None:
    """``--admin-key KEY`` (repeatable), as ``evolve serve`` and ``evolve mcp`` take it
    (``evolve.serve.protocols.keys``); ``only`` prefixes the help (``"http: "``)."""
    parser.add_argument(
        "--admin-key", action="append", default=[], metavar="KEY",
        help=f"{only}an operator key: opens the memory's defences (distrust, undo, release) and no tenant's "
        "routes (repeatable; also $EVOLVE_ADMIN_KEYS='k1,k2' or [admin] keys = [...] in --keys FILE)",
    )  # fmt: skip


def add_telemetry(parser: argparse.ArgumentParser, *, tenants: bool = True, only: str = "") -> None:
    """``--otel`` and (``tenants``) ``--metrics-tenants``, as ``evolve serve``, ``mcp`` and ``a2a`` take them
    (``evolve.serve.protocols.telemetry``); ``only`` prefixes the help (``"http: "``). Read them with
    ``server_tracing`` and ``server_metrics``."""
    if tenants:
        parser.add_argument(
            "--metrics-tenants", action="store_true",
            help=f"{only}label /metrics' memory gauges with each tenant's namespace (default: every tenant's folded "
            "into <run>@*/<agent>); /metrics then opens to an operator key only",
        )  # fmt: skip
    parser.add_argument(
        "--otel", action="store_true",
        help=f"{only}trace every request with OpenTelemetry: a span with GenAI attributes, the recall, model call "
        "and recording as children; OTEL_* variables configure it (OTLP by default); needs the otel extra",
    )  # fmt: skip


def server_tracing(args: argparse.Namespace, service: str) -> Any:
    """The ``Tracing`` a server's app takes with ``--otel`` (None without): made before the models load, so a
    missing SDK fails at once (``evolve.serve.tracing``)."""
    if not args.otel:
        return None
    from evolve.serve.tracing import Tracing

    return Tracing.from_environment(service, tenants=bool(getattr(args, "metrics_tenants", False)))


def server_metrics(args: argparse.Namespace, *, store: Any, ratings: Any = None, ledger: Any = None) -> Any:
    """The ``Metrics`` a server's app shows at ``/metrics``: ``store``'s memory, the quarantined ratings of the
    ``ratings`` database and the job ledger of the ``ledger`` one (None: not shown), tenants labelled with
    ``--metrics-tenants``."""
    from functools import partial

    from evolve.jobs.job import job_counts
    from evolve.serve.metrics import Metrics

    jobs = partial(job_counts, ledger) if ledger is not None else None
    tenants = bool(getattr(args, "metrics_tenants", False))
    return Metrics(store=store, engine=ratings, jobs=jobs, tenants=tenants)


def quiet_loading(quiet: bool) -> None:
    """``-q``/``--quiet`` also hides the model loaders' progress bars (transformers, hub)."""
    if quiet:
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def say_database(command: str, url: str | None) -> None:
    """Which database a command works on (password hidden), on stderr: stdout stays the command's output.

    A spec's relative SQLite path is relative to the spec file; this line shows where that put it.
    """
    from connectors.db import default_url
    from connectors.redact import redact_url

    print(f"evolve {command}: database {redact_url(url or default_url())}", file=sys.stderr, flush=True)


def exit_on(signals: Sequence[int]) -> dict[int, Any]:
    """Each of ``signals`` ends the process through ``SystemExit(128 + signum)``: no traceback, and ``finally``
    blocks run (a store saves its vector index, a job releases its lease, a child process group is stopped),
    where the default SIGTERM kills the process where it stands. Returns the previous handlers (none are
    changed outside the main thread, where Python cannot set them).
    """
    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    return {sig: signal.signal(sig, stop) for sig in signals}


def restore_signals(previous: dict[int, Any]) -> None:
    """Put back the handlers ``exit_on`` replaced."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)


# ---- the grammar: verbosity, where a run is, old spellings ---------------------------------------------------

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
"""A server's log levels (uvicorn's), quietest first: ``-v`` moves a command's default one step right, ``-q`` left."""
DB_HELP = "a database without a spec: its SQLAlchemy URL (default: $EVOLVE_HOME/evolve.db)"


class Deprecated(argparse.Action):
    """An old spelling of an option, hidden from ``--help``: it still works for one release, and says on stderr
    what to write instead.

    Example:
        >>> p = argparse.ArgumentParser(prog="evolve playground")
        >>> _ = p.add_argument("--host", default="127.0.0.1", help="interface to listen on")
        >>> _ = p.add_argument("--address", dest="host", action=Deprecated, note="use --host")
        >>> p.parse_args(["--address", "0.0.0.0"]).host  # stderr: ... --address is deprecated ...; use --host
        '0.0.0.0'
    """

    def __init__(self, option_strings: Sequence[str], dest: str, *, note: str, **kwargs: Any) -> None:
        kwargs.setdefault("default", argparse.SUPPRESS)  # the new spelling's default stands
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)
        self.note = note

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(
            f"{parser.prog}: {option_string} is deprecated and goes in the next release; {self.note}", file=sys.stderr
        )
        setattr(namespace, self.dest, values)


def add_verbosity(parser: argparse.ArgumentParser) -> None:
    """``-v/--verbose`` and ``-q/--quiet``: the same on ``evolve`` and on every command, before or after the
    command's name (``evolve -v run SPEC`` is ``evolve run SPEC -v``). Read them with ``verbosity``."""
    parser.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS,
        help="say more: log at INFO (-vv: DEBUG); a server logs one step more than its default",
    )  # fmt: skip
    parser.add_argument(
        "-q", "--quiet", action="count", default=argparse.SUPPRESS,
        help="say less: no progress bars or loading messages, log errors only; a server logs one step less",
    )  # fmt: skip


def verbosity(args: argparse.Namespace) -> int:
    """How many ``-v`` were given, less how many ``-q``: ``evolve run SPEC -q`` is -1."""
    return int(getattr(args, "verbose", 0) or 0) - int(getattr(args, "quiet", 0) or 0)


def log_level(args: argparse.Namespace) -> int:
    """The process's logging level: WARNING, INFO with ``-v``, DEBUG with ``-vv``, ERROR with ``-q``."""
    import logging

    return {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}.get(max(verbosity(args), -1), logging.DEBUG)


def server_log_level(args: argparse.Namespace, default: str) -> str:
    """A server's (uvicorn's) log level: ``default`` one step louder per ``-v``, quieter per ``-q``; the deprecated
    ``--log-level LEVEL``, where given, as it was."""
    if getattr(args, "log_level", None) is not None:
        return str(args.log_level)
    at = LOG_LEVELS.index(default) + verbosity(args)
    return LOG_LEVELS[min(max(at, 0), len(LOG_LEVELS) - 1)]


def add_log_level_alias(parser: argparse.ArgumentParser) -> None:
    """The servers' old ``--log-level LEVEL`` (``evolve serve``, ``mcp``, ``a2a``): use ``-v`` or ``-q``."""
    parser.add_argument(
        "--log-level", dest="log_level", action=Deprecated, default=None, choices=LOG_LEVELS,
        note="use -v (louder) or -q (quieter)",
    )  # fmt: skip


def add_database(parser: argparse.ArgumentParser, *, run: str = "") -> None:
    """``--spec SPEC | --db URL``: how a command that reads a database finds it (``evolve memory``, ``prompts``,
    ``adapters``, ``report``); the two together are refused. ``run`` names what else the spec gives
    (``" and run name"``). Read them with ``located``."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--spec", type=Path, default=None, metavar="SPEC",
        help=f"the run's TOML spec, or a bundled spec's name (facility_codes): its [run] database{run}",
    )  # fmt: skip
    where.add_argument("--db", default=None, metavar="URL", help=DB_HELP)


def located(args: argparse.Namespace, command: str) -> tuple[str, str | None]:
    """The database URL a command works on and the run its spec names: with ``--spec``, the spec's ``[run]``
    database and name, found as ``evolve run SPEC`` finds them (``load_spec``: relative to the spec file, a
    bundled spec by name), said on stderr; else ``--db`` (default ``$EVOLVE_HOME/evolve.db``) and no run."""
    from connectors.db import default_url

    if args.spec is None:
        return args.db or default_url(), None
    from evolve.spec import load_spec

    spec = load_spec(args.spec)
    say_database(command, spec.run.database)
    return spec.run.database or default_url(), spec.run.name
