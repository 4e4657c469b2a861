"""The playground on the embedded default, seen through a real browser: the evidence that it works there.

The embedded default spec (``data/facility_codes.toml``: SmolLM2-135M-Instruct on the CPU, MiniLM,
SQLite + FAISS; no API key) first runs a few rounds with ``evolve run`` so the agent has memories and a
learning curve; then ``streamlit run`` serves the playground, Debian's Chromium asks one question in the
chat, opens "Why these memories", and screenshots are saved of the chat, the memory tab and the learning
tab. The spec and its tasks are copied into a temporary folder (its ``runs/evolve.db`` lands beside the
copy), which is also EVOLVE_HOME and the working directory, so nothing of the user's or the repo's is touched.

Run: python -m bench.playground_screenshot [--rounds 2] [--question "..."]
Writes bench/results/playground_default.png (chat), playground_default_memory.png,
playground_default_learning.png and playground_default.json (timings, the answer, the rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from apps.playground_browser import ask, chromium_page, find_chromium, open_expander, open_tab, serve
from apps.playground_cli import DEFAULT_SPEC, playground_env
from bench.common import machine
from connectors import make_engine
from evolve import list_runs
from evolve.envs.textmatch import matches_normalised

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
QUESTION = "I need the Harbor warehouse door code, please."
EXPECTED = "6305"  # data/facility_codes.jsonl: harbor-warehouse-door


def spec_copy(folder: Path) -> Path:
    """The default spec and its tasks file copied into ``folder`` (a spec's database lives beside it)."""
    for source in (DEFAULT_SPEC, DEFAULT_SPEC.with_suffix(".jsonl")):
        shutil.copy2(source, folder / source.name)
    return folder / DEFAULT_SPEC.name


def run_rounds(folder: Path, spec: Path, rounds: int, env: dict[str, str]) -> float:
    """``evolve run`` on ``spec`` in ``folder``: memories and rounds for the playground to show."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "apps.cli", "run", str(spec), "--rounds", str(rounds), "--quiet"],
        cwd=folder,
        env=env,
        check=True,
    )
    return time.perf_counter() - started


def screenshots(url: str, question: str, out: Path, timeout_s: float) -> dict[str, Any]:
    """Ask in the browser and save the three screenshots; returns the answer and the timings."""
    with chromium_page(width=1440, height=1300) as page:
        started = time.perf_counter()
        page.goto(url)
        page.wait_for_selector('[data-testid="stChatInputTextArea"]', timeout=timeout_s * 1000)
        page_ready = time.perf_counter() - started
        started = time.perf_counter()
        answer = ask(page, question, timeout_s=timeout_s)
        first_answer = time.perf_counter() - started
        open_expander(page, "Why these memories")
        page.screenshot(path=str(out / "playground_default.png"))
        open_tab(page, "Memory")
        page.screenshot(path=str(out / "playground_default_memory.png"))
        open_tab(page, "Learning")
        page.screenshot(path=str(out / "playground_default_learning.png"))
    return {"answer": answer, "page_ready_s": round(page_ready, 1), "first_answer_s": round(first_answer, 1)}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="evolve run rounds before the chat (0: none)")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the page and the answer")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if find_chromium() is None:
        raise SystemExit("no chromium on PATH: run scripts/install_chromium.sh first")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="evolve-playground-") as tmp:
        folder = Path(tmp)
        env = playground_env({**os.environ, "EVOLVE_HOME": str(folder / "home")})
        spec = spec_copy(folder)
        run_s = run_rounds(folder, spec, args.rounds, env) if args.rounds else 0.0
        started = time.perf_counter()
        with serve(spec, env=env, cwd=folder, log_path=folder / "streamlit.log", timeout=args.timeout) as url:
            healthy = time.perf_counter() - started
            seen = screenshots(url, args.question, args.out, args.timeout)
        curves = list_runs(make_engine(f"sqlite:///{folder / 'runs' / 'evolve.db'}"))
    result = {
        "spec": str(DEFAULT_SPEC.relative_to(ROOT)),
        "question": args.question,
        "expected": EXPECTED,
        **seen,
        "correct": matches_normalised(EXPECTED, seen["answer"]),  # the task's own checker
        "rounds_before": args.rounds,
        "run_s": round(run_s, 1),
        "server_healthy_s": round(healthy, 1),
        "success_rate_per_round": {n: [m.success_rate for m in ms] for n, ms in curves.items()},
        "screenshots": [f"playground_default{s}.png" for s in ("", "_memory", "_learning")],
        "machine": machine(),
    }
    (args.out / "playground_default.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))
    return result


if __name__ == "__main__":
    main()
