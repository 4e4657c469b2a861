"""``evolve playground [SPEC]``: start the Streamlit playground (``apps/playground.py``) on a run spec.

The command runs ``python -m streamlit run apps/playground.py`` headless (no browser is opened, no usage
statistics are sent) on 127.0.0.1 by default, and passes the spec, tenant and database to the script
after ``--``. The script also reads ``EVOLVE_PLAYGROUND_SPEC`` (and ``…_TENANT``, ``…_DB``), which is
how tests and ``streamlit run`` without arguments choose a spec.

Example:
    >>> argv = streamlit_argv(Path("spec.toml"), port=8600)
    >>> argv[1:4], argv[argv.index("--") + 1 :]
    (['-m', 'streamlit', 'run'], ['--spec', 'spec.toml'])
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from apps.options import Deprecated, count
from connectors import EvolveError
from connectors.install import extra_hint
from evolve.envs.bundled import bundled_root, spec_file

SCRIPT = Path(__file__).resolve().with_name("playground.py")
DEFAULT_SPEC = bundled_root() / "facility_codes.toml"
ENV_SPEC, ENV_TENANT, ENV_DB = "EVOLVE_PLAYGROUND_SPEC", "EVOLVE_PLAYGROUND_TENANT", "EVOLVE_PLAYGROUND_DB"


def script_args(argv: Sequence[str]) -> argparse.Namespace:
    """The script's own options (after ``--``), falling back to the environment, then to the default spec.

    Unknown arguments are ignored: under Streamlit's ``AppTest`` ``sys.argv`` is the test runner's.
    """
    p = argparse.ArgumentParser(prog="apps/playground.py", add_help=False, allow_abbrev=False)
    p.add_argument("--spec", default=None, help=f"run spec (default: ${ENV_SPEC}, else {DEFAULT_SPEC.name})")
    p.add_argument("--tenant", default=None, help=f"start as this tenant (default: ${ENV_TENANT})")
    p.add_argument(
        "--db", default=None, help=f"SQLAlchemy URL overriding the spec's [run] database (default: ${ENV_DB})"
    )
    args, _unknown = p.parse_known_args(list(argv))
    args.spec = Path(args.spec or os.environ.get(ENV_SPEC) or DEFAULT_SPEC)
    args.tenant = args.tenant or os.environ.get(ENV_TENANT) or None
    args.db = args.db or os.environ.get(ENV_DB) or None
    return args


def streamlit_argv(
    spec: Path,
    *,
    port: int = 8501,
    address: str = "127.0.0.1",
    tenant: str | None = None,
    db: str | None = None,
    python: str = sys.executable,
) -> list[str]:
    """The command line that serves the playground headless on ``address:port``."""
    argv = [python, "-m", "streamlit", "run", str(SCRIPT)]
    argv += ["--server.headless", "true", "--server.port", str(port), "--server.address", address]
    argv += [
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        "--client.toolbarMode",
        "minimal",
    ]
    argv += ["--", "--spec", str(spec)]
    if tenant:
        argv += ["--tenant", tenant]
    if db:
        argv += ["--db", db]
    return argv


def playground_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for the app: offline model loading, as everywhere in Evolve."""
    env = dict(os.environ if base is None else base)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.setdefault(key, "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def cmd_playground(args: argparse.Namespace) -> None:
    """Validate the spec here (a clear error beats a stack trace in the browser), then run Streamlit."""
    from evolve.spec import check_tenant, load_spec

    if importlib.util.find_spec("streamlit") is None:
        raise EvolveError(f"the playground needs Streamlit: {extra_hint('playground')}")
    spec_path = spec_file(args.spec or DEFAULT_SPEC)  # a bundled spec by name too, as load_spec finds it
    load_spec(spec_path)
    if args.tenant:
        check_tenant(args.tenant)
    argv = streamlit_argv(spec_path.resolve(), port=args.port, address=args.host, tenant=args.tenant, db=args.db)
    print(f"evolve playground: http://{args.host}:{args.port}  (spec {spec_path}; Ctrl-C stops it)", flush=True)
    try:
        code = run_group(argv, env=playground_env())
    except KeyboardInterrupt:
        return
    if code not in (0, -2, -15, 130, 143):  # stopped with Ctrl-C or SIGTERM
        raise EvolveError(f"streamlit exited with status {code}")


def run_group(argv: Sequence[str], *, env: dict[str, str], grace: float = 10.0) -> int:
    """Run ``argv`` as the leader of a new process group and return its exit status.

    However this process stops waiting (Ctrl-C; SIGTERM, which ``evolve`` turns into ``SystemExit``; an error),
    the whole group gets SIGTERM, and SIGKILL after ``grace`` seconds, before the exception goes on: no child
    keeps serving the port once the command is gone. Its own group keeps Ctrl-C at a terminal from reaching
    the child behind this process's back; this process stops it instead.
    """
    proc = subprocess.Popen(list(argv), env=env, start_new_session=True)
    try:
        return proc.wait()
    finally:
        if proc.returncode is None:
            stop_group(proc, grace)


def stop_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to ``proc``'s process group (Streamlit stops its server on it), then SIGKILL to what is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # a member that ignored SIGTERM, or the leader itself
    proc.wait()


def add_playground_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``evolve playground [SPEC] [--port N] [--host H] [--tenant T] [--db URL]``."""
    p = sub.add_parser("playground", help="the Streamlit playground: chat, feedback, memories, prompts, curves")
    p.add_argument("spec", nargs="?", type=Path, default=None, help=f"run spec (default: {DEFAULT_SPEC.name})")
    p.add_argument("--port", type=count(1, 65535), default=8501, help="port to serve the playground on (default 8501)")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1; 0.0.0.0: every one)")
    p.add_argument("--address", dest="host", action=Deprecated, note="use --host")
    p.add_argument("--tenant", default=None, help="start as this tenant (the sidebar can change it)")
    p.add_argument("--db", default=None, metavar="URL", help="use this database instead of the spec's [run] database")
    p.set_defaults(func=cmd_playground)


__all__ = [
    "DEFAULT_SPEC",
    "SCRIPT",
    "add_playground_parser",
    "cmd_playground",
    "playground_env",
    "run_group",
    "script_args",
    "streamlit_argv",
]
