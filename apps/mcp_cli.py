"""``evolve mcp SPEC``: serve the spec's memory as an MCP server (``evolve.serve.protocols.mcp``).

Two transports:

- ``--transport stdio`` (the default): an MCP client starts ``evolve mcp SPEC --tenant NAME`` as a
  subprocess and speaks MCP over its stdin and stdout. One process serves one tenant, named by
  ``--tenant`` (required: without it every client on the machine would write to one memory unnoticed;
  under ``[serve] memory = "base"`` every tenant reads and rates the trained run itself). stdout carries
  the protocol only: everything else goes to stderr.
- ``--transport http``: streamable HTTP at ``http://HOST:PORT/mcp`` (``evolve.serve.protocols.mcp_http``);
  every request carries ``Authorization: Bearer <key>`` and the key names the tenant (401 otherwise). Keys
  come from the same places as ``evolve serve``'s: ``--key KEY=TENANT`` (repeatable), ``$EVOLVE_API_KEYS``
  (``"key1=alice,key2=bob"``) and a TOML file (``--keys FILE``) with a ``[keys]`` table
  (``evolve.serve.protocols.keys``).

The operator (``evolve.serve.protocols.mcp_operator``: distrust a writer, undo it, list and release held
memories) gets a server of its own at the same endpoint: over HTTP, a session whose bearer key is an operator
key (``--admin-key KEY``, ``$EVOLVE_ADMIN_KEYS``, the keys file's ``[admin]`` table) sees those four tools and
no tenant's, and a tenant's session never sees them; without an operator key nobody does. Over stdio,
``--admin`` instead of ``--tenant`` serves them: whoever starts the process can open its database anyway
(``evolve memory distrust``), so its owner is the operator, and no key is asked.

Over HTTP, ``GET /metrics`` counts the requests, recalls, memories remembered and ratings (``--metrics-tenants``
and ``--otel`` as ``evolve serve`` takes them); stdio has neither.

A tenant's memories are those ``evolve serve`` keeps for it (run ``<run>@<tenant>``): what an MCP
client remembers and rates is what the served team recalls, and the other way round.

Example:
    >>> # evolve mcp data/facility_codes.toml --tenant Zürich-Nordhafen-Logistik-Team-07
    >>> # evolve mcp data/facility_codes.toml --transport http --port 8200 --key sk-zurich-3f9c=Zürich-Nordhafen
    >>> # evolve mcp data/facility_codes.toml --admin   # the operator's tools, over stdio
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path

from apps.options import (
    add_admin_key,
    add_log_level_alias,
    add_telemetry,
    count,
    server_log_level,
    server_metrics,
    server_tracing,
)
from apps.serve_cli import base_url, closing, listen, serve_until_stopped, tenants_line
from connectors import ConfigError
from evolve.serve.protocols.keys import ADMIN_ENV, check_base_memory, load_admin_keys, load_keys


def cmd_mcp(args: argparse.Namespace) -> None:
    """``evolve mcp``: check the arguments and the keys, load the spec's memory, then serve until stopped."""
    try:
        import mcp  # noqa: F401 (checked before the store opens)
        import uvicorn  # noqa: F401
    except ImportError as e:
        from evolve.serve.protocols.mcp import INSTALL_HINT

        raise ConfigError(INSTALL_HINT) from e
    if args.transport == "stdio":
        serve_stdio(args)
    else:
        serve_http(args)


def serve_stdio(args: argparse.Namespace) -> None:
    from evolve.serve.protocols.mcp import create_mcp_server
    from evolve.serve.protocols.mcp_operator import create_operator_server
    from evolve.serve.tenant_memory import TenantMemory
    from evolve.spec import check_tenant, load_spec

    if (args.tenant is None) == (not args.admin):
        raise ConfigError(
            "evolve mcp over stdio serves one tenant: name it with --tenant NAME (its memories are those "
            "`evolve serve` keeps for that tenant), or the operator's tools with --admin (one of the two); "
            "or serve many tenants with --transport http and bearer keys"
        )
    http_only = [args.key, args.admin_key, args.keys, args.port, args.host, args.log_level]
    if any(v not in (None, []) for v in http_only) or args.metrics_tenants or args.otel:
        raise ConfigError(
            "--key, --keys, --admin-key, --host, --port, --log-level, --metrics-tenants and --otel are for "
            "--transport http; over stdio --tenant names the tenant (or --admin the operator) and the client reads "
            "the server's messages"
        )
    tenant = None if args.admin else check_tenant(args.tenant)
    with redirect_stdout(sys.stderr):  # stdout is the protocol's: nothing else may reach it
        spec = load_spec(args.spec)
        memory = TenantMemory(spec)
    stopped: SystemExit | None = None
    try:
        if tenant is None:
            server = create_operator_server(memory.store)
            print(f"evolve mcp: the operator's tools over run {spec.run.name!r} on stdio", file=sys.stderr, flush=True)
        else:
            server = create_mcp_server(memory, tenant_of=lambda: tenant)
            run = memory.run_name(tenant)
            print(f"evolve mcp: memory of run {run!r} for tenant {tenant!r} on stdio", file=sys.stderr, flush=True)
        server.run("stdio")  # until the client closes stdin
    except SystemExit as e:  # SIGTERM (apps.cli turns it into SystemExit(143))
        stopped = e
    finally:
        memory.close()  # saves the vector index
    if stopped is not None:
        # The SDK's stdin reader is a non-daemon worker thread blocked in read(): the interpreter would wait
        # for it until the client closes stdin. The store is closed; leave without waiting.
        logging.shutdown()
        sys.stderr.flush()
        os._exit(stopped.code if isinstance(stopped.code, int) else 1)


def serve_http(args: argparse.Namespace) -> None:
    from evolve.serve.protocols.mcp_http import ENDPOINT, http_app
    from evolve.serve.protocols.telemetry import check_tenant_labels
    from evolve.serve.tenant_memory import TenantMemory
    from evolve.spec import load_spec

    if args.tenant is not None or args.admin:
        raise ConfigError(
            "--tenant and --admin are for --transport stdio; over HTTP each bearer key names its tenant (--key) "
            "or the operator (--admin-key)"
        )
    try:
        keys = load_keys(file=args.keys, pairs=args.key, env=os.environ.get("EVOLVE_API_KEYS"))
        admin = load_admin_keys(tenants=keys, file=args.keys, keys=args.admin_key, env=os.environ.get(ADMIN_ENV))
    except ConfigError as e:  # the key sources and checks are evolve serve's: say which command it was
        raise ConfigError(str(e).replace("evolve serve", "evolve mcp --transport http")) from None
    check_tenant_labels(args.metrics_tenants, admin, command="evolve mcp")
    tracing = server_tracing(args, "evolve mcp")
    spec = load_spec(args.spec)
    check_base_memory(spec.serve.memory, keys)
    port = 8200 if args.port is None else args.port
    host, log_level = args.host or "127.0.0.1", server_log_level(args, "warning")
    with listen(host, port) as sock:  # before the store opens: a busy port fails fast
        memory = TenantMemory(spec)
        metrics = server_metrics(args, store=memory.store, ledger=memory.store.engine)
        url = base_url(sock).removesuffix("/v1") + ENDPOINT
        banner = [f"evolve mcp: memory of run {spec.run.name!r} at {url}", tenants_line(keys, admin)]
        make_app = lambda: http_app(memory, keys, host=host, admin_keys=admin, metrics=metrics, tracing=tracing)  # noqa: E731
        serve_until_stopped(sock, make_app, banner, log_level, closing(memory.close, tracing))


def add_mcp_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``evolve mcp SPEC [--transport stdio|http] [--tenant NAME | --admin] [--host] [--port] [--keys]
    [--key] [--admin-key]``."""
    s = sub.add_parser("mcp", help="serve the spec's memory to MCP clients (recall, remember, feedback), per tenant")
    s.add_argument("spec", type=Path, help="the run's TOML spec (database, embedder, memory, agents)")
    s.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                   help="stdio (default: an MCP client starts this command) or streamable HTTP")  # fmt: skip
    s.add_argument("--tenant", default=None, help="stdio: the tenant whose memories to serve (or --admin)")
    s.add_argument("--admin", action="store_true",
                   help="stdio: serve the operator's tools (distrust, undo, release, quarantined), not a tenant's")  # fmt: skip
    s.add_argument("--host", default=None, help="http: interface to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=count(0, 65535), default=None, help="http: port (default 8200; 0 picks a free one)")
    s.add_argument("--keys", type=Path, default=None, metavar="FILE", help='http: TOML file: [keys] "KEY" = "TENANT"')
    s.add_argument("--key", action="append", default=[], metavar="KEY=TENANT",
                   help="http: an API key and its tenant (repeatable; also $EVOLVE_API_KEYS='k1=alice,k2=bob')")  # fmt: skip
    add_admin_key(s, only="http: ")
    add_telemetry(s, only="http: ")
    add_log_level_alias(s)
    s.set_defaults(func=cmd_mcp)
