"""``evolve serve SPEC``: load the API keys and the spec, then serve the OpenAI-compatible app
(``evolve.serve.protocols.openai_http``) with uvicorn.

Keys come from ``--key KEY=TENANT`` (repeatable), ``$EVOLVE_API_KEYS`` (``"key1=alice,key2=bob"``) and
a TOML file (``--keys FILE``); the operator's (``--admin-key KEY``, ``$EVOLVE_ADMIN_KEYS``, the file's
``[admin]`` table) open ``evolve.serve.protocols.openai_admin``'s routes (``evolve.serve.protocols.keys``)::

    [keys]
    "sk-alice-3f9c..." = "alice"
    "sk-bob-77ad..." = "bob"

    [admin]
    keys = ["sk-ops-b81e..."]

``GET /metrics`` is open and names no tenant; ``--metrics-tenants`` labels tenants and opens it to an operator key
only; ``--otel`` traces every request with OpenTelemetry (``evolve.serve.protocols.telemetry``).

Building the parser imports nothing heavy; FastAPI, uvicorn and the models load when the command runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from apps.options import (
    add_admin_key,
    add_log_level_alias,
    add_telemetry,
    count,
    exit_on,
    restore_signals,
    server_log_level,
    server_metrics,
    server_tracing,
)
from connectors import ConfigError
from evolve.serve.protocols.keys import ADMIN_ENV, load_admin_keys, load_keys

log = logging.getLogger(__name__)


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket (port 0: a free one), so the printed URL is the real one.

    The socket names its protocol (IPPROTO_TCP): asyncio sets TCP_NODELAY only on such sockets, and
    without it every reply on a kept-alive connection waits ~40 ms for a delayed ACK (Nagle).
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen()
        except OSError:
            sock.close()
            raise
        return sock
    except OSError as e:
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/v1" if ":" in host else f"http://{host}:{port}/v1"


def cmd_serve(args: argparse.Namespace) -> None:
    """``evolve serve``: load the keys and the spec, then serve until interrupted."""
    try:
        import fastapi  # noqa: F401 (checked before the models load)
        import uvicorn  # noqa: F401 (checked before the models load)
    except ImportError as e:
        from evolve.serve.protocols.openai_http import INSTALL_HINT

        raise ConfigError(INSTALL_HINT) from e
    from evolve.serve.deployment import Deployment
    from evolve.serve.protocols.openai_http import create_app
    from evolve.serve.protocols.telemetry import check_tenant_labels
    from evolve.spec import load_spec

    keys = load_keys(file=args.keys, pairs=args.key, env=os.environ.get("EVOLVE_API_KEYS"))
    admin = load_admin_keys(tenants=keys, file=args.keys, keys=args.admin_key, env=os.environ.get(ADMIN_ENV))
    check_tenant_labels(args.metrics_tenants, admin, command="evolve serve")
    tracing = server_tracing(args, "evolve serve")
    spec = load_spec(args.spec)
    with listen(args.host, args.port) as sock:  # before the models load: a busy port fails fast
        deployment = Deployment(spec)
        store, engine = deployment.store, deployment.engine
        metrics = server_metrics(args, store=store, ratings=engine, ledger=engine)
        banner = [f"evolve serve: model {deployment.model_id!r} at {base_url(sock)}", tenants_line(keys, admin)]
        make_app = lambda: create_app(deployment, keys, admin_keys=admin, metrics=metrics, tracing=tracing)  # noqa: E731
        serve_until_stopped(sock, make_app, banner, server_log_level(args, "info"), closing(deployment.close, tracing))


def closing(close: Callable[[], None], tracing: Any) -> Callable[[], None]:
    """``close``, then the tracing's (its buffered spans are sent) when there is one."""

    def both() -> None:
        try:
            close()
        finally:
            if tracing is not None:
                tracing.close()

    return both


def tenants_line(keys: Mapping[str, str], admin: Sequence[str] | None = None) -> str:
    """The served tenants; with ``admin`` (the operator keys), whether the operator's routes are on."""
    line = f"tenants: {', '.join(sorted(set(keys.values())))}"
    if admin is not None:
        line += f"; operator: {len(admin)} key{'s' if len(admin) != 1 else ''}" if admin else "; operator: off"
    return line


def serve_until_stopped(
    sock: socket.socket, make_app: Callable[[], Any], banner: Sequence[str], log_level: str, close: Callable[[], None]
) -> None:
    """Serve ``make_app()`` on ``sock`` with uvicorn until SIGINT or SIGTERM (``exit_on_signals``), having printed
    ``banner``; ``close()`` runs however it ends (it saves the vector index). ``evolve serve``, ``mcp`` and ``a2a``."""
    import uvicorn

    previous = exit_on_signals()
    try:
        app = make_app()
        for line in banner:
            print(line, flush=True)
        uvicorn.Server(uvicorn.Config(app, log_level=log_level)).run(sockets=[sock])
    finally:
        restore_signals(previous)
        close()


def exit_on_signals() -> dict[int, Any]:
    """SIGINT/SIGTERM end the process through ``SystemExit`` (no traceback, ``finally`` blocks run).

    uvicorn shuts down gracefully on either, then re-raises the signal it caught; with the default
    handlers that would kill the process before the deployment saves its index (SIGTERM) or print a
    KeyboardInterrupt traceback (SIGINT). Returns the previous handlers.
    """
    return exit_on((signal.SIGINT, signal.SIGTERM))


def add_serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``evolve serve SPEC [--host] [--port] [--keys FILE] [--key KEY=TENANT ...] [--admin-key KEY ...]``."""
    s = sub.add_parser("serve", help="an OpenAI-compatible API over the spec's team; bearer keys map to tenants")
    s.add_argument("spec", type=Path, help="the run's TOML spec (model, embedder, database, agents)")
    s.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=count(0, 65535), default=8000, help="port (default 8000; 0 picks a free one)")
    s.add_argument("--keys", type=Path, default=None, metavar="FILE", help='TOML file: [keys] "KEY" = "TENANT"')
    s.add_argument("--key", action="append", default=[], metavar="KEY=TENANT",
                   help="an API key and its tenant (repeatable; also $EVOLVE_API_KEYS='k1=alice,k2=bob')")  # fmt: skip
    add_admin_key(s)
    add_telemetry(s)
    add_log_level_alias(s)
    s.set_defaults(func=cmd_serve)
