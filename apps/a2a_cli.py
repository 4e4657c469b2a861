"""``evolve a2a SPEC``: serve the spec's team as an A2A agent (``evolve.serve.protocols.a2a``) with uvicorn.

Keys come from the same places as ``evolve serve``'s: ``--key KEY=TENANT`` (repeatable),
``$EVOLVE_API_KEYS`` (``"key1=alice,key2=bob"``) and a TOML file (``--keys FILE``) with a ``[keys]``
table; each maps a bearer key to its tenant. The socket is bound before the models load, so a busy port
fails fast and the printed agent card URL is the real one; ``--url`` names the address clients reach it at
when that differs (a proxy, ``--host 0.0.0.0``). An A2A agent has no operator routes: it reads no operator
key (``--admin-key`` is ``evolve serve``'s and ``evolve mcp``'s), and one is refused as any unknown key; so its
``/metrics`` (public) never labels tenants. ``--otel`` traces every request.

Example:
    >>> # evolve a2a data/facility_codes.toml --port 8100 --key sk-alice-3f9c=alice
    >>> # evolve a2a: agent 'facility-codes' at http://127.0.0.1:8100/.well-known/agent-card.json
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from apps.options import add_log_level_alias, add_telemetry, count, server_log_level, server_metrics, server_tracing
from apps.serve_cli import base_url, closing, listen, serve_until_stopped, tenants_line
from connectors import ConfigError
from connectors.install import extra_hint
from evolve.serve.protocols.keys import check_base_memory, load_keys, tenant_lookup

INSTALL_HINT = f"evolve a2a needs the a2a-sdk with its HTTP server and uvicorn: {extra_hint('a2a')}"
CARD_PATH = "/.well-known/agent-card.json"


def cmd_a2a(args: argparse.Namespace) -> None:
    """``evolve a2a``: load the keys and the spec, then serve until interrupted."""
    try:
        import uvicorn  # noqa: F401 (checked before the models load)

        from evolve.serve.protocols.a2a import create_a2a_app
    except ImportError as e:
        raise ConfigError(INSTALL_HINT) from e
    from evolve.serve.deployment import Deployment
    from evolve.spec import load_spec

    try:
        keys = load_keys(file=args.keys, pairs=args.key, env=os.environ.get("EVOLVE_API_KEYS"))
    except ConfigError as e:  # the key sources and checks are evolve serve's: say which command it was
        raise ConfigError(str(e).replace("evolve serve", "evolve a2a")) from None
    if args.url is not None and not args.url.startswith(("http://", "https://")):
        raise ConfigError(
            f"--url must be the base URL clients reach this agent at (http(s)://host:port), got {args.url!r}"
        )
    tracing = server_tracing(args, "evolve a2a")
    spec = load_spec(args.spec)
    check_base_memory(spec.serve.memory, keys)
    tenant_of = tenant_lookup(keys)
    with listen(args.host, args.port) as sock:  # before the models load: a busy port fails fast
        url = (args.url or base_url(sock).removesuffix("/v1")).rstrip("/")
        deployment = Deployment(spec)
        metrics = server_metrics(args, store=deployment.store, ratings=deployment.engine, ledger=deployment.engine)
        banner = [f"evolve a2a: agent {spec.run.name!r} at {url}{CARD_PATH}", tenants_line(keys)]
        make_app = lambda: create_a2a_app(deployment, url=url, tenant_of=tenant_of, metrics=metrics, tracing=tracing)  # noqa: E731
        serve_until_stopped(sock, make_app, banner, server_log_level(args, "info"), closing(deployment.close, tracing))


def add_a2a_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``evolve a2a SPEC [--host] [--port] [--url] [--keys FILE] [--key KEY=TENANT ...]``."""
    s = sub.add_parser("a2a", help="serve the spec's team as an A2A agent (JSON-RPC); bearer keys map to tenants")
    s.add_argument("spec", type=Path, help="the run's TOML spec (model, embedder, database, agents)")
    s.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=count(0, 65535), default=8100, help="port (default 8100; 0 picks a free one)")
    s.add_argument("--url", default=None, help="the base URL clients reach this agent at (default: http://HOST:PORT)")
    s.add_argument("--keys", type=Path, default=None, metavar="FILE", help='TOML file: [keys] "KEY" = "TENANT"')
    s.add_argument("--key", action="append", default=[], metavar="KEY=TENANT",
                   help="an API key and its tenant (repeatable; also $EVOLVE_API_KEYS='k1=alice,k2=bob')")  # fmt: skip
    add_telemetry(s, tenants=False)
    add_log_level_alias(s)
    s.set_defaults(func=cmd_a2a)
