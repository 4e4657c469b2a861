"""`python -m bench.reliability [--full] [--only PART ...]`: every reliability figure, in one report.

Each part lives in ``bench/reliability_<part>.py`` and exposes ``run(quick=True) -> dict`` with a title,
its figures as ``[label, value]`` rows and a note. Most parts run scenarios of ``tests/reliability/``,
which the tests assert the same guarantees on, on smaller runs.
Every part runs in its own process (a crash harness or a server it starts cannot disturb the next), and
a part that fails is reported as failed without stopping the others. The report goes to
``bench/results/RELIABILITY.md`` (and ``reliability.json``); a figure in ``MUST_BE_ZERO`` that is not
zero makes the run exit non-zero and is marked in the report.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import machine

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parents[1]
PARTS = ("crash", "crash_cli", "load", "bulk", "recall", "faults", "input", "security", "backup", "portable", "storage")
MARK = "@@reliability@@"

# Words that make a row a guarantee: its value must be 0 (items lost, calls that leaked, ...).
MUST_BE_ZERO = (
    "lost",
    "missing",
    "twice",
    "mismatch",
    "unanswered",
    "escaped",
    "leak",
    "changed",
    "differing",
    "failure",
    "5xx",
    "not evolveerror",
    "succeeded",
    "locked",
    "corrupt",
    "escaping",
    "disagree",
)


def run_part(part: str, quick: bool, pg_url: str | None = None) -> dict[str, Any]:
    """One part in a fresh interpreter; its dict plus seconds and exit status. A part whose ``run`` takes
    ``pg_url`` gets a fresh database on the server at ``pg_url`` (when one is given)."""
    code = (
        "import inspect, json, sys\n"
        f"from bench.reliability_{part} import run\n"
        "kw = {}\n"
        f"if {pg_url!r} and 'pg_url' in inspect.signature(run).parameters:\n"
        "    from tests.support.postgres import create_database\n"
        f"    kw['pg_url'] = create_database({pg_url!r}, 'reliability_{part}')\n"
        f"out = run(quick={quick}, **kw)\n"
        f"print({MARK!r} + json.dumps(out, default=str), flush=True)\n"
    )
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    seconds = round(time.perf_counter() - t0, 1)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-12:]
        return {"title": part, "rows": [], "notes": "", "seconds": seconds, "error": "\n".join(tail) or "no output"}
    out = json.loads(lines[-1][len(MARK) :])
    out["seconds"] = seconds
    return out


@contextmanager
def postgres(wanted: bool) -> Iterator[str | None]:
    """The PostgreSQL + pgvector test server (``tests/support/postgres.py``) for the parts that measure it."""
    if not wanted:
        yield None
        return
    from tests.support.postgres import start_postgres, stop_postgres

    folder = Path(tempfile.mkdtemp(prefix="evolve-reliability-pg-"))
    try:
        yield start_postgres(folder / "data")
    finally:
        stop_postgres(folder / "data")
        shutil.rmtree(folder, ignore_errors=True)


def broken(rows: Sequence[Sequence[Any]]) -> list[str]:
    """The guarantee rows (see ``MUST_BE_ZERO``) whose value is not zero."""
    bad = []
    for row in rows:
        label, value = str(row[0]), row[1]
        if any(w in label.lower() for w in MUST_BE_ZERO) and isinstance(value, (int, float)) and value != 0:
            bad.append(label)
    return bad


def render(parts: dict[str, dict[str, Any]], quick: bool, total: float) -> str:
    """RELIABILITY.md: how to re-run, then one table per part."""
    info = machine()
    lines = [
        "# Reliability: what was tried, and what was lost",
        "",
        f"Made by `python -m bench.reliability{'' if quick else ' --full'}` in {total:.0f} s on "
        f"{info.get('cpu_count', '?')} CPU cores ({info.get('cpu', '')}, Python {info.get('python', '')}). Each part is "
        "`bench/reliability_<part>.py`, measuring the scenarios of `tests/reliability/` at size; the tests assert the "
        "same guarantees on every `make test`.",
        "",
    ]
    for name, part in parts.items():
        lines += [f"## {part.get('title', name)}", ""]
        if "error" in part:
            lines += [f"**FAILED** after {part['seconds']} s:", "", "```", part["error"], "```", ""]
            continue
        bad = set(broken(part["rows"]))
        lines += ["| figure | value |", "|---|---|"]
        for label, value, *_ in part["rows"]:
            flag = " **(must be 0)**" if label in bad else ""
            lines.append(f"| {label} | {_fmt(value)}{flag} |")
        lines += [
            "",
            f"{part['notes']}".strip(),
            "",
            f"_{part['seconds']} s (`python -m bench.reliability_{name}`)_",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reliability", description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the larger runs (more trials, requests, examples)")
    parser.add_argument("--only", nargs="+", choices=PARTS, metavar="PART", help=f"run only these of {PARTS}")
    parser.add_argument("--no-pg", action="store_true", help="skip the PostgreSQL figures (no test server)")
    args = parser.parse_args(argv)
    quick = not args.full
    start = time.perf_counter()
    parts: dict[str, dict[str, Any]] = {}
    with postgres(not args.no_pg) as pg_url:
        for name in args.only or PARTS:
            print(f"=== reliability: {name} ===", flush=True)
            parts[name] = run_part(name, quick, pg_url)
            print(json.dumps(parts[name], indent=1, default=str), flush=True)
    total = time.perf_counter() - start
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "RELIABILITY.md").write_text(render(parts, quick, total), encoding="utf-8")
    record = {"quick": quick, "total_seconds": round(total, 1), "parts": parts, "machine": machine()}
    (RESULTS / "reliability.json").write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    failed = [n for n, p in parts.items() if "error" in p or broken(p["rows"])]
    print(f"\nreliability: {len(parts)} parts in {total:.0f} s; report in {RESULTS / 'RELIABILITY.md'}")
    if failed:
        print(f"failed or with a broken guarantee: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
