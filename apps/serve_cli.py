"""``evolve serve SPEC``: load the API keys and the spec, then serve ``apps.server``'s app with uvicorn.

Keys come from ``--key KEY=TENANT`` (repeatable), ``$EVOLVE_API_KEYS`` (``"key1=alice,key2=bob"``) and
a TOML file (``--keys FILE``) with one table::

    [keys]
    "sk-alice-3f9c..." = "alice"
    "sk-bob-77ad..." = "bob"

Building the parser imports nothing heavy; FastAPI, uvicorn and the models load when the command runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from apps.options import SERVE_INSTALL_HINT as INSTALL_HINT
from apps.options import count
from connectors import ConfigError

log = logging.getLogger(__name__)


def parse_pairs(items: Sequence[str], where: str) -> list[tuple[str, str]]:
    """``KEY=TENANT`` items (the tenant follows the last '='; keys may contain '='). Errors never echo a key."""
    pairs = []
    for i, item in enumerate(items, 1):
        if not item.strip():
            continue
        key, sep, tenant = item.strip().rpartition("=")
        if not sep or not key or not tenant:
            raise ConfigError(f"{where} entry #{i} must look like KEY=TENANT")
        pairs.append((key, tenant))
    return pairs


def keys_file(path: Path) -> list[tuple[str, str]]:
    """The ``[keys]`` table of a TOML file: ``"KEY" = "TENANT"`` lines."""
    if not path.is_file():
        raise ConfigError(f'keys file {path} does not exist (expected TOML with a [keys] table of "KEY" = "TENANT")')
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8")).get("keys")
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"keys file {path}: not valid TOML: {e}") from None
    if not isinstance(table, dict) or not all(isinstance(t, str) for t in table.values()):
        raise ConfigError(f'keys file {path} must hold a [keys] table of "KEY" = "TENANT" strings')
    return list(table.items())


def load_keys(*, file: Path | None = None, pairs: Sequence[str] = (), env: str | None = None) -> dict[str, str]:
    """``{key: tenant}`` from a keys file, ``$EVOLVE_API_KEYS`` and ``--key`` items; at least one is required."""
    sources = [(str(file), keys_file(file))] if file is not None else []
    sources += [("$EVOLVE_API_KEYS", parse_pairs((env or "").split(","), "$EVOLVE_API_KEYS"))]
    sources += [("--key", parse_pairs(pairs, "--key"))]
    found: dict[str, str] = {}
    for where, items in sources:
        for key, tenant in items:
            if found.setdefault(key, tenant) != tenant:
                raise ConfigError(f"{where}: one API key is given to two tenants ({found[key]!r} and {tenant!r})")
    from apps.server import check_keys

    return check_keys(found)


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
        raise ConfigError(INSTALL_HINT) from e
    from apps.server import create_app
    from evolve.deploy.serving import Deployment
    from evolve.spec import load_spec

    keys = load_keys(file=args.keys, pairs=args.key, env=os.environ.get("EVOLVE_API_KEYS"))
    spec = load_spec(args.spec)
    with listen(args.host, args.port) as sock:  # before the models load: a busy port fails fast
        deployment = Deployment(spec)
        banner = [f"evolve serve: model {deployment.model_id!r} at {base_url(sock)}", tenants_line(keys)]
        serve_until_stopped(sock, lambda: create_app(deployment, keys), banner, args.log_level, deployment.close)


def tenants_line(keys: Mapping[str, str]) -> str:
    return f"tenants: {', '.join(sorted(set(keys.values())))}"


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
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        close()


def exit_on_signals() -> dict[int, Any]:
    """SIGINT/SIGTERM end the process through ``SystemExit`` (no traceback, ``finally`` blocks run).

    uvicorn shuts down gracefully on either, then re-raises the signal it caught; with the default
    handlers that would kill the process before the deployment saves its index (SIGTERM) or print a
    KeyboardInterrupt traceback (SIGINT). Returns the previous handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    return {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}


def add_serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``evolve serve SPEC [--host] [--port] [--keys FILE] [--key KEY=TENANT ...]``."""
    s = sub.add_parser("serve", help="an OpenAI-compatible API over the spec's team; bearer keys map to tenants")
    s.add_argument("spec", type=Path, help="the run's TOML spec (model, embedder, database, agents)")
    s.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=count(0, 65535), default=8000, help="port (default 8000; 0 picks a free one)")
    s.add_argument("--keys", type=Path, default=None, metavar="FILE", help='TOML file: [keys] "KEY" = "TENANT"')
    s.add_argument("--key", action="append", default=[], metavar="KEY=TENANT",
                   help="an API key and its tenant (repeatable; also $EVOLVE_API_KEYS='k1=alice,k2=bob')")  # fmt: skip
    levels = ["critical", "error", "warning", "info", "debug"]
    s.add_argument("--log-level", default="info", choices=levels, help="the server's log level (default info)")
    s.set_defaults(func=cmd_serve)
